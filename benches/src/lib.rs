//! Traffic generation shared by the benchmarks, the throughput harness and
//! the demo: deterministic pcaps of many distinct flows.

use std::io::Write;
use std::net::Ipv4Addr;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use sluice_core::ForwardingState;

/// The client address of flow `i`: 10.0.0.0/8, one per flow up to 2^24.
pub fn flow_source(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff))
}

/// A 64-byte (60 + FCS) TCP packet of flow `i`: client 10.x.y.z:port → vip:80.
/// Flows differ in source address and port so 5-tuple and 2-tuple hashing
/// both spread them.
pub fn tcp_flow_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6], flags_syn: bool) -> Vec<u8> {
    let src = flow_source(i);
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

/// The one client of `pktgen --one-client`: every flow from this address,
/// told apart by its source port alone (at most 60,000 flows).
pub const ONE_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// [`tcp_flow_frame`] from [`ONE_CLIENT`]: a carrier-grade NAT's or a
/// proxy's connections, which only their ports tell apart.
pub fn tcp_one_client_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6]) -> Vec<u8> {
    let sport = 1024 + (i % 60_000) as u16;
    let mut out = Vec::with_capacity(64);
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(ONE_CLIENT.octets(), vip.octets(), 64)
        .tcp(sport, 80, i.wrapping_mul(2_654_435_761), 65535)
        .ack(1)
        .write(&mut out, &[])
        .expect("writing to a Vec cannot fail");
    out.resize(60, 0);
    out
}

/// A 64-byte UDP datagram of flow `i` to vip:53 (same clients as
/// [`tcp_flow_frame`]). Under session affinity NONE, UDP is not tracked
/// (CT-4), so this traffic measures the stateless path.
pub fn udp_flow_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6]) -> Vec<u8> {
    let src = flow_source(i);
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

/// The QUIC-LB configurations the benchmarks measure (`pktgen --quic=…`,
/// `TRAFFIC=quic*` in scripts/bench-config.sh): their name, server ID and
/// nonce lengths, and whether they are encrypted (with [`BENCH_QUIC_KEY`]).
pub const QUIC_BENCH_CONFIGS: [(&str, u8, u8, bool); 3] = [
    // In the clear.
    ("plain", 3, 6, false),
    // Four passes (9 bytes: odd, the server ID within the left half).
    ("four-pass", 3, 6, true),
    // One AES block (3 + 13 bytes).
    ("single-pass", 3, 13, true),
];

/// The key of the encrypted benchmark configurations.
pub const BENCH_QUIC_KEY: [u8; 16] = *b"sluice-bench-key";

/// The server ID of backend `b` (0, 1, 2) of the benchmark service.
pub fn bench_quic_server_id(b: u8) -> [u8; 3] {
    [0x0a, 0x0b, b]
}

/// A UDP datagram of flow `i` to vip:443 carrying a QUIC 1-RTT packet
/// (short header) whose connection ID, under config 0 with `config`'s
/// lengths, names backend `i % 3`'s server ID; 8 bytes of protected
/// payload follow it.
pub fn quic_flow_frame(i: u32, vip: Ipv4Addr, dst_mac: [u8; 6], config: &str) -> Option<Vec<u8>> {
    use sluice_core::quic_lb::cid::{CidCodec, CidLengths};
    let &(_, sid, nonce, encrypted) = QUIC_BENCH_CONFIGS.iter().find(|c| c.0 == config)?;
    let lengths = CidLengths::new(0, sid, nonce).ok()?;
    let codec = CidCodec::new(lengths, encrypted.then_some(BENCH_QUIC_KEY));
    let nonce: Vec<u8> = (0..nonce)
        .map(|k| (i.rotate_left(u32::from(k) * 5) >> 3) as u8 ^ k)
        .collect();
    let cid = codec.encode(
        lengths.plaintext() as u8,
        &bench_quic_server_id((i % 3) as u8),
        &nonce,
    )?;
    let mut payload = vec![0x40];
    payload.extend_from_slice(cid.as_bytes());
    payload.extend_from_slice(&[0x5a; 8]);
    let src = flow_source(i);
    let sport = 1024 + (i % 60_000) as u16;
    let mut out = Vec::with_capacity(96);
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(src.octets(), vip.octets(), 64)
        .udp(sport, 443)
        .write(&mut out, &payload)
        .ok()?;
    out.resize(out.len().max(60), 0);
    Some(out)
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

/// The port MACs of [`web_state`]'s two ports ("clients", "backends").
pub const WEB_PORT_MACS: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];

/// The snapshot the pipeline benchmarks run against, built by the control
/// plane from a config: ports "clients" and "backends", service "web"
/// (`encapsulation`) with three backends, and rule "web-vip" for
/// 203.0.113.10 `protocol` `ports`.
pub fn web_state(encapsulation: &str, protocol: &str, ports: &str) -> ForwardingState {
    let cfg = format!(
        r#"
[dataplane]
workers = 1
[[dataplane.port]]
name = "clients"
device = "net_null0"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[[dataplane.port]]
name = "backends"
device = "net_null1"
mac = "02:00:00:00:00:02"
address = "198.18.0.1/24"
[[backend_service]]
name = "web"
encapsulation = "{encapsulation}"
backend = [
  {{ address = "198.18.0.10", mac = "02:00:00:00:00:10" }},
  {{ address = "198.18.0.11", mac = "02:00:00:00:00:11" }},
  {{ address = "198.18.0.12", mac = "02:00:00:00:00:12" }},
]
[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "{protocol}"
ports = "{ports}"
backend_service = "web"
"#
    );
    let cfg = controlplane::config::load_str(&cfg, "bench.toml").expect("valid bench config");
    let mut ids = controlplane::publish::BackendIds::default();
    controlplane::publish::build_forwarding_state(&cfg, &WEB_PORT_MACS, &mut ids, 1)
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
