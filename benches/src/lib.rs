//! Traffic generation shared by the benchmarks, the throughput harness and
//! the demo: deterministic pcaps of many distinct flows.

use std::io::Write;
use std::net::Ipv4Addr;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};

/// A 64-byte (60 + FCS) TCP packet of flow `i`: client 10.x.y.z:port → vip:80.
/// Flows differ in source address and port so 5-tuple and 2-tuple hashing
/// both spread them.
pub fn tcp_flow_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6], flags_syn: bool) -> Vec<u8> {
    let src = Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff));
    let sport = 1024 + (i % 60_000) as u16;
    let builder = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(src.octets(), vip.octets(), 64)
        .tcp(sport, 80, i.wrapping_mul(2_654_435_761), 65535);
    let builder = if flags_syn {
        builder.syn()
    } else {
        builder.ack(1)
    };
    let mut out = Vec::with_capacity(64);
    builder
        .write(&mut out, &[])
        .expect("writing to a Vec cannot fail");
    // Pad to the 60-byte Ethernet minimum (64 on the wire with the FCS).
    out.resize(60, 0);
    out
}

/// A 64-byte UDP datagram of flow `i` to vip:53 (same clients as
/// [`tcp_flow_frame`]). Under session affinity NONE, UDP is not tracked
/// (CT-4), so this traffic measures the stateless path.
pub fn udp_flow_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6]) -> Vec<u8> {
    let src = Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff));
    let sport = 1024 + (i % 60_000) as u16;
    let mut out = Vec::with_capacity(64);
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(src.octets(), vip.octets(), 64)
        .udp(sport, 53)
        .write(&mut out, &[0u8; 18])
        .expect("writing to a Vec cannot fail");
    out.resize(60, 0);
    out
}

/// Writes `frames` to a pcap file (Ethernet link type, fixed timestamps so
/// the file is reproducible).
pub fn write_pcap<W: Write>(w: W, frames: impl Iterator<Item = Vec<u8>>) -> std::io::Result<()> {
    let mut pw = PcapWriter::new(w).map_err(std::io::Error::other)?;
    for (i, f) in frames.enumerate() {
        let ts = std::time::Duration::from_micros(i as u64);
        pw.write_packet(&PcapPacket::new(ts, f.len() as u32, &f))
            .map_err(std::io::Error::other)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_64_bytes_and_distinct() {
        let vip = Ipv4Addr::new(203, 0, 113, 10);
        let a = tcp_flow_frame(1, vip, [2, 0, 0, 0, 0, 1], false);
        let b = tcp_flow_frame(2, vip, [2, 0, 0, 0, 0, 1], false);
        assert_eq!(a.len(), 60);
        assert_ne!(a, b);
        let p = etherparse::SlicedPacket::from_ethernet(&a).unwrap();
        assert!(matches!(
            p.transport,
            Some(etherparse::TransportSlice::Tcp(_))
        ));
    }
}
