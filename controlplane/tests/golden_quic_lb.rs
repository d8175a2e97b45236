//! QUIC-LB through the real `sluice` binary on DPDK (`net_pcap`, one
//! worker, burst size 1): QUIC packets whose connection IDs a server
//! encoded (one config in the clear, one encrypted) reach the backend of
//! their server ID from any client address and port (a migrated client);
//! Initials, unknown server IDs and unroutable config bits take the
//! ordinary path (CT-3: 5-tuple entries under CLIENT_IP_PORT_PROTO). Then
//! the test hook marks one backend unhealthy: its connection IDs fall back
//! (CT-8: UDP does not persist) while the others' stay routed. The
//! metrics count each decision, and `sluice explain` names the backend a
//! connection ID routes to.
//!
//! Output frames are L2 DSR, so the backend is read from the destination
//! MAC.

mod common;
mod explain_common;

use std::path::Path;

use common::*;
use etherparse::PacketBuilder;
use sluice_core::quic_lb::cid::{CidCodec, CidLengths};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKENDS: [(&str, [u8; 6]); 3] = [
    ("192.0.2.10", [0x02, 0, 0, 0, 0, 0x10]),
    ("192.0.2.11", [0x02, 0, 0, 0, 0, 0x11]),
    ("192.0.2.12", [0x02, 0, 0, 0, 0, 0x12]),
];
const KEY: &str = "8f95f09245765f80256934e50c66207f";
const SICK: usize = 0;
/// Routed packets per backend and phase, and per config.
const CLIENTS: u8 = 6;

