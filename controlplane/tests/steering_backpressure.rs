//! No silent loss between workers (AP-1 software steering), through the real `sluice` binary on DPDK: two workers on `net_pcap`
//! (one RX queue per `rx_pcap` file, no RSS on addresses, so tracked
//! packets are steered to the worker owning their address pair). Queue 0
//! carries only flows that worker 1 owns, queue 1 more of worker 1's own:
//! worker 0 does nothing but hand packets over, faster than worker 1 can
//! take them. A full ring must hold worker 0 back (it stops reading RX,
//! the port keeps the packets), not drop them: every packet leaves, none
//! is dropped as `steering_ring_full`, and RX = TX + Σ drops.

mod common;

use std::path::Path;

use common::*;
use etherparse::PacketBuilder;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Packets per RX queue.
const PER_QUEUE: usize = 40_000;

fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
[dataplane]
{eal}
workers = 2
burst_size = 32
conntrack_capacity = 4096

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/a.pcap,rx_pcap={d}/b.pcap,tx_pcap={d}/c.pcap,tx_pcap={d}/d.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }}, {{ address = "192.0.2.11", mac = "02:00:00:00:00:11" }} ]

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#,
        eal = eal_args(512),
        port_mac = mac_str(&PORT_MAC),
    )
}

/// An established-flow TCP segment from client `c` (tracked: CT-4).
fn tcp(c: u8, sport: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, c], PORT_MAC)
        .ipv4([10, 7, 0, c], [203, 0, 113, 10], 64)
        .tcp(sport, 80, 1000, 65535)
        .ack(1)
        .write(&mut out, &[0u8; 16])
        .unwrap();
    out
}

/// AP-1: a full steering ring backs the sender off (it stops reading RX
/// and retries next poll) instead of dropping: `steering_ring_full` stays
/// 0, every packet is transmitted, RX = TX + Σ drops. Before backpressure
/// this replay dropped thousands as `steering_ring_full`.
#[test]
fn ap_1_full_steering_ring_holds_the_sender_back_without_loss() {
    let dir = tempdir("steering_backpressure");
    // Connections (client, source port) that worker 1 owns: queue 0's
    // packets all cross to it.
    let frames = |offset: u16| -> Vec<Vec<u8>> {
        let owned: Vec<(u8, u16)> = (1..=64u8)
            .flat_map(|c| (0..64).map(move |p| (c, offset + p)))
            .filter(|&(c, p)| steering_owner(&tcp(c, p), 2) == 1)
            .take(1024)
            .collect();
        assert!(owned.len() >= 512, "too few connections owned by worker 1");
        (0..PER_QUEUE)
            .map(|i| {
                let (c, p) = owned[i % owned.len()];
                tcp(c, p)
            })
            .collect()
    };
    write_pcap(&dir.join("a.pcap"), &frames(20_000));
    write_pcap(&dir.join("b.pcap"), &frames(30_000));
    let path = dir.join("sluice.toml");
    std::fs::write(&path, config(&dir)).unwrap();

    let m = parse_metrics(&run_sluice(&path, &dir));
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let rx = get("sluice_port_rx_packets_total{port=\"uplink\"}");
    let tx = get("sluice_port_tx_packets_total{port=\"uplink\"}");
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(rx, 2 * PER_QUEUE as u64, "every packet was read");
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"steering_ring_full\"}"),
        0,
        "steered packets dropped on a full ring; all drops: {drops}"
    );
    assert_eq!(rx + extra_fragments(&m), tx + drops, "RX = TX + Σ drops");
    assert_eq!(tx, rx, "nothing else to drop here");
    assert_eq!(
        get("sluice_steered_packets_total{direction=\"out\"}"),
        PER_QUEUE as u64,
        "all of queue 0 crossed to worker 1"
    );
    eprintln!(
        "RX polls held back by a full ring: {}",
        get("sluice_steering_backpressure_total")
    );
    let out = read_pcap(&dir.join("c.pcap")).len() + read_pcap(&dir.join("d.pcap")).len();
    assert_eq!(out as u64, tx);
}
