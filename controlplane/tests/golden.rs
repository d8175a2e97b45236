//! Golden pcaps through the real `sluice` binary on real DPDK (`net_pcap`,
//! `--no-huge`): a fixed input pcap and config per case, the output compared
//! byte for byte with a checked-in expected pcap (timestamps ignored), and
//! independently checked by an `etherparse` oracle, so a wrong "expected"
//! file cannot hide a bug. Set `SLUICE_BLESS=1` to rewrite the expected
//! files after an intended change, then review the oracle's verdict.
//!
//! Covers: FR-1 (TCP/UDP rules, VIP matching), FR-3 (no rule / not a VIP
//! dropped under named reasons), HA-1 (5-tuple: one flow, one backend),
//! MG-3 (spread over backends), AP-3 (L2 DSR and GRE delivery, inner packet
//! untouched), and the accounting invariant RX = TX + drops (− extra
//! fragments, AP-3: none in these inputs).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

use common::*;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKENDS: [(&str, [u8; 6]); 3] = [
    ("192.0.2.10", [0x02, 0, 0, 0, 0, 0x10]),
    ("192.0.2.11", [0x02, 0, 0, 0, 0, 0x11]),
    ("192.0.2.12", [0x02, 0, 0, 0, 0, 0x12]),
];

fn config(encap: &str, dir: &Path) -> String {
    let backends: Vec<String> = BACKENDS
        .iter()
        .map(|(a, m)| format!("{{ address = \"{a}\", mac = \"{}\" }}", mac_str(m)))
        .collect();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "{encap}"
backend = [ {backends} ]

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rule]]
name = "web-dns"
vip = "203.0.113.10"
protocol = "UDP"
ports = "53"
backend_service = "web"
"#,
        dir = dir.display(),
        port_mac = mac_str(&PORT_MAC),
        backends = backends.join(", "),
    )
}

/// The input: 60 TCP flows × 2 packets, UDP datagrams, a VLAN-tagged
/// packet, and one packet for each drop reason the first slice names.
fn input_frames() -> (Vec<Vec<u8>>, BTreeMap<&'static str, u64>) {
    let vip = [203, 0, 113, 10];
    let mut frames = Vec::new();
    for round in 0..2u32 {
        for i in 0..60u32 {
            let src = [10, 1, (i / 200) as u8, (i % 200 + 1) as u8];
            frames.push(tcp_frame(
                PORT_MAC,
                src,
                vip,
                20_000 + i as u16,
                80,
                round * 100,
            ));
        }
    }
    for i in 0..10u32 {
        frames.push(udp_frame(
            PORT_MAC,
            [10, 2, 0, i as u8 + 1],
            vip,
            5000 + i as u16,
            53,
            &[i as u8; 20],
        ));
    }
    frames.push(vlan_tagged(
        tcp_frame(PORT_MAC, [10, 3, 0, 1], vip, 4242, 80, 0),
        100,
    ));
    let mut drops = BTreeMap::new();
    frames.push(tcp_frame(
        PORT_MAC,
        [10, 4, 0, 1],
        [198, 51, 100, 7],
        1234,
        80,
        0,
    ));
    drops.insert("not_for_us", 1);
    frames.push(tcp_frame(PORT_MAC, [10, 4, 0, 2], vip, 1234, 443, 0));
    drops.insert("no_rule", 1);
    frames.push(vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0]);
    drops.insert("truncated_ethernet", 1);
    frames.push(arp_request([192, 0, 2, 99], [192, 0, 2, 1]));
    drops.insert("no_exception_path", 1);
    (frames, drops)
}

fn run_case(encap: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, String) {
    let dir = tempdir(&format!("golden-{encap}"));
    let (input, _) = input_frames();
    write_pcap(&dir.join("in.pcap"), &input);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(encap, &dir)).unwrap();
    let metrics = run_sluice(&cfg, &dir);
    let output = read_pcap(&dir.join("out.pcap"));
    (input, output, metrics)
}

