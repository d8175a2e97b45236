//! DPDK's arguments read as text: a port's device string (a vdev,
//! `net_x0,key=value,...`, or a PCI address) and the EAL arguments. Pure:
//! the packet pool's sizing (`crate::mbuf_pool`), the configuration's
//! checks and the start hints read them alike.

/// The value of `key` in a DPDK vdev string (`net_x0,key=value,...`).
pub fn devarg<'a>(device: &'a str, key: &str) -> Option<&'a str> {
    device
        .split(',')
        .skip(1)
        .find_map(|kv| kv.split_once('=').filter(|(k, _)| k.trim() == key))
        .map(|(_, v)| v.trim())
}

/// Whether the port's device is DPDK's `net_af_packet` driver.
pub fn is_af_packet(device: &str) -> bool {
    device.starts_with("net_af_packet")
}

/// The full form `DDDD:BB:DD.F` (lower case) of a PCI address, for the
/// short form `BB:DD.F` the domain EAL assumes, 0000; None for anything
/// else (a vdev). Device arguments after a comma are ignored.
pub fn pci_address(device: &str) -> Option<String> {
    let addr = device.split(',').next()?.trim();
    let (domain, rest) = match addr.matches(':').count() {
        2 => addr.split_once(':')?,
        1 => ("0", addr),
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str, digits: usize| {
        (!s.is_empty() && s.len() <= digits && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let (domain, bus, dev) = (hex(domain, 8)?, hex(bus, 2)?, hex(dev, 2)?);
    let func = hex(func, 1).filter(|&f| f <= 7 && dev <= 0x1f)?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func}"))
}

/// The value of an EAL option given as `--opt VALUE` or `--opt=VALUE`.
pub fn eal_arg_value(args: &[String], opt: &str) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == opt {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(opt).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}

/// The EAL memory the arguments ask for, in MiB: `-m N` / `-m=N` / `-mN`
/// (under `--no-huge`, all the memory EAL has). None when not given.
pub fn eal_memory_mib(eal_args: &[String]) -> Option<u64> {
    let mut it = eal_args.iter();
    while let Some(a) = it.next() {
        let value = match a.strip_prefix("-m") {
            Some("") => it.next().map(String::as_str),
            Some(rest) => Some(rest.strip_prefix('=').unwrap_or(rest)),
            None => None,
        };
        if let Some(v) = value {
            return v.trim().parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_are_written_in_full_and_vdevs_are_not_addresses() {
        assert_eq!(pci_address("0000:03:00.0").as_deref(), Some("0000:03:00.0"));
        assert_eq!(pci_address("03:00.1").as_deref(), Some("0000:03:00.1"));
        assert_eq!(pci_address("0000:7F:1F.7").as_deref(), Some("0000:7f:1f.7"));
        assert_eq!(
            pci_address("0000:03:00.0,rxq_pkt_fill=1").as_deref(),
            Some("0000:03:00.0")
        );
        for not in [
            "net_null0",
            "net_pcap0,rx_pcap=a:b.pcap",
            "net_tap0,iface=sl0",
            "0000:03:00.8",
            "0000:03:20.0",
            "0000:003:00.0",
            "",
        ] {
            assert_eq!(pci_address(not), None, "{not}");
        }
    }

    #[test]
    fn eal_options_are_read_in_both_spellings() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            eal_arg_value(&args(&["-l", "0", "--huge-dir", "/mnt/h"]), "--huge-dir").as_deref(),
            Some("/mnt/h")
        );
        assert_eq!(
            eal_arg_value(&args(&["--huge-dir=/mnt/h"]), "--huge-dir").as_deref(),
            Some("/mnt/h")
        );
        assert_eq!(eal_arg_value(&args(&["--huge-unlink"]), "--huge-dir"), None);
    }

    #[test]
    fn eal_memory_is_read_in_every_spelling() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            eal_memory_mib(&args(&["--no-huge", "-m", "256"])),
            Some(256)
        );
        assert_eq!(eal_memory_mib(&args(&["-m=512"])), Some(512));
        assert_eq!(eal_memory_mib(&args(&["-m64"])), Some(64));
        assert_eq!(eal_memory_mib(&args(&["--no-huge", "--no-pci"])), None);
    }
}
