//! HC-1's half-open TCP probe on the wire, sans-IO: the SYN we send and
//! the answers we read. A SYN-ACK is a success (the kernel, which has no
//! connection for it, answers with RST — no handshake completes); an RST
//! is a failure; an ICMP destination unreachable quoting our SYN (ports
//! and sequence number) fails it at once instead of at the timeout.
//!
//! One raw socket serves every probe ([`super::syn_socket`]): answers are
//! matched by their acknowledgement number, which is our SYN's sequence
//! number + 1, and the sequence number is unique among runs in flight,
//! so two probes of the same address never confuse each other.

use std::net::Ipv4Addr;

use sluice_core::wire::icmp::{IcmpPacket, V4_DEST_UNREACHABLE};
use sluice_core::wire::ipv4::Ipv4Packet;
use sluice_core::wire::proto::TCP;
use sluice_core::wire::tcp::{self, offset, TcpSegment, FLAG_ACK, FLAG_SYN};
use sluice_core::wire::{checksum, Error};

/// What an answer said.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    SynAck,
    Reset,
    /// ICMP destination unreachable quoting our SYN.
    Unreachable,
}

/// The SYN's window: it never receives data.
const SYN_WINDOW: u16 = 1024;

/// A 20-byte TCP SYN (no options) with its checksum over the IPv4
/// pseudo-header. `TcpSegment` only reads, so the fields are written at
/// its offsets.
pub fn syn_segment(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
) -> [u8; tcp::HEADER_LEN] {
    let mut h = [0u8; tcp::HEADER_LEN];
    h[offset::SRC_PORT..offset::SRC_PORT + 2].copy_from_slice(&sport.to_be_bytes());
    h[offset::DST_PORT..offset::DST_PORT + 2].copy_from_slice(&dport.to_be_bytes());
    h[offset::SEQ..offset::SEQ + 4].copy_from_slice(&seq.to_be_bytes());
    h[offset::DATA_OFFSET] = (tcp::HEADER_LEN as u8 / 4) << 4;
    h[offset::FLAGS] = FLAG_SYN;
    h[offset::WINDOW..offset::WINDOW + 2].copy_from_slice(&SYN_WINDOW.to_be_bytes());
    let sum = checksum::combine(&[
        checksum::pseudo_header_v4(src, dst, TCP, tcp::HEADER_LEN as u16),
        checksum::ones_complement_sum(&h),
    ]);
    h[offset::CHECKSUM..offset::CHECKSUM + 2].copy_from_slice(&(!sum).to_be_bytes());
    h
}

/// An IPv4 packet carrying TCP to `port`: its acknowledgement number and
/// whether it is a SYN-ACK or an RST (anything else: None).
pub fn parse_answer(pkt: &[u8], port: u16) -> Option<(u32, Answer)> {
    let ip = Ipv4Packet::new_checked_header(pkt).ok()?;
    if ip.protocol() != TCP {
        return None;
    }
    let seg = TcpSegment::new_checked(pkt.get(ip.header_len()..)?).ok()?;
    if seg.dst_port() != port {
        return None;
    }
    let ack = seg.ack_number();
    let syn_ack = FLAG_SYN | FLAG_ACK;
    match (seg.flags() & syn_ack == syn_ack, seg.rst(), seg.ack()) {
        (true, false, _) => Some((ack, Answer::SynAck)),
        (_, true, true) => Some((ack, Answer::Reset)),
        _ => None,
    }
}

/// An ICMP destination unreachable quoting a TCP segment from `port`: the
/// quoted sequence number (RFC 792 quotes the IP header + 8 bytes: ports
/// and sequence number).
pub fn parse_unreachable(pkt: &[u8], port: u16) -> Option<u32> {
    let ip = Ipv4Packet::new_checked_header(pkt).ok()?;
    let icmp = IcmpPacket::new_checked(pkt.get(ip.header_len()..)?).ok()?;
    if icmp.msg_type() != V4_DEST_UNREACHABLE {
        return None;
    }
    let quoted = Ipv4Packet::new_checked_header(icmp.payload()).ok()?;
    if quoted.protocol() != TCP {
        return None;
    }
    let seg = quoted_segment(icmp.payload().get(quoted.header_len()..)?).ok()?;
    let seg = TcpSegment::new_unchecked(&seg);
    (seg.src_port() == port).then(|| seg.seq())
}

/// The TCP header fields a quote holds, in a header-sized buffer (zeros
/// past the quote): `TcpSegment` reads zeros from a buffer shorter than
/// its header, and a quote may stop after the first 8 bytes.
fn quoted_segment(quote: &[u8]) -> Result<[u8; tcp::HEADER_LEN], Error> {
    /// Ports and sequence number: what every quote holds (RFC 792).
    const QUOTED: usize = offset::SEQ + 4;
    if quote.len() < QUOTED {
        return Err(Error::Truncated);
    }
    let mut h = [0u8; tcp::HEADER_LEN];
    let n = quote.len().min(tcp::HEADER_LEN);
    h[..n].copy_from_slice(&quote[..n]);
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum verifies (sums to 0xffff with the pseudo-header).
    #[test]
    fn hc_1_syn_checksum_and_answers() {
        let s = syn_segment(
            Ipv4Addr::new(127, 0, 0, 1),
            Ipv4Addr::new(127, 0, 0, 2),
            40000,
            80,
            0x01020304,
        );
        let mut sum: u32 = 0x7f00 + 0x0001 + 0x7f00 + 0x0002 + 6 + 20;
        for c in s.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        let syn = TcpSegment::new_checked(&s).unwrap();
        assert_eq!((syn.src_port(), syn.dst_port()), (40000, 80));
        assert_eq!(
            (syn.seq(), syn.flags(), syn.header_len()),
            (0x01020304, FLAG_SYN, 20)
        );
        assert_eq!(syn.window(), SYN_WINDOW);
        let mut pkt = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0];
        pkt.extend_from_slice(&[127, 0, 0, 2, 127, 0, 0, 1]);
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&40000u16.to_be_bytes());
        tcp[8..12].copy_from_slice(&0x01020305u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x12;
        let mut synack = pkt.clone();
        synack.extend_from_slice(&tcp);
        assert_eq!(
            parse_answer(&synack, 40000),
            Some((0x01020305, Answer::SynAck))
        );
        assert_eq!(parse_answer(&synack, 40001), None, "not our port");
        tcp[13] = 0x14;
        let mut rst = pkt;
        rst.extend_from_slice(&tcp);
        assert_eq!(parse_answer(&rst, 40000), Some((0x01020305, Answer::Reset)));

        // ICMP host unreachable quoting our SYN (IP header + 8 bytes).
        let mut icmp = vec![
            0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0, 192, 0, 2, 254, 127, 0, 0, 1,
        ];
        icmp.extend_from_slice(&[3, 1, 0, 0, 0, 0, 0, 0]);
        icmp.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]);
        icmp.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 2]);
        icmp.extend_from_slice(&s[..8]);
        assert_eq!(parse_unreachable(&icmp, 40000), Some(0x01020304));
        assert_eq!(parse_unreachable(&icmp, 40001), None);
        let mut whole = icmp.clone();
        whole.extend_from_slice(&s[8..]);
        assert_eq!(
            parse_unreachable(&whole, 40000),
            Some(0x01020304),
            "a quote of the whole header (Linux quotes more than 8 bytes)"
        );
        assert_eq!(parse_unreachable(&icmp[..icmp.len() - 1], 40000), None);
        icmp[20] = 11; // time exceeded: not ours to judge
        assert_eq!(parse_unreachable(&icmp, 40000), None);
    }
}
