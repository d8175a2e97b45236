//! Parsers for scalar config values. Each returns the problem and the fix,
//! so `validate` can attach the source position and field path.

use std::net::IpAddr;
use std::time::Duration;

use super::model::{Cidr, PortRange};

/// (what is wrong, how to fix it)
pub(crate) type Problem = (String, String);

pub(crate) fn duration(s: &str) -> Result<Duration, Problem> {
    let bad = || {
        (
            format!("invalid duration {s:?}"),
            "write a whole number followed by a unit: \"500ms\", \"5s\", \"2m\" or \"1h\"".into(),
        )
    };
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(bad()),
    };
    ms.map(Duration::from_millis).ok_or_else(bad)
}

/// A duration as `duration` reads it: whole seconds as "5s", else "500ms".
pub(crate) fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A MAC address as text, `02:00:00:00:00:0a`: what [`mac`] reads.
pub(crate) fn mac_text(m: &[u8]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub(crate) fn mac(s: &str) -> Result<[u8; 6], Problem> {
    let bad = || {
        (
            format!("invalid MAC address {s:?}"),
            "write six hex bytes separated by colons, e.g. \"02:00:00:00:00:10\"".into(),
        )
    };
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    if out[0] & 1 == 1 {
        return Err((
            format!("MAC address {s} is a multicast/broadcast address"),
            "use a unicast MAC (the lowest bit of the first byte clear)".into(),
        ));
    }
    Ok(out)
}

pub(crate) fn ip(s: &str) -> Result<IpAddr, Problem> {
    s.trim().parse::<IpAddr>().map_err(|_| {
        (
            format!("invalid IP address {s:?}"),
            "write an IPv4 address like \"192.0.2.10\" or an IPv6 address like \"2001:db8::10\", \
             without a prefix length"
                .into(),
        )
    })
}

/// `a.b.c.d/len` or `v6/len`. With `host_bits_ok` false (subnets), bits
/// beyond the prefix must be zero — a typo there usually means a wrong prefix.
pub(crate) fn cidr(s: &str, host_bits_ok: bool) -> Result<Cidr, Problem> {
    let example = if host_bits_ok {
        "\"192.0.2.1/24\" or \"2001:db8::1/64\""
    } else {
        "\"10.1.0.0/16\" or \"2001:db8:1::/48\""
    };
    let bad = || {
        (
            format!("invalid address/prefix {s:?}"),
            format!("write an address and a prefix length, e.g. {example}"),
        )
    };
    let (a, p) = s.trim().split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let prefix: u8 = p.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err((
            format!("prefix length /{prefix} is longer than /{max}"),
            format!("use a prefix length between 0 and {max}"),
        ));
    }
    let c = Cidr { addr, prefix };
    if !host_bits_ok {
        let network = network_of(c);
        if network != addr {
            return Err((
                format!("{s} has host bits set"),
                format!("write the network address: \"{network}/{prefix}\""),
            ));
        }
    }
    Ok(c)
}

fn network_of(c: Cidr) -> IpAddr {
    match c.addr {
        IpAddr::V4(a) => {
            let m = if c.prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(c.prefix))
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if c.prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(c.prefix))
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Matches `s` against the allowed spellings. Case-sensitive on purpose:
/// the GCP API spells these values in one way and so does the docs.
pub(crate) fn choice<T: Copy>(s: &str, allowed: &[(&str, T)]) -> Result<T, Problem> {
    allowed
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<String> = allowed.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            let close = allowed
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(s))
                .map(|(n, _)| format!("did you mean \"{n}\"? "))
                .unwrap_or_default();
            (
                format!("unknown value {s:?}"),
                format!("{close}use one of {}", names.join(", ")),
            )
        })
}

/// Bytes of a flow hash key: 16 to 64 (MG-2).
pub(crate) const FLOW_KEY_BYTES: (usize, usize) = (16, 64);

