//! ICMP (RFC 792) and ICMPv6 (RFC 4443) messages: a two-way view of the
//! header the two share, which error types quote an offending packet, and
//! a truncation-tolerant reading of that quote (HA-4).
//!
//! A quote is the offending packet's IP header plus at least 8 bytes of its
//! payload (IPv4 routers often send no more), so the quoted IP header's
//! total length usually runs past the quote: unlike the receive-path views,
//! this one does not require the whole packet, only the bytes it reads.

use std::net::{IpAddr, Ipv6Addr};

#[cfg(test)]
use super::get_u32;
use super::ipv4::Ipv4Packet;
use super::ipv6::Ipv6Packet;
use super::parse::{Fragment, Ports};
use super::proto::{ICMP, ICMPV6, IPV6_FRAGMENT, TCP, UDP};
use super::{checksum, get_u16, get_u8, ipv6_ext, set_u16, set_u32, set_u8, udp, Error};

/// ICMP/ICMPv6 header length before the quote (type, code, checksum, 4
/// bytes of type-specific data: unused, next-hop MTU or MTU).
pub(crate) const HEADER_LEN: usize = 8;

/// Where each field of the header starts.
pub(crate) mod offset {
    pub(crate) const TYPE: usize = 0;
    pub(crate) const CODE: usize = 1;
    pub(crate) const CHECKSUM: usize = 2;
    /// The 32 type-specific bits ("rest of header").
    pub(crate) const REST: usize = 4;
    /// Destination unreachable, fragmentation needed: the next-hop MTU in
    /// the low 16 bits of the rest (RFC 1191 §4).
    pub(crate) const NEXT_HOP_MTU: usize = 6;
    /// ICMPv6 packet too big: the MTU, all 32 bits (RFC 4443 §3.2).
    pub(crate) const MTU: usize = 4;
}

pub const V4_DEST_UNREACHABLE: u8 = 3;
pub(crate) const V4_REDIRECT: u8 = 5;
pub(crate) const V4_TIME_EXCEEDED: u8 = 11;
pub(crate) const V4_PARAMETER_PROBLEM: u8 = 12;
/// Code of destination-unreachable: fragmentation needed and DF set.
pub(crate) const V4_CODE_FRAG_NEEDED: u8 = 4;
pub(crate) const V6_DEST_UNREACHABLE: u8 = 1;
pub(crate) const V6_PACKET_TOO_BIG: u8 = 2;
pub(crate) const V6_TIME_EXCEEDED: u8 = 3;
/// ICMPv6 types below this are errors (RFC 4443 §2.1).
pub(crate) const V6_FIRST_INFORMATIONAL: u8 = 128;

