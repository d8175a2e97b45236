//! One busy client address on every worker (AP-1, CT-3) through the real
//! `sluice` binary on `net_pcap` (one RX queue per `rx_pcap` file, no
//! RSS: software steering): a connection is owned by its 5-tuple, so one
//! client address's connections spread over 2 and 4 workers, each still
//! in exactly one shard; its fragmented UDP (untracked, CT-4; hashed on
//! the 3-tuple, HA-2) is forwarded where it arrives.

mod common;

use std::path::Path;

use common::*;
use etherparse::PacketBuilder;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT: [u8; 4] = [198, 51, 100, 7];
const VIP: [u8; 4] = [203, 0, 113, 10];
const CONNECTIONS: u16 = 4000;

fn config(dir: &Path, workers: usize) -> String {
    let d = dir.display();
    let rx: Vec<String> = (0..workers)
        .map(|q| format!("rx_pcap={d}/q{q}.pcap,tx_pcap={d}/out{q}.pcap"))
        .collect();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = {workers}
conntrack_capacity = 16384

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,{rx}"
mac = "{mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [
  {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }},
  {{ address = "192.0.2.11", mac = "02:00:00:00:00:11" }},
]

[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
backend_service = "web"

[[forwarding_rule]]
name = "udp"
vip = "203.0.113.10"
protocol = "UDP"
backend_service = "web"
"#,
        rx = rx.join(","),
        mac = mac_str(&PORT_MAC),
    )
}

fn tcp(sport: u16, syn: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x07], PORT_MAC)
        .ipv4(CLIENT, VIP, 64)
        .tcp(sport, 80, 1000, 65535);
    let b = if syn { b.syn() } else { b.ack(1) };
    b.write(&mut out, &[]).unwrap();
    out
}

/// The two fragments of a UDP datagram of `id` from `sport` (8 bytes of
/// UDP header and 16 of payload in the first, 16 more in the second).
fn udp_fragments(id: u16, sport: u16) -> [Vec<u8>; 2] {
    let mut whole = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x07], PORT_MAC)
        .ipv4(CLIENT, VIP, 64)
        .udp(sport, 53)
        .write(&mut whole, &[7u8; 32])
        .unwrap();
    let eth = &whole[..14];
    let ip = &whole[14..34];
    let l4 = &whole[34..];
    let fragment = |offset: usize, body: &[u8], more: bool| {
        let mut h = ip.to_vec();
        h[2..4].copy_from_slice(&((20 + body.len()) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&id.to_be_bytes());
        let flags = ((offset / 8) as u16) | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&flags.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let sum = ipv4_header_checksum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        [eth, &h, body].concat()
    };
    [fragment(0, &l4[..24], true), fragment(24, &l4[24..], false)]
}

/// AP-1 / CT-3: one client address's 4,000 connections (each SYN on one
/// queue, its ACK on the next) spread over `workers` workers within ±15 %
/// of an even share, each inserted once in its owner's shard; the
/// client's 50 fragmented UDP datagrams beside them, untracked, are all
/// forwarded and never steered.
fn one_client_spreads(workers: usize) {
    let dir = tempdir(&format!("ownership_{workers}"));
    let mut queues = vec![Vec::new(); workers];
    for (i, sport) in (10_000..10_000 + CONNECTIONS).enumerate() {
        queues[i % workers].push(tcp(sport, true));
        queues[(i + 1) % workers].push(tcp(sport, false));
    }
    for id in 0..50u16 {
        let [first, second] = udp_fragments(100 + id, 20_000 + id);
        queues[usize::from(id) % workers].push(first);
        queues[usize::from(id + 1) % workers].push(second);
    }
    for (q, frames) in queues.iter().enumerate() {
        write_pcap(&dir.join(format!("q{q}.pcap")), frames);
    }
    let path = dir.join("sluice.toml");
    std::fs::write(&path, config(&dir, workers)).unwrap();
    let m = parse_metrics(&run_sluice(&path, &dir));
    let entries: Vec<u64> = (0..workers)
        .map(|w| m[&format!("sluice_conntrack_entries{{worker=\"{w}\"}}")])
        .collect();
    let even = u64::from(CONNECTIONS) / workers as u64;
    eprintln!("{workers} workers: conntrack entries {entries:?}");
    for &n in &entries {
        assert!(
            n.abs_diff(even) * 100 <= even * 15,
            "{workers} workers: {entries:?} (even {even})"
        );
    }
    assert_eq!(
        m["sluice_conntrack_inserts_total"],
        u64::from(CONNECTIONS),
        "one insert per connection: its SYN and ACK met in one shard"
    );
    let rx = m["sluice_port_rx_packets_total{port=\"uplink\"}"];
    let tx = m["sluice_port_tx_packets_total{port=\"uplink\"}"];
    assert_eq!(rx, 2 * u64::from(CONNECTIONS) + 100);
    assert_eq!(tx, rx, "every packet forwarded, fragments included");
    // Exactly the TCP packets that arrived at a worker not owning their
    // connection crossed; the fragments stayed.
    let crossed: u64 = queues
        .iter()
        .enumerate()
        .flat_map(|(q, frames)| frames.iter().map(move |f| (q, f)))
        .filter(|(q, f)| f[23] == 6 && steering_owner(f, workers) != *q)
        .count() as u64;
    let steered = m["sluice_steered_packets_total{direction=\"out\"}"];
    assert_eq!(
        steered, crossed,
        "steered: the packets away from their owner"
    );
}

#[test]
fn ap_1_one_client_address_spreads_over_two_workers() {
    one_client_spreads(2);
}

#[test]
fn ap_1_one_client_address_spreads_over_four_workers() {
    one_client_spreads(4);
}