/// A flow hash key in hex (surrounding whitespace ignored). The messages
/// never repeat the key.
pub(crate) fn hex_key(s: &str) -> Result<Vec<u8>, Problem> {
    let s = s.trim();
    let (lo, hi) = FLOW_KEY_BYTES;
    let hint = || {
        format!(
            "give {}–{} hex digits ({lo}–{hi} random bytes), e.g. the output of \
             `openssl rand -hex 32`",
            2 * lo,
            2 * hi
        )
    };
    if let Some(bad) = s.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err((
            format!("the flow hash key contains {bad:?}, not a hex digit"),
            hint(),
        ));
    }
    if !s.len().is_multiple_of(2) || s.len() < 2 * lo || s.len() > 2 * hi {
        return Err((
            format!("the flow hash key has {} hex digits", s.len()),
            hint(),
        ));
    }
    Ok((0..s.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect())
}

pub(crate) fn int_in<T: TryFrom<i64>>(v: i64, lo: i64, hi: i64, what: &str) -> Result<T, Problem> {
    if v < lo || v > hi {
        return Err((
            format!("{what} {v} is out of range"),
            format!("use a value from {lo} to {hi}"),
        ));
    }
    T::try_from(v).map_err(|_| (format!("{what} {v} is out of range"), String::new()))
}

/// An 802.1Q VLAN ID a trunk port may carry: 1..=4094 (0 marks a
/// priority-tagged frame of no VLAN, 4095 is reserved).
pub(crate) fn vlan_id(v: i64) -> Result<u16, Problem> {
    let hint = "use a VLAN ID from 1 to 4094, or remove `vlan` for an untagged port";
    match v {
        1..=4094 => Ok(v as u16),
        0 => Err((
            "vlan 0 is not a VLAN: ID 0 marks priority-tagged frames".into(),
            hint.into(),
        )),
        4095 => Err(("vlan 4095 is reserved by 802.1Q".into(), hint.into())),
        _ => Err((format!("vlan {v} is out of range"), hint.into())),
    }
}

/// `"80"`, `"8000-8080"` or `"ALL"` (FR-1).
pub(crate) fn port_range(s: &str) -> Result<PortRange, Problem> {
    let hint = "write one port (\"80\"), an inclusive range (\"8000-8080\") or \"ALL\"";
    let s = s.trim();
    if s == "ALL" {
        return Ok(PortRange::ALL);
    }
    let one = |p: &str| -> Result<u16, Problem> {
        match p.trim().parse::<u16>() {
            Ok(v) if v >= 1 => Ok(v),
            _ => Err((format!("invalid port {p:?} in {s:?}"), hint.into())),
        }
    };
    let (first, last) = match s.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let p = one(s)?;
            (p, p)
        }
    };
    if first > last {
        return Err((
            format!("port range {s:?} is reversed"),
            format!("write the lower port first: \"{last}-{first}\""),
        ));
    }
    Ok(PortRange { first, last })
}

pub(crate) fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let n = u64::from(n);
    let mut d = 2u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// The nearest primes around `n`, for the hint.
pub(crate) fn primes_near(n: u32) -> (Option<u32>, Option<u32>) {
    let below = (2..n).rev().find(|&k| is_prime(k));
    let above = (n.saturating_add(1)..=u32::MAX).find(|&k| is_prime(k));
    (below, above)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("0s").unwrap(), Duration::ZERO);
        assert!(duration("5").is_err());
        assert!(duration("s").is_err());
        assert!(duration("1.5s").is_err());
    }

    #[test]
    fn macs_cidrs_ports() {
        assert_eq!(mac("02:00:00:00:00:0a").unwrap(), [2, 0, 0, 0, 0, 10]);
        assert!(mac("02:00:00:00:00").is_err());
        assert!(mac("01:00:5e:00:00:01").is_err());
        assert!(cidr("10.1.0.0/16", false).is_ok());
        assert!(cidr("10.1.0.1/16", false).is_err());
        assert!(cidr("10.1.0.1/16", true).is_ok());
        assert!(cidr("10.1.0.1/33", true).is_err());
        assert_eq!(port_range("ALL").unwrap(), PortRange::ALL);
        assert_eq!(
            port_range("8000-8080").unwrap(),
            PortRange {
                first: 8000,
                last: 8080
            }
        );
        assert!(port_range("0").is_err());
        assert!(port_range("90-80").is_err());
    }

    #[test]
    fn primes() {
        assert!(is_prime(65537) && is_prime(251) && is_prime(655373));
        assert!(!is_prime(65536) && !is_prime(1));
        assert_eq!(primes_near(65536), (Some(65521), Some(65537)));
    }
}