/// Backend `b`'s server ID under config 0 (2 bytes, in the clear) and
/// config 1 (3 bytes, encrypted).
fn server_ids(b: usize) -> (Vec<u8>, Vec<u8>) {
    (vec![0x0a, b as u8], vec![0xc1, 0xd2, b as u8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn key() -> [u8; 16] {
    let v: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&KEY[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn codecs() -> [CidCodec; 2] {
    [
        CidCodec::new(CidLengths::new(0, 2, 4).unwrap(), None),
        CidCodec::new(CidLengths::new(1, 3, 6).unwrap(), Some(key())),
    ]
}

fn config(dir: &Path) -> String {
    config_with(dir, &[0, 1])
}

/// The configuration with QUIC-LB configs `ids` (0: in the clear, 1:
/// encrypted); backends carry server IDs for those only.
fn config_with(dir: &Path, ids: &[usize]) -> String {
    let backends: Vec<String> = BACKENDS
        .iter()
        .enumerate()
        .map(|(b, (a, m))| {
            let (c0, c1) = server_ids(b);
            let ids = match ids {
                [0] => format!("quic_server_id = \"{}\"", hex(&c0)),
                [1] => format!("quic_server_id = \"{}\"", hex(&c1)),
                _ => format!(
                    "quic_server_id = \"{}\", quic_server_ids = {{ \"1\" = \"{}\" }}",
                    hex(&c0),
                    hex(&c1)
                ),
            };
            format!("{{ address = \"{a}\", mac = \"{}\", {ids} }}", mac_str(m))
        })
        .collect();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1
burst_size = 1
conntrack_capacity = 4096

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "quic"
encapsulation = "l2"
session_affinity = "CLIENT_IP_PORT_PROTO"
backend = [ {backends} ]

{tables}
[[forwarding_rule]]
name = "quic-443"
vip = "203.0.113.10"
protocol = "UDP"
ports = "443"
backend_service = "quic"
"#,
        dir = dir.display(),
        port_mac = mac_str(&PORT_MAC),
        backends = backends.join(", "),
        tables = ids.iter().map(|&i| QUIC_LB_TABLES[i]).collect::<String>(),
    )
}

/// The `[[backend_service.quic_lb]]` tables of config 0 and config 1.
const QUIC_LB_TABLES: [&str; 2] = [
    "[[backend_service.quic_lb]]\nconfig_id = 0\nserver_id_length = 2\nnonce_length = 4\n\n",
    concat!(
        "[[backend_service.quic_lb]]\nconfig_id = 1\nserver_id_length = 3\nnonce_length = 6\n",
        "key = \"8f95f09245765f80256934e50c66207f\"\n\n"
    ),
];

fn datagram(src: [u8; 4], sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC)
        .ipv4(src, [203, 0, 113, 10], 64)
        .udp(sport, 443)
        .write(&mut out, payload)
        .unwrap();
    out
}

/// A 1-RTT packet to backend `b` under `config`, nonce from `seed`.
fn short_header(config: usize, b: usize, seed: u8) -> Vec<u8> {
    let codec = &codecs()[config];
    let (c0, c1) = server_ids(b);
    let sid = if config == 0 { c0 } else { c1 };
    let nonce: Vec<u8> = (0..codec.lengths().nonce).map(|i| i ^ seed).collect();
    let cid = codec.encode(seed, &sid, &nonce).unwrap();
    let mut p = vec![0x40];
    p.extend_from_slice(cid.as_bytes());
    p.extend_from_slice(&[0x77; 20]);
    p
}

/// Each backend's routed packets of one phase: CLIENTS clients, each from
/// its own address and port, alternately under config 0 and 1.
fn routed(phase: u8) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for b in 0..BACKENDS.len() {
        for c in 0..CLIENTS {
            let src = [10, 9 + phase, b as u8, c];
            let sport = 30_000 + u16::from(phase) * 1000 + u16::from(c);
            let payload = short_header(usize::from(c % 2), b, c);
            out.push((b, datagram(src, sport, &payload)));
        }
    }
    out
}

/// Packets of the ordinary path: three Initials (the client's ID), two
/// unknown server IDs, one ID with config bits 0b111.
fn unroutable() -> Vec<Vec<u8>> {
    let mut initial = vec![0xc0, 0, 0, 0, 1, 8];
    initial.extend_from_slice(&short_header(0, 1, 9)[1..9]);
    initial.extend_from_slice(&[0; 30]);
    let unknown = |sid: u8| {
        let mut p = vec![0x40, 0x05, 0x0a, sid, 1, 2, 3, 4];
        p.extend_from_slice(&[0; 20]);
        p
    };
    let mut unroutable = short_header(0, 1, 3);
    unroutable[1] |= 0xe0;
    vec![
        datagram([10, 20, 0, 1], 40_001, &initial),
        datagram([10, 20, 0, 2], 40_002, &initial),
        datagram([10, 20, 0, 3], 40_003, &initial),
        datagram([10, 20, 0, 4], 40_004, &unknown(0x33)),
        datagram([10, 20, 0, 5], 40_005, &unknown(0x34)),
        datagram([10, 20, 0, 6], 40_006, &unroutable),
    ]
}

fn backend_of(frame: &[u8]) -> usize {
    let mac: [u8; 6] = frame[..6].try_into().unwrap();
    BACKENDS
        .iter()
        .position(|(_, m)| *m == mac)
        .expect("a backend MAC")
}

#[test]
fn quic_lb_routes_by_connection_id_through_the_binary() {
    let dir = tempdir("golden_quic_lb");
    let phase1 = routed(0);
    let phase2 = routed(1);
    let fallback = unroutable();
    let mut frames: Vec<Vec<u8>> = phase1.iter().map(|(_, f)| f.clone()).collect();
    frames.extend(fallback.iter().cloned());
    let before_hook = frames.len();
    frames.extend(phase2.iter().map(|(_, f)| f.clone()));
    write_pcap(&dir.join("in.pcap"), &frames);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();
    let hook = format!("{before_hook}:{}", BACKENDS[SICK].0);
    let (stderr, metrics) =
        run_sluice_with(&cfg, &dir, &["--test-mark-unhealthy-after-packets", &hook]);
    assert!(stderr.contains("TEST HOOK"), "hook fired: {stderr}");
    let out = read_pcap(&dir.join("out.pcap"));
    assert_eq!(out.len(), frames.len(), "every packet forwarded");
    let got: Vec<usize> = out.iter().map(|f| backend_of(f)).collect();

    // Phase 1: every connection ID reaches its server, whatever the client.
    for (i, (b, _)) in phase1.iter().enumerate() {
        assert_eq!(got[i], *b, "phase 1 packet {i}");
    }
    // Phase 2: the unhealthy backend's IDs fall back (and the table has no
    // room for it any more); the others' stay routed.
    for (i, (b, _)) in phase2.iter().enumerate() {
        let g = got[before_hook + i];
        if *b == SICK {
            assert_ne!(
                g, SICK,
                "CT-8: UDP does not persist on {}",
                BACKENDS[SICK].0
            );
        } else {
            assert_eq!(g, *b, "phase 2 packet {i}");
        }
    }

    let m = parse_metrics(&metrics);
    let per_phase = BACKENDS.len() as u64 * u64::from(CLIENTS);
    let sick = u64::from(CLIENTS);
    assert_eq!(
        m["sluice_quic_lb_routed_packets_total"],
        2 * per_phase - sick
    );
    let fb =
        |reason: &str| m[&format!("sluice_quic_lb_fallback_packets_total{{reason=\"{reason}\"}}")];
    assert_eq!(fb("initial"), 3);
    assert_eq!(fb("unknown_server_id"), 2);
    assert_eq!(fb("unroutable_config"), 1);
    assert_eq!(fb("backend_unhealthy"), sick);
    assert_eq!(
        fb("unknown_config") + fb("too_short") + fb("backend_gone"),
        0
    );
    // Only the ordinary path writes conntrack entries: one per 5-tuple.
    assert_eq!(m["sluice_conntrack_inserts_total"], 6 + sick);
    assert_eq!(
        m["sluice_rule_packets_total{rule=\"quic-443\"}"],
        frames.len() as u64
    );

    // `sluice explain` on the same configuration: the connection ID names
    // its backend, or the reason it does not.
    let cfg = cfg.to_str().unwrap();
    let routed_flow = format!(
        "udp 198.51.100.7:40000 -> 203.0.113.10:443 dcid {}",
        hex(&short_header(1, 2, 5)[1..11])
    );
    let a = &explain_common::explain_json(&["-c", cfg, "--json", &routed_flow])[0];
    let q = &a["balancing"]["quic_lb"];
    assert_eq!(q["config_id"], 1, "{a}");
    assert_eq!(q["server_id"], hex(&server_ids(2).1), "{a}");
    assert_eq!(q["routed_to"], BACKENDS[2].0, "{a}");
    assert_eq!(a["backend"], BACKENDS[2].0, "{a}");
    let unknown_flow = "udp 198.51.100.7:40000 -> 203.0.113.10:443 dcid 050a3301020304";
    let (ok, text, err) = explain_common::explain(&["-c", cfg, unknown_flow]);
    assert!(ok, "{err}");
    assert!(
        text.contains("config 0, server ID 0a33: not routable (unknown_server_id)"),
        "{text}"
    );
}

/// Config rotation across reloads: config 1 added next to 0 (both route
/// meanwhile), then config 0 removed (its IDs fall back as
/// `unknown_config`, config 1's stay routed). The reload goes through the
/// production path at an exact point of the replay
/// (`--test-reload-after-packets`).
#[test]
fn quic_lb_config_rotation_across_reloads() {
    // Packets of both configs to every backend, before and after.
    let both = |phase: u8| -> Vec<(usize, usize, Vec<u8>)> {
        let mut out = Vec::new();
        for b in 0..BACKENDS.len() {
            for config in 0..2 {
                let src = [10, 30 + phase, b as u8, config as u8];
                let payload = short_header(config, b, phase * 16 + b as u8);
                out.push((
                    config,
                    b,
                    datagram(src, 50_000 + u16::from(phase), &payload),
                ));
            }
        }
        out
    };
    for (name, start, next) in [
        ("golden_quic_lb_add", &[0usize][..], &[0usize, 1][..]),
        ("golden_quic_lb_remove", &[0, 1][..], &[1][..]),
    ] {
        let dir = tempdir(name);
        let (before, after) = (both(0), both(1));
        let frames: Vec<Vec<u8>> = before.iter().chain(&after).map(|p| p.2.clone()).collect();
        write_pcap(&dir.join("in.pcap"), &frames);
        let cfg = dir.join("sluice.toml");
        std::fs::write(&cfg, config_with(&dir, start)).unwrap();
        let next_cfg = dir.join("next.toml");
        std::fs::write(&next_cfg, config_with(&dir, next)).unwrap();
        let hook = format!("{}:{}", before.len(), next_cfg.display());
        let (stderr, metrics) =
            run_sluice_with(&cfg, &dir, &["--test-reload-after-packets", &hook]);
        assert!(stderr.contains("TEST HOOK"), "{name}: hook fired: {stderr}");
        let out = read_pcap(&dir.join("out.pcap"));
        assert_eq!(out.len(), frames.len(), "{name}: every packet forwarded");
        let mut expected_routed = 0;
        for (i, (config, b, _)) in before.iter().chain(&after).enumerate() {
            let live = if i < before.len() { start } else { next };
            if live.contains(config) {
                assert_eq!(
                    backend_of(&out[i]),
                    *b,
                    "{name}: packet {i} (config {config})"
                );
                expected_routed += 1;
            }
        }
        let m = parse_metrics(&metrics);
        assert_eq!(
            m["sluice_quic_lb_routed_packets_total"], expected_routed,
            "{name}"
        );
        let unknown = m["sluice_quic_lb_fallback_packets_total{reason=\"unknown_config\"}"];
        assert_eq!(unknown, frames.len() as u64 - expected_routed, "{name}");
    }
}