/// What an accessor reads when the buffer is shorter than the header.
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of an ICMP or ICMPv6 message in `T` (the whole message: header
/// and body, which the checksum covers).
#[derive(Copy, Clone, Debug)]
pub struct IcmpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks that the 8-byte header is there.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    pub fn msg_type(&self) -> u8 {
        get_u8::<{ offset::TYPE }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn code(&self) -> u8 {
        get_u8::<{ offset::CODE }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn checksum(&self) -> u16 {
        get_u16::<{ offset::CHECKSUM }, HEADER_LEN>(self.header())
    }

    /// The 32 type-specific bits after the checksum.
    #[cfg(test)]
    pub(crate) fn rest_of_header(&self) -> u32 {
        get_u32::<{ offset::REST }, HEADER_LEN>(self.header())
    }

    /// ICMP fragmentation needed: the next-hop MTU.
    #[cfg(test)]
    pub(crate) fn next_hop_mtu(&self) -> u16 {
        get_u16::<{ offset::NEXT_HOP_MTU }, HEADER_LEN>(self.header())
    }

    /// ICMPv6 packet too big: the MTU.
    #[cfg(test)]
    pub(crate) fn mtu(&self) -> u32 {
        get_u32::<{ offset::MTU }, HEADER_LEN>(self.header())
    }

    /// The body after the header: for an error, the quoted packet.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether an ICMP (IPv4) message's checksum is right.
    #[cfg(test)]
    pub(crate) fn verify_checksum_v4(&self) -> bool {
        checksum::verify(self.buffer.as_ref())
    }

    /// Whether an ICMPv6 message's checksum, pseudo-header included, is
    /// right.
    #[cfg(test)]
    pub(crate) fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.sum_v6(src, dst) == 0xffff
    }

    fn sum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> u16 {
        let msg = self.buffer.as_ref();
        checksum::combine(&[
            checksum::pseudo_header_v6(src, dst, ICMPV6, msg.len() as u32),
            checksum::ones_complement_sum(msg),
        ])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    pub(crate) fn set_msg_type(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::TYPE }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_code(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::CODE }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_checksum(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::CHECKSUM }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_rest_of_header(&mut self, v: u32) {
        if let Some(h) = self.header_mut() {
            set_u32::<{ offset::REST }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_next_hop_mtu(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::NEXT_HOP_MTU }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_mtu(&mut self, v: u32) {
        if let Some(h) = self.header_mut() {
            set_u32::<{ offset::MTU }, HEADER_LEN>(h, v);
        }
    }

    /// Computes and writes an ICMP (IPv4) checksum: the whole message.
    pub(crate) fn fill_checksum_v4(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Computes and writes an ICMPv6 checksum: the whole message and the
    /// IPv6 pseudo-header of `src` → `dst` (RFC 4443 §2.3).
    pub(crate) fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = !self.sum_v6(src, dst);
        self.set_checksum(c);
    }
}

/// Whether an ICMP (`protocol` = 1) or ICMPv6 (58) message of `icmp_type`
/// is an error that quotes a packet and is steered by HA-4. Parameter
/// problem and redirects are not: they concern the sender's own path.
pub(crate) fn is_steered_error(protocol: u8, icmp_type: u8) -> bool {
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
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) protocol: u8,
    /// Ports of a quoted TCP/UDP header when the quote reaches them and
    /// the quoted packet is not a non-first fragment.
    pub(crate) ports: Option<Ports>,
    pub(crate) fragment: Fragment,
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
    let ip = Ipv4Packet::new_checked_header(q).ok()?;
    let fragment = match (ip.frag_offset(), ip.more_frags()) {
        (0, false) => Fragment::No,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    let protocol = ip.protocol();
    // The quote's own end, not the quoted total length, bounds the L4 bytes.
    let l4 = q.get(ip.header_len()..).unwrap_or(&[]);
    Some(Quoted {
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        protocol,
        ports: ports(protocol, fragment, l4),
        fragment,
    })
}

fn quoted_v6(q: &[u8]) -> Option<Quoted> {
    let ip = Ipv6Packet::new_checked_header(q).ok()?;
    let first = ip.next_header();
    let payload = q.get(super::ipv6::HEADER_LEN..).unwrap_or(&[]);
    // The walk needs every extension header inside the quote; a quote cut
    // inside the chain yields the first next-header and no ports, which
    // still hashes like the flow under the 2-tuple and, for the common
    // header-less case, the 3-tuple.
    let (protocol, l4, fragment) = match ipv6_ext::walk(first, payload) {
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
        Err(_) if first == IPV6_FRAGMENT => (first, &[][..], Fragment::Later),
        Err(_) => (first, &[][..], Fragment::No),
    };
    Some(Quoted {
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        protocol,
        ports: ports(protocol, fragment, l4),
        fragment,
    })
}

/// Both TCP and UDP start with source and destination port, so the first
/// 4 bytes of the quoted L4 header suffice.
fn ports(protocol: u8, fragment: Fragment, l4: &[u8]) -> Option<Ports> {
    if fragment == Fragment::Later || !(protocol == TCP || protocol == UDP) {
        return None;
    }
    let p = l4.first_chunk::<{ udp::PORTS_LEN }>()?;
    Some(Ports {
        src: get_u16::<{ udp::offset::SRC_PORT }, { udp::PORTS_LEN }>(p),
        dst: get_u16::<{ udp::offset::DST_PORT }, { udp::PORTS_LEN }>(p),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

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
