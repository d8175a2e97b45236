//! Address ranges that can never be a VIP (RFC 6890 special-purpose
//! registries): the data plane would answer or forward traffic no client
//! can send to them on purpose (a replayed or spoofed packet to 127.0.0.1
//! was forwarded to a backend).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What `ip` is when it is special-purpose, with its range; None for an
/// ordinary unicast address.
pub(crate) fn special_purpose(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => special_v4(a),
        IpAddr::V6(a) => special_v6(a),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    if o[0] == 0 {
        Some("an unspecified (\"this network\") address, 0.0.0.0/8")
    } else if a.is_loopback() {
        Some("a loopback address, 127.0.0.0/8")
    } else if a.is_link_local() {
        Some("a link-local address, 169.254.0.0/16")
    } else if a.is_multicast() {
        Some("a multicast address, 224.0.0.0/4")
    } else if a.is_broadcast() {
        Some("the limited broadcast address, 255.255.255.255")
    } else {
        None
    }
}

fn special_v6(a: Ipv6Addr) -> Option<&'static str> {
    let first = a.segments()[0];
    if a.is_unspecified() {
        Some("the unspecified address, ::")
    } else if a.is_loopback() {
        Some("the loopback address, ::1")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address, fe80::/10")
    } else if a.is_multicast() {
        Some("a multicast address, ff00::/8")
    } else if let Some(v4) = a.to_ipv4_mapped() {
        special_v4(v4)
            .map(|_| "an IPv4-mapped form (::ffff:0:0/96) of a special-purpose IPv4 address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_purpose_addresses_of_both_families() {
        for s in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.1.1",
            "224.0.0.1",
            "239.1.2.3",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:224.0.0.5",
            "::ffff:0.0.0.0",
        ] {
            assert!(special_purpose(s.parse().unwrap()).is_some(), "{s}");
        }
        for s in [
            "203.0.113.10",
            "10.0.0.1",
            "192.0.2.1",
            "2001:db8::1",
            "fd00::1",
            "fec0::1",
            "::ffff:203.0.113.10",
        ] {
            assert!(special_purpose(s.parse().unwrap()).is_none(), "{s}");
        }
    }
}