/// The IP packet inside a frame received by a backend, and which backend
/// (by MAC) it was sent to, checked field by field.
fn check_delivery(encap: &str, frame: &[u8]) -> (usize, Vec<u8>) {
    let backend = BACKENDS
        .iter()
        .position(|(_, m)| frame[..6] == m[..])
        .unwrap_or_else(|| panic!("destination MAC {:02x?} is no backend", &frame[..6]));
    assert_eq!(frame[6..12], PORT_MAC, "source MAC must be the port's");
    let p = SlicedPacket::from_ethernet(frame).expect("output parses");
    assert!(p.vlan.is_none(), "output must be untagged");
    match encap {
        "l2" => (backend, frame[14..].to_vec()),
        "gre" => {
            let Some(NetSlice::Ipv4(outer)) = &p.net else {
                panic!("GRE outer must be IPv4")
            };
            let h = outer.header();
            assert_eq!(h.protocol(), etherparse::IpNumber::GRE);
            assert_eq!(
                h.source(),
                [192, 0, 2, 1],
                "outer source = appliance address"
            );
            let want: IpAddr = BACKENDS[backend].0.parse().unwrap();
            assert_eq!(
                IpAddr::from(h.destination()),
                want,
                "outer destination = the backend whose MAC was used"
            );
            assert_eq!(h.ttl(), 64);
            let hdr = h.to_header();
            assert_eq!(
                hdr.header_checksum,
                hdr.calc_header_checksum(),
                "outer IPv4 checksum"
            );
            let gre = outer.payload().payload;
            assert_eq!(&gre[..2], &[0, 0], "GRE flags/version 0");
            let inner = &gre[4..];
            let proto = u16::from_be_bytes([gre[2], gre[3]]);
            assert_eq!(proto, if inner[0] >> 4 == 4 { 0x0800 } else { 0x86dd });
            assert_eq!(usize::from(h.total_len()), 20 + 4 + inner.len());
            (backend, inner.to_vec())
        }
        other => panic!("unknown encap {other}"),
    }
}

fn flow_of(ip_packet: &[u8]) -> (IpAddr, u16, IpAddr, u16, u8) {
    let p = SlicedPacket::from_ip(ip_packet).expect("inner IP parses");
    let (src, dst, proto) = match &p.net {
        Some(NetSlice::Ipv4(v4)) => (
            IpAddr::from(v4.header().source()),
            IpAddr::from(v4.header().destination()),
            v4.header().protocol().0,
        ),
        _ => panic!("inner is IPv4 in this input"),
    };
    let (sp, dp) = match &p.transport {
        Some(TransportSlice::Tcp(t)) => (t.source_port(), t.destination_port()),
        Some(TransportSlice::Udp(u)) => (u.source_port(), u.destination_port()),
        _ => (0, 0),
    };
    (src, sp, dst, dp, proto)
}

