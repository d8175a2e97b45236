//! The packets `sluice explain` is asked about: a flow written on the
//! command line (`tcp 198.51.100.7:40000 -> 203.0.113.10:80`) turned into
//! the frame that opens it, or each frame of a classic pcap file.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

/// Why a flow or a pcap file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PacketError {
    #[error(
        "cannot read the flow {0:?}\n  hint: write PROTO SRC -> DST, e.g. \
         `tcp 198.51.100.7:40000 -> 203.0.113.10:80`, \
         `udp [2001:db8::7]:40000 -> [2001:db8:1::10]:53`, \
         `icmp 198.51.100.7 -> 203.0.113.10`; a QUIC packet (1-RTT, short \
         header) with its destination connection ID: \
         `udp 198.51.100.7:40000 -> 203.0.113.10:443 dcid 0a0b0c0d0e0f01`"
    )]
    Flow(String),
    #[error("{path}: {why}")]
    Pcap { path: String, why: String },
}

const TCP: u8 = 6;
const UDP: u8 = 17;

/// The frame a client sends to open the flow written as `spec` (a TCP SYN,
/// a UDP datagram, an ICMP echo request), or for a UDP flow followed by
/// `dcid HEX` a QUIC 1-RTT packet (short header) to that destination
/// connection ID, as a client sends after the handshake.
pub fn frame_of_flow(spec: &str) -> Result<Vec<u8>, PacketError> {
    let bad = || PacketError::Flow(spec.to_string());
    let words: Vec<&str> = spec.split_whitespace().collect();
    let (proto, src, dst, dcid) = match words.as_slice() {
        [proto, src, "->", dst] => (proto, src, dst, None),
        [proto, src, "->", dst, "dcid", hex] if proto.eq_ignore_ascii_case("udp") => {
            (proto, src, dst, Some(connection_id(hex).ok_or_else(bad)?))
        }
        _ => return Err(bad()),
    };
    let proto = proto.to_ascii_lowercase();
    let (protocol, ported) = match proto.as_str() {
        "tcp" => (TCP, true),
        "udp" => (UDP, true),
        "icmp" | "icmp6" | "icmpv6" => (0, false),
        _ => return Err(bad()),
    };
    let endpoint = |s: &str| -> Result<(IpAddr, u16), PacketError> {
        if ported {
            let a: SocketAddr = s.parse().map_err(|_| bad())?;
            Ok((a.ip(), a.port()))
        } else {
            let a: IpAddr = s.trim_matches(['[', ']']).parse().map_err(|_| bad())?;
            Ok((a, 0))
        }
    };
    let (s, sport) = endpoint(src)?;
    let (d, dport) = endpoint(dst)?;
    let l4 = match protocol {
        TCP => {
            // A SYN: flags 0x02, data offset 5, window 65535.
            let mut t = vec![0u8; 20];
            t[0..2].copy_from_slice(&sport.to_be_bytes());
            t[2..4].copy_from_slice(&dport.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = 0x02;
            t[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
            t
        }
        UDP => {
            let mut u = vec![0u8; 8];
            u[0..2].copy_from_slice(&sport.to_be_bytes());
            u[2..4].copy_from_slice(&dport.to_be_bytes());
            if let Some(dcid) = &dcid {
                // Header form 0, fixed bit 1; a protected packet number
                // and payload follow the ID (their bytes do not matter).
                u.push(0x40);
                u.extend_from_slice(dcid);
                u.extend_from_slice(&[0; 24]);
            }
            let len = u16::try_from(u.len()).map_err(|_| bad())?;
            u[4..6].copy_from_slice(&len.to_be_bytes());
            u
        }
        // An echo request, type 8 (ICMP) or 128 (ICMPv6).
        _ => vec![if s.is_ipv6() { 128 } else { 8 }, 0, 0, 0, 0, 1, 0, 1],
    };
    let protocol = match (protocol, s.is_ipv6()) {
        (0, true) => 58,
        (0, false) => 1,
        (p, _) => p,
    };
    ip_frame(s, d, protocol, &l4).ok_or_else(bad)
}

/// A connection ID written in hex: 1 to 20 bytes.
fn connection_id(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) || hex.len() > 40 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// An Ethernet frame carrying an IP packet from `src` to `dst` (same
/// family) whose payload is `l4`.
fn ip_frame(src: IpAddr, dst: IpAddr, protocol: u8, l4: &[u8]) -> Option<Vec<u8>> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0xee, 0x01];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let total = (20 + l4.len()) as u16;
            let mut h = vec![0x45, 0];
            h.extend_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&[0, 0, 0x40, 0, 64, protocol, 0, 0]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            let sum = checksum(&h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
            f.extend_from_slice(&h);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[protocol, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => return None,
    }
    f.extend_from_slice(l4);
    Some(f)
}

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Every frame of a classic (libpcap) capture file, microsecond or
/// nanosecond, either byte order.
pub fn frames_of_pcap(path: &Path) -> Result<Vec<Vec<u8>>, PacketError> {
    let err = |why: String| PacketError::Pcap {
        path: path.display().to_string(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let magic = bytes
        .get(..4)
        .ok_or_else(|| err("shorter than a pcap header".into()))?;
    let big = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => false,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => true,
        _ => {
            return Err(err(
                "not a classic pcap file (pcapng? convert it: editcap -F pcap IN OUT)".into(),
            ))
        }
    };
    let word = |at: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let len = word(at + 8).ok_or_else(|| err(format!("truncated record at byte {at}")))?;
        let start = at + 16;
        let end = start + len as usize;
        let data = bytes
            .get(start..end)
            .ok_or_else(|| err(format!("truncated record at byte {at}")))?;
        frames.push(data.to_vec());
        at = end;
    }
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::wire::{parse, Parsed};

    #[test]
    fn flows_become_the_frames_that_open_them() {
        let f = frame_of_flow("tcp 198.51.100.7:40000 -> 203.0.113.10:80").unwrap();
        let Ok(Parsed::Ip(ip)) = parse(&f) else {
            panic!("tcp")
        };
        assert_eq!(ip.protocol, 6);
        assert_eq!(ip.tcp_flags, 0x02);
        assert_eq!(ip.ports.map(|p| (p.src, p.dst)), Some((40000, 80)));
        let f = frame_of_flow("udp [2001:db8::7]:40000 -> [2001:db8:1::10]:80").unwrap();
        let Ok(Parsed::Ip(ip)) = parse(&f) else {
            panic!("udp6")
        };
        assert_eq!(
            (ip.protocol, ip.dst),
            (17, "2001:db8:1::10".parse().unwrap())
        );
        let f = frame_of_flow("icmp 198.51.100.7 -> 203.0.113.10").unwrap();
        let Ok(Parsed::Ip(ip)) = parse(&f) else {
            panic!("icmp")
        };
        assert_eq!((ip.protocol, ip.icmp_type), (1, Some(8)));
        assert!(frame_of_flow("tcp 1.2.3.4 -> 5.6.7.8:80").is_err());
        // QUIC 1-RTT: the connection ID right after the first byte.
        let f = frame_of_flow("udp 198.51.100.7:40000 -> 203.0.113.10:443 dcid 0a0b0c0d").unwrap();
        let Ok(Parsed::Ip(ip)) = parse(&f) else {
            panic!("quic")
        };
        let payload = &f[ip.l4_offset + 8..];
        assert_eq!(&payload[..5], &[0x40, 0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(
            usize::from(u16::from_be_bytes([
                f[ip.l4_offset + 4],
                f[ip.l4_offset + 5]
            ])),
            8 + payload.len()
        );
        for bad in ["0a0", "zz", &"00".repeat(21)] {
            let spec = format!("udp 198.51.100.7:1 -> 203.0.113.10:443 dcid {bad}");
            assert!(frame_of_flow(&spec).is_err(), "{bad}");
        }
        assert!(frame_of_flow("tcp 198.51.100.7:1 -> 203.0.113.10:443 dcid 0a0b").is_err());
        assert!(frame_of_flow("tcp 1.2.3.4:1 -> [::1]:80").is_err());
    }
}
