//! The exception path past a TAP's queue pairs (AP-4), through the real
//! `sluice` binary on DPDK. A TAP opens with a queue pair per worker up to
//! what `net_tap` can start with (4 on DPDK 22.11, which reports 16 but
//! aborts at start from 5: `NET_TAP_START_QUEUE_PAIRS`); workers past the
//! last pair hand what they punt over a relay ring to the worker that owns
//! pair `worker % pairs`, which writes it to the kernel.
//!
//! The replay runs 6 workers on a `net_pcap` port of 6 `rx_pcap`/`tx_pcap`
//! pairs (`net_pcap` has at most 16 queues) with the TAP held to 2 queue
//! pairs by the `--test-tap-queue-pairs` hook, whatever the DPDK build
//! allows, so workers 2–5 relay. An ARP request and a ping for the port's
//! address arrive on queues 3, 4 and 5; the kernel's answers must leave on
//! the port, and nothing is dropped. The workers share one CPU
//! (`--lcores`, adaptive idle). Run in a private network namespace
//! (`unshare -n`). 18 workers with a TAP start (on `net_null`, which has
//! the queues), and `check-config` accepts up to 128.

mod common;

use std::path::Path;

use common::*;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PORT4: [u8; 4] = [192, 0, 2, 1];
const WORKERS: usize = 6;
/// The TAP's queue pairs: workers 2 to 5 relay (3 and 5 to worker 1, 4 to
/// worker 0).
const TAP_PAIRS: usize = 2;
/// The queues the requests arrive on, and the client sending on each.
const RELAYING: [(usize, [u8; 4]); 3] = [
    (3, [192, 0, 2, 97]),
    (4, [192, 0, 2, 98]),
    (5, [192, 0, 2, 99]),
];

fn config(dir: &Path, workers: usize) -> String {
    let d = dir.display();
    let pairs: String = (0..workers)
        .map(|q| format!(",rx_pcap={d}/in{q}.pcap,tx_pcap={d}/out{q}.pcap"))
        .collect();
    format!(
        r#"
[dataplane]
{eal}
workers = {workers}
idle = "adaptive"
burst_size = 8
mbufs = 32767
conntrack_capacity = 1024

[[dataplane.port]]
name = "uplink"
device = "net_pcap0{pairs}"
mac = "{port_mac}"
address = "192.0.2.1/24"
tap = "slrelay-t"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#,
        eal = eal_args_and(512, &format!(r#", "--lcores=0@0,(1-{workers})@1""#)),
        port_mac = mac_str(&PORT_MAC),
    )
}

/// ICMP echo request (id 7, seq `seq`) from `src` to `dst`.
fn echo_request(src: [u8; 4], dst: [u8; 4], seq: u16) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC)
        .ipv4(src, dst, 64)
        .icmpv4_echo_request(7, seq)
        .write(&mut out, b"sluice tap relay")
        .unwrap();
    out
}

/// Whether `f` is the kernel's ARP reply for the port's address to `client`.
fn is_arp_reply(f: &[u8], client: [u8; 4]) -> bool {
    f.len() >= 42
        && f[12..14] == [0x08, 0x06]
        && f[20..22] == [0, 2]
        && f[22..28] == PORT_MAC
        && f[28..32] == PORT4
        && f[38..42] == client
}

