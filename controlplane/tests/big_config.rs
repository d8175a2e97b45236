//! A configuration with more backends than 65,536 through the real binary:
//! every forwarded packet is counted under its backend in
//! `sluice_backend_packets_total`, those of backends with an id index of
//! 65,536 and above included.

mod common;

use std::collections::HashSet;

use common::*;

const BACKENDS: usize = 70_000;
const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// Backend k (config order, so id index k) is 10.1.0.0 + k.
fn address(k: usize) -> String {
    let a = 0x0a01_0000u32 + k as u32;
    std::net::Ipv4Addr::from(a).to_string()
}

fn config(dir: &std::path::Path) -> String {
    let mut backends = String::with_capacity(BACKENDS * 64);
    for k in 0..BACKENDS {
        backends += &format!(
            "  {{ address = \"{}\", mac = \"02:00:00:00:01:01\" }},\n",
            address(k)
        );
    }
    format!(
        r#"
{dataplane}

[[backend_service]]
name = "big"
maglev_table_size = 655373
backend = [
{backends}]

[[forwarding_rule]]
name = "big-dns"
vip = "203.0.113.10"
protocol = "UDP"
ports = "53"
backend_service = "big"

# Per-backend series for all 70,000 (above the default limit of 10,000).
[metrics]
backend_series_limit = 100000
"#,
        dataplane = pcap_dataplane(dir, &PORT_MAC, "10.0.0.1/8", ""),
    )
}

/// 70,000 backends, 3,000 UDP flows: Σ per-backend packets = packets sent,
/// and backends with index ≥ 65,536 (about 6 % of the table) are among
/// the counted.
#[test]
fn backends_above_65536_are_counted_through_the_binary() {
    let dir = tempdir("big-config-70k");
    let frames: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| {
            let client = [198, 51, 100 + (i / 1000) as u8, (i % 250) as u8 + 1];
            udp_frame(
                PORT_MAC,
                client,
                [203, 0, 113, 10],
                10_000 + i as u16,
                53,
                b"q",
            )
        })
        .collect();
    let run = replay(&dir, &config(&dir), &frames, &[]);
    let metrics = run.metrics;

    let sent = run.out.len() as u64;
    assert_eq!(sent, frames.len() as u64, "every datagram forwarded");
    let per_backend = sum_metrics(&metrics, "sluice_backend_packets_total{");
    assert_eq!(
        per_backend, sent,
        "every forwarded packet counted per backend"
    );
    let high: HashSet<String> = (65_536..BACKENDS).map(address).collect();
    let counted_high: u64 = metrics
        .iter()
        .filter(|(k, _)| k.starts_with("sluice_backend_packets_total{"))
        .filter(|(k, _)| {
            k.split("backend=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .is_some_and(|a| high.contains(a))
        })
        .map(|(_, v)| v)
        .sum();
    assert!(
        counted_high > 0,
        "no packet counted for backends with index >= 65,536"
    );
}
