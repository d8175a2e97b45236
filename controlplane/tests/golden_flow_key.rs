//! MG-2 with a fleet secret, through the real `sluice` binary on DPDK
//! (`net_pcap`): the same capture of 300 UDP flows (untracked under
//! affinity NONE, CT-4, so the flow hash alone picks each backend) replayed
//! without a key, with `flow_hash_key_file` and with the same key inline.
//! Keyed runs agree bit for bit (two appliances sharing the key), and move
//! most flows to another backend than the unkeyed hash does (an outsider
//! computing the public hash predicts wrong). Without a key the output is
//! today's: the golden pcaps of `golden.rs` and `golden_protocols.rs` run
//! unkeyed and are unchanged.

mod common;

use std::path::Path;

use common::*;
use etherparse::PacketBuilder;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const FLOWS: u16 = 300;
const KEY: &str = "8f2c6b1e0d9a47c3b5e81f6a2d4c9e07a1b3c5d7e9f10213";

fn config(dir: &Path, run: &str, key_line: &str) -> String {
    let d = dir.display();
    format!(
        r#"
[dataplane]
{eal}
workers = 1
conntrack_capacity = 4096
{key_line}

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/{run}.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "dns"
encapsulation = "l2"
session_affinity = "NONE"
backend = [
  {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }},
  {{ address = "192.0.2.11", mac = "02:00:00:00:00:11" }},
  {{ address = "192.0.2.12", mac = "02:00:00:00:00:12" }},
]

[[forwarding_rule]]
name = "dns"
vip = "203.0.113.53"
protocol = "UDP"
ports = "53"
backend_service = "dns"
"#,
        eal = eal_args(256),
        port_mac = mac_str(&PORT_MAC),
    )
}

fn udp(i: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC)
        .ipv4([10, 8, (i >> 8) as u8, i as u8], [203, 0, 113, 53], 64)
        .udp(20_000 + i, 53)
        .write(&mut out, &i.to_be_bytes())
        .unwrap();
    out
}

/// Runs sluice once with `key_line` in `[dataplane]`; the frames it sent.
fn replay(dir: &Path, run: &str, key_line: &str) -> Vec<Vec<u8>> {
    let path = dir.join(format!("{run}.toml"));
    std::fs::write(&path, config(dir, run, key_line)).unwrap();
    let m = parse_metrics(&run_sluice(&path, dir));
    assert_eq!(
        m["sluice_port_tx_packets_total{port=\"uplink\"}"],
        u64::from(FLOWS),
        "{run}: every flow forwarded"
    );
    read_pcap(&dir.join(format!("{run}.pcap")))
}

/// MG-2: with a fleet key, flows map differently than without, and two
/// runs with the same key (file or inline) agree bit for bit.
#[test]
fn mg_2_fleet_key_moves_flows_and_appliances_with_the_key_agree() {
    let dir = tempdir("golden_flow_key");
    let frames: Vec<Vec<u8>> = (0..FLOWS).map(udp).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    std::fs::write(dir.join("fleet.key"), format!("{KEY}\n")).unwrap();

    let unkeyed = replay(&dir, "unkeyed", "");
    let from_file = replay(&dir, "file", "flow_hash_key_file = \"fleet.key\"");
    let inline = replay(&dir, "inline", &format!("flow_hash_key = \"{KEY}\""));

    assert_eq!(from_file, inline, "the same key must give identical output");
    // L2 DSR: the backend is the destination MAC; frames leave in order.
    let backend = |f: &Vec<u8>| f[5];
    let moved = unkeyed
        .iter()
        .zip(&from_file)
        .filter(|(a, b)| backend(a) != backend(b))
        .count();
    eprintln!("{moved} of {FLOWS} flows on another backend under the key");
    // Three backends: an unrelated hash moves about two thirds.
    assert!(
        moved > usize::from(FLOWS) / 3,
        "only {moved} of {FLOWS} flows changed backend under the key"
    );
    for out in [&unkeyed, &from_file] {
        for b in [0x10, 0x11, 0x12] {
            assert!(out.iter().any(|f| backend(f) == b), "backend {b:#x} unused");
        }
    }
}
