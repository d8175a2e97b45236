//! ICMP (RFC 792) and ICMPv6 (RFC 4443) error messages: which types quote
//! an offending packet, and a truncation-tolerant view of that quote
//! (HA-4).
//!
//! A quote is the offending packet's IP header plus at least 8 bytes of its
//! payload (IPv4 routers often send no more), so the quoted IP header's
//! total length usually runs past the quote: unlike the receive-path views,
//! this one does not require the whole packet, only the bytes it reads.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::parse::{Fragment, Ports};
use super::proto::{ICMP, ICMPV6, IPV6_FRAGMENT, TCP, UDP};
use super::{ipv4, ipv6, ipv6_ext};

/// ICMP/ICMPv6 header length before the quote (type, code, checksum, 4
/// bytes of type-specific data: unused, next-hop MTU or MTU).
pub const HEADER_LEN: usize = 8;

pub const V4_DEST_UNREACHABLE: u8 = 3;
pub const V4_TIME_EXCEEDED: u8 = 11;
/// Code of destination-unreachable: fragmentation needed and DF set.
pub const V4_CODE_FRAG_NEEDED: u8 = 4;
pub const V6_DEST_UNREACHABLE: u8 = 1;
pub const V6_PACKET_TOO_BIG: u8 = 2;
pub const V6_TIME_EXCEEDED: u8 = 3;

/// Whether an ICMP (`protocol` = 1) or ICMPv6 (58) message of `icmp_type`
/// is an error that quotes a packet and is steered by HA-4. Parameter
/// problem and redirects are not: they concern the sender's own path.
pub fn is_steered_error(protocol: u8, icmp_type: u8) -> bool {
    match protocol {
        ICMP => matches!(icmp_type, V4_DEST_UNREACHABLE | V4_TIME_EXCEEDED),
        ICMPV6 => matches!(
            icmp_type,
            V6_DEST_UNREACHABLE | V6_PACKET_TOO_BIG | V6_TIME_EXCEEDED
        ),
        _ => false,
    }
}

/// The fields of a quoted packet that identify its flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Quoted {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    /// Ports of a quoted TCP/UDP header when the quote reaches them and
    /// the quoted packet is not a non-first fragment.
    pub ports: Option<Ports>,
    pub fragment: Fragment,
}

/// Reads the packet quoted by an ICMP error whose message (ICMP header
/// included) is `msg`. `v6` says which IP version the quote must be: an
/// ICMP error always quotes a packet of its own family. None when the
/// quote is too short for the IP header or is not an IP header.
pub fn quoted(msg: &[u8], v6: bool) -> Option<Quoted> {
    let q = msg.get(HEADER_LEN..)?;
    if v6 {
        quoted_v6(q)
    } else {
        quoted_v4(q)
    }
}

fn quoted_v4(q: &[u8]) -> Option<Quoted> {
    let h = q.first_chunk::<{ ipv4::HEADER_LEN }>()?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    if h[0] >> 4 != 4 || ihl < ipv4::HEADER_LEN {
        return None;
    }
    let flags_frag = u16::from_be_bytes([h[6], h[7]]);
    let fragment = match (flags_frag & 0x1fff, flags_frag & 0x2000 != 0) {
        (0, false) => Fragment::No,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    let protocol = h[9];
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    let l4 = q.get(ihl..).unwrap_or(&[]);
    Some(Quoted {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        protocol,
        ports: ports(protocol, fragment, l4),
        fragment,
    })
}

fn quoted_v6(q: &[u8]) -> Option<Quoted> {
    let h = q.first_chunk::<{ ipv6::HEADER_LEN }>()?;
    if h[0] >> 4 != 6 {
        return None;
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&h[8..24]);
    dst.copy_from_slice(&h[24..40]);
    let payload = q.get(ipv6::HEADER_LEN..).unwrap_or(&[]);
    // The walk needs every extension header inside the quote; a quote cut
    // inside the chain yields the first next-header and no ports, which
    // still hashes like the flow under the 2-tuple and, for the common
    // header-less case, the 3-tuple.
    let (protocol, l4, fragment) = match ipv6_ext::walk(h[6], payload) {
        Ok(up) => {
            let fragment = match up.fragment {
                None => Fragment::No,
                Some(f) if f.offset == 0 => Fragment::First,
                Some(_) => Fragment::Later,
            };
            // As the receive parser does (HA-2): a fragment's protocol is
            // its Fragment header's next header.
            let protocol = up.fragment.map_or(up.protocol, |f| f.next);
            (protocol, payload.get(up.offset..).unwrap_or(&[]), fragment)
        }
        Err(_) if h[6] == IPV6_FRAGMENT => (h[6], &[][..], Fragment::Later),
        Err(_) => (h[6], &[][..], Fragment::No),
    };
    Some(Quoted {
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        protocol,
        ports: ports(protocol, fragment, l4),
        fragment,
    })
}

/// Both TCP and UDP start with source and destination port, so 4 bytes of
/// the quoted L4 header suffice.
fn ports(protocol: u8, fragment: Fragment, l4: &[u8]) -> Option<Ports> {
    if fragment == Fragment::Later || !(protocol == TCP || protocol == UDP) {
        return None;
    }
    let p = l4.first_chunk::<4>()?;
    Some(Ports {
        src: u16::from_be_bytes([p[0], p[1]]),
        dst: u16::from_be_bytes([p[2], p[3]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_error(quote: &[u8]) -> Vec<u8> {
        let mut m = vec![
            V4_DEST_UNREACHABLE,
            V4_CODE_FRAG_NEEDED,
            0,
            0,
            0,
            0,
            5,
            0xdc,
        ];
        m.extend_from_slice(quote);
        m
    }

    #[test]
    fn v4_quote_with_only_8_bytes_of_tcp() {
        let mut q = vec![0x45, 0, 0x05, 0xdc, 0, 1, 0x40, 0, 64, TCP, 0, 0];
        q.extend_from_slice(&[203, 0, 113, 10, 10, 1, 0, 1]);
        q.extend_from_slice(&[0, 80, 0x4e, 0x20, 0, 0, 0, 1]);
        let got = quoted(&v4_error(&q), false).unwrap();
        assert_eq!(got.src, IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)));
        assert_eq!(got.dst, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)));
        assert_eq!(got.protocol, TCP);
        assert_eq!(
            got.ports,
            Some(Ports {
                src: 80,
                dst: 20_000
            })
        );
        assert_eq!(got.fragment, Fragment::No);
    }

    #[test]
    fn truncated_quotes_never_panic() {
        let mut q = vec![0x45, 0, 0x05, 0xdc, 0, 1, 0x40, 0, 64, UDP, 0, 0];
        q.extend_from_slice(&[203, 0, 113, 10, 10, 1, 0, 1, 0, 53]);
        let m = v4_error(&q);
        for cut in 0..m.len() {
            let got = quoted(&m[..cut], false);
            assert_eq!(got.is_some(), cut >= HEADER_LEN + 20, "cut {cut}");
            assert!(got.is_none_or(|g| g.ports.is_none()));
            let _ = quoted(&m[..cut], true);
        }
    }

    #[test]
    fn steered_types() {
        assert!(is_steered_error(ICMP, 3));
        assert!(is_steered_error(ICMP, 11));
        assert!(!is_steered_error(ICMP, 8));
        assert!(!is_steered_error(ICMP, 2));
        assert!(is_steered_error(ICMPV6, 2));
        assert!(!is_steered_error(ICMPV6, 128));
        assert!(!is_steered_error(TCP, 3));
    }
}
