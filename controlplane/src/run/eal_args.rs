//! The EAL arguments of a run: the configured ones, completed with what
//! the ports and workers need.

use controlplane::config::Config;
use controlplane::exception;

/// EAL arguments: the configured ones, plus what the ports and workers need
/// unless the operator already said it (devices, lcores, the runtime
/// directory's prefix: `file_prefix` if given, the stable name DPDK tools
/// attach to, else a private one so several instances and tests can run
/// side by side).
pub fn eal_args(cfg: &Config, file_prefix: Option<&str>) -> Vec<String> {
    let mut args = cfg.dataplane.eal_args.clone();
    let has = |args: &[String], flags: &[&str]| {
        args.iter().any(|a| {
            flags
                .iter()
                .any(|f| a == f || a.starts_with(&format!("{f}=")))
        })
    };
    if !has(&args, &["-l", "--lcores", "-c"]) {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Main lcore on CPU 0, worker i on CPU i (wrapping on small machines:
        // two pollers on one CPU work, just slower).
        let map: Vec<String> = (0..=usize::from(cfg.dataplane.workers))
            .map(|l| format!("{l}@{}", l % cpus))
            .collect();
        args.push(format!("--lcores={}", map.join(",")));
    }
    if !has(&args, &["--file-prefix", "--in-memory"]) {
        match file_prefix {
            Some(prefix) => args.push(format!("--file-prefix={prefix}")),
            None => args.push(format!("--file-prefix=sluice-{}", std::process::id())),
        }
    }
    for port in &cfg.dataplane.ports {
        if port.device.starts_with("net_") {
            args.push(format!("--vdev={}", with_af_packet_ring(&port.device)));
        } else {
            args.push("-a".into());
            args.push(port.device.clone());
        }
    }
    for (i, port) in cfg.dataplane.ports.iter().enumerate() {
        if let Some(tap) = &port.tap {
            args.push(format!("--vdev={}", exception::tap_vdev(i, tap)));
        }
    }
    args
}

/// Frames in each `net_af_packet` socket's RX (and TX) ring unless the
/// device string sets `framecnt`: 8192 frames of 2 KiB, 16 MiB per ring.
/// The driver's default, 512, is half a millisecond of a busy 1 Gbit/s
/// link: a 100 MB upload lost 2–10 % of its frames there, counted nowhere
/// DPDK reports, and the kernel's fanout then rolled flows over to other
/// queues, reordering TCP. 8192 rides out a worker's stalls of several
/// milliseconds at the rates af_packet reaches (~1 Mpps per queue).
pub const AF_PACKET_FRAMECNT: u32 = 8192;

/// The device string, with [`AF_PACKET_FRAMECNT`] added to a
/// `net_af_packet` device that does not size its ring itself.
pub fn with_af_packet_ring(device: &str) -> String {
    let is_af_packet = device.starts_with("net_af_packet");
    if !is_af_packet || device.split(',').any(|kv| kv.starts_with("framecnt=")) {
        return device.to_string();
    }
    format!("{device},framecnt={AF_PACKET_FRAMECNT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// af_packet gets a line-rate ring unless the
    /// operator sized it; other devices are left alone.
    #[test]
    fn af_packet_devices_get_a_large_ring_by_default() {
        assert_eq!(
            with_af_packet_ring("net_af_packet0,iface=lb0,qpairs=2"),
            "net_af_packet0,iface=lb0,qpairs=2,framecnt=8192"
        );
        assert_eq!(
            with_af_packet_ring("net_af_packet0,iface=lb0,framecnt=1024"),
            "net_af_packet0,iface=lb0,framecnt=1024"
        );
        assert_eq!(
            with_af_packet_ring("net_pcap0,rx_pcap=a.pcap"),
            "net_pcap0,rx_pcap=a.pcap"
        );
    }
}
