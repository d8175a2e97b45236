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

/// What an answer said.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    SynAck,
    Reset,
    /// ICMP destination unreachable quoting our SYN.
    Unreachable,
}

/// A 20-byte TCP SYN with its checksum over the IPv4 pseudo-header.
pub fn syn_segment(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, seq: u32) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    h[12] = 5 << 4; // data offset: 5 words, no options
    h[13] = 0x02; // SYN
    h[14..16].copy_from_slice(&1024u16.to_be_bytes()); // window
    let mut sum: u32 = 0;
    for chunk in src.octets().chunks(2).chain(dst.octets().chunks(2)) {
        sum += u32::from(u16::from_be_bytes([chunk[0], chunk[1]]));
    }
    sum += 6 + 20; // protocol, TCP length
    for chunk in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([chunk[0], chunk[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

/// An IPv4 packet carrying TCP to `port`: its acknowledgement number and
/// whether it is a SYN-ACK or an RST (anything else: None).
pub fn parse_answer(pkt: &[u8], port: u16) -> Option<(u32, Answer)> {
    let ihl = usize::from(pkt.first()? & 0x0f) * 4;
    if pkt.first()? >> 4 != 4 || *pkt.get(9)? != 6 {
        return None;
    }
    let tcp = pkt.get(ihl..ihl + 20)?;
    if u16::from_be_bytes([tcp[2], tcp[3]]) != port {
        return None;
    }
    let ack = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
    let flags = tcp[13];
    match (flags & 0x12 == 0x12, flags & 0x04 != 0, flags & 0x10 != 0) {
        (true, false, _) => Some((ack, Answer::SynAck)),
        (_, true, true) => Some((ack, Answer::Reset)),
        _ => None,
    }
}

/// An ICMP destination unreachable quoting a TCP segment from `port`: the
/// quoted sequence number (RFC 792 quotes the IP header + 8 bytes: ports
/// and sequence number).
pub fn parse_unreachable(pkt: &[u8], port: u16) -> Option<u32> {
    let ihl = usize::from(pkt.first()? & 0x0f) * 4;
    let icmp = pkt.get(ihl..)?;
    if *icmp.first()? != 3 {
        return None; // not destination unreachable
    }
    let inner = icmp.get(8..)?;
    let inner_ihl = usize::from(inner.first()? & 0x0f) * 4;
    if *inner.get(9)? != 6 {
        return None;
    }
    let tcp = inner.get(inner_ihl..inner_ihl + 8)?;
    if u16::from_be_bytes([tcp[0], tcp[1]]) != port {
        return None;
    }
    Some(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]))
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
        let mut pkt = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0];
        pkt.extend_from_slice(&[127, 0, 0, 2, 127, 0, 0, 1]);
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&40000u16.to_be_bytes());
        tcp[8..12].copy_from_slice(&0x01020305u32.to_be_bytes());
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
        icmp[20] = 11; // time exceeded: not ours to judge
        assert_eq!(parse_unreachable(&icmp, 40000), None);
    }
}