/// AP-4: workers without a TAP queue pair relay what they punt to a worker
/// that has one; the kernel answers the ARP requests and pings that
/// reached sluice on queues 3, 4 and 5, the answers leave on the port,
/// and no relayed packet is dropped (`exception_relay_full` 0; without
/// the relay they were dropped as `no_exception_path`).
#[test]
fn ap_4_workers_past_the_taps_queue_pairs_reach_the_kernel_through_a_relay() {
    let dir = tempdir("tap-relay");
    for q in 0..WORKERS {
        let frames = match RELAYING.iter().find(|(rq, _)| *rq == q) {
            Some(&(_, c)) => vec![arp_request(c, PORT4), echo_request(c, PORT4, q as u16)],
            None => Vec::new(),
        };
        write_pcap(&dir.join(format!("in{q}.pcap")), &frames);
    }
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir, WORKERS)).unwrap();
    let dump = dir.join("metrics.txt");
    let out = std::process::Command::new("unshare")
        .arg("-n")
        .arg(sluice_bin())
        .args([
            "run",
            "--no-metrics-server",
            "--no-control-socket",
            "--exit-on-idle",
            "1000",
            "--test-tap-queue-pairs",
            &TAP_PAIRS.to_string(),
            "--config",
        ])
        .arg(&cfg)
        .arg("--metrics-dump")
        .arg(&dump)
        .output()
        .expect("spawn unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sluice failed: {}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("2 queue pairs: workers 2 to 5 relay"),
        "the TAP has 2 queue pairs\n{stderr}"
    );
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let output: Vec<Vec<u8>> = (0..WORKERS)
        .flat_map(|q| read_pcap(&dir.join(format!("out{q}.pcap"))))
        .collect();
    for (q, c) in RELAYING {
        assert!(
            output.iter().any(|f| is_arp_reply(f, c)),
            "ARP reply to {c:?} (queue {q}): {output:02x?}\n{m:?}"
        );
        assert!(
            output.iter().any(|f| is_echo_reply(f, PORT4, c)),
            "echo reply to {c:?} (queue {q}): {output:02x?}\n{m:?}"
        );
    }
    let relay_full = "sluice_dropped_packets_total{reason=\"exception_relay_full\"}";
    assert!(m.contains_key(relay_full), "{m:?}");
    assert_eq!(get(relay_full), 0, "{m:?}");
    assert_eq!(
        get("sluice_port_punted_packets_total{port=\"uplink\"}"),
        2 * RELAYING.len() as u64,
        "every ARP request and ping punted\n{m:?}"
    );
    assert_eq!(sum_metrics(&m, "sluice_dropped_packets_total"), 0, "{m:?}");
}

/// AP-4: more workers than a TAP has queue pairs (16) is a valid
/// configuration; the workers limit stays 1–128.
#[test]
fn ap_4_check_config_accepts_more_workers_than_a_tap_has_queue_pairs() {
    let dir = tempdir("tap-relay-check");
    for workers in [17, 18, 128] {
        let cfg = dir.join(format!("w{workers}.toml"));
        std::fs::write(&cfg, config(&dir, workers)).unwrap();
        let out = std::process::Command::new(sluice_bin())
            .arg("check-config")
            .arg(&cfg)
            .output()
            .expect("spawn sluice");
        assert!(
            out.status.success(),
            "{workers} workers: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// AP-4: 18 workers start on a port with a TAP: the TAP opens with the 4
/// queue pairs DPDK 22.11's `net_tap` can start with (it reports 16, but
/// aborts the process at start from 5: `NET_TAP_START_QUEUE_PAIRS`), and
/// workers 4 to 17 relay. Before the relay this configuration was refused
/// (and 5 to 16 workers with a TAP aborted at start). (`net_null` has the queues
/// for 18 workers that `net_pcap` lacks, and receives nothing here.)
#[test]
fn ap_4_eighteen_workers_run_on_a_port_with_a_tap() {
    let dir = tempdir("tap-relay-18");
    let text = config(&dir, 18);
    let start = text.find("device = ").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let text = format!(
        "{}device = \"net_null0,no-rx=1\"{}",
        &text[..start],
        &text[end..]
    );
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new("unshare")
        .arg("-n")
        .arg(sluice_bin())
        .args([
            "run",
            "--no-metrics-server",
            "--no-control-socket",
            "--duration",
            "1",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .expect("spawn unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sluice failed: {}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("4 queue pairs: workers 4 to 17 relay"),
        "{stderr}"
    );
}