fn check_case(encap: &str) {
    let (input, output, metrics) = run_case(encap);
    let (_, expected_drops) = input_frames();
    let forwarded: Vec<&Vec<u8>> = input
        .iter()
        .filter(|f| {
            let p = SlicedPacket::from_ethernet(f);
            matches!(p, Ok(p) if matches!(&p.net, Some(NetSlice::Ipv4(v4))
                if v4.header().destination() == [203, 0, 113, 10]
                && matches!(p.transport, Some(TransportSlice::Tcp(ref t)) if t.destination_port() == 80)
                    || matches!(p.transport, Some(TransportSlice::Udp(ref u)) if u.destination_port() == 53)))
        })
        .collect();
    assert_eq!(
        output.len(),
        forwarded.len(),
        "every packet for a rule is forwarded"
    );

    let mut owner: HashMap<_, usize> = HashMap::new();
    let mut per_backend = [0usize; 3];
    for (out, inp) in output.iter().zip(&forwarded) {
        let (backend, inner) = check_delivery(encap, out);
        let ip_start = if inp[12..14] == [0x81, 0x00] { 18 } else { 14 };
        assert_eq!(inner, inp[ip_start..], "inner packet must be untouched");
        let flow = flow_of(&inner);
        let prev = *owner.entry(flow).or_insert(backend);
        assert_eq!(
            prev, backend,
            "HA-1: every packet of flow {flow:?} goes to one backend"
        );
        per_backend[backend] += 1;
    }
    assert!(
        per_backend.iter().all(|&n| n >= 15),
        "MG-3: spread over backends: {per_backend:?}"
    );
    compare_with_expected(encap, &output);

    let m = parse_metrics(&metrics);
    let rx = m
        .get("sluice_port_rx_packets_total{port=\"uplink\"}")
        .copied()
        .unwrap_or(0);
    let tx = m
        .get("sluice_port_tx_packets_total{port=\"uplink\"}")
        .copied()
        .unwrap_or(0);
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(rx, input.len() as u64, "{metrics}");
    assert_eq!(tx, output.len() as u64, "{metrics}");
    assert_eq!(
        rx + extra_fragments(&m),
        tx + drops,
        "RX = TX + drops - extra fragments\n{metrics}"
    );
    // Our counters agree with the driver's own (rte_eth_stats).
    let hw = |family: &str| {
        m.get(&format!("sluice_port_hw_{family}_total{{port=\"uplink\"}}"))
            .copied()
    };
    assert_eq!(hw("rx_packets"), Some(rx), "driver RX\n{metrics}");
    assert_eq!(hw("tx_packets"), Some(tx), "driver TX\n{metrics}");
    for (reason, n) in expected_drops {
        let key = format!("sluice_dropped_packets_total{{reason=\"{reason}\"}}");
        assert_eq!(m.get(&key).copied(), Some(n), "{key}\n{metrics}");
    }
    // Per rule: every packet each rule matched (the TCP flows and the
    // tagged one; the datagrams); the packet to port 443 matched none.
    let tcp_in = forwarded
        .iter()
        .filter(|f| is_udp(f) == Some(false))
        .count() as u64;
    let udp_in = forwarded.iter().filter(|f| is_udp(f) == Some(true)).count() as u64;
    assert_eq!((tcp_in, udp_in), (121, 10));
    assert_eq!(m["sluice_rule_packets_total{rule=\"web-http\"}"], tcp_in);
    assert_eq!(m["sluice_rule_packets_total{rule=\"web-dns\"}"], udp_in);
    // New connections: one per tracked TCP flow (its first packet, no SYN
    // here, opened the entry); UDP is not tracked (CT-2), so opens none.
    assert_eq!(
        sum_metrics(&m, "sluice_backend_new_connections_total"),
        61,
        "{metrics}"
    );
    let per_backend_metric = sum_metrics(&m, "sluice_backend_packets_total");
    assert_eq!(per_backend_metric, tx, "packets per backend add up to TX");
    // Frames as sent: the backends' bytes add up to what left the port.
    let sent: usize = output.iter().map(Vec::len).sum();
    assert_eq!(
        sum_metrics(&m, "sluice_backend_bytes_total"),
        sent as u64,
        "bytes per backend add up to the bytes sent\n{metrics}"
    );
}

/// Whether a frame carries UDP (Some(true)) or TCP (Some(false)).
fn is_udp(frame: &[u8]) -> Option<bool> {
    match SlicedPacket::from_ethernet(frame).ok()?.transport? {
        TransportSlice::Udp(_) => Some(true),
        TransportSlice::Tcp(_) => Some(false),
        _ => None,
    }
}

/// AP-3 L2 DSR: destination MAC rewritten to the backend's, source MAC to
/// the port's, VLAN tag removed, IP packet byte-identical.
#[test]
fn golden_l2_dsr_through_real_binary() {
    check_case("l2");
}

/// AP-3 GRE: outer IPv4 appliance → backend, protocol 47, valid checksum,
/// GRE protocol type = inner ethertype, inner packet byte-identical.
#[test]
fn golden_gre_through_real_binary() {
    check_case("gre");
}
