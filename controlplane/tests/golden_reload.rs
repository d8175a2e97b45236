//! Reload under replayed traffic (CT-7, CT-10, AP-5) through the
//! real `sluice` binary on DPDK (`net_pcap`, one worker, burst size 1).
//!
//! The test hook `--test-reload-after-packets N:PATH` pauses the worker
//! after N packets, copies PATH over the `--config` file and raises SIGHUP,
//! so the reload goes through the production path (`Controller::reload`:
//! validation, stable backend ids, draining) at an exact point of the
//! replay. The capture:
//!
//! - before the reload: SYN of the established connections (port 80), one
//!   data packet each, and SYNs to port 443 (no rule yet);
//! - after the reload: SYNs of new port-443 connections, data of the
//!   established connections, SYN and data of new port-80 connections,
//!   data of the port-443 ones, and data of the established connections
//!   again (after the new entries were inserted).
//!
//! Every frame carries its index in the capture as payload. Output frames
//! are L2 DSR, so the backend is read from the destination MAC; the rest
//! of the frame (IP packet) must be the input's, byte for byte.
//!
//! Expected output, frame by frame, from two reference runs without any
//! reload (Maglev tables are deterministic, MG-2): the old configuration's
//! output for every packet before the reload and for established
//! connections whose backend is still served after it (CT-7; CT-10 while
//! draining); the new configuration's output for everything else (new
//! connections use the new table; connections of a backend removed
//! without draining are re-selected by it). Each case also asserts that
//! the two references disagree where it matters, so a reload that reset
//! or re-hashed established connections fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKENDS: [(&str, [u8; 6]); 4] = [
    ("192.0.2.10", [0x02, 0, 0, 0, 0, 0x10]),
    ("192.0.2.11", [0x02, 0, 0, 0, 0, 0x11]),
    ("192.0.2.12", [0x02, 0, 0, 0, 0, 0x12]),
    ("192.0.2.13", [0x02, 0, 0, 0, 0, 0x13]),
];
/// Connections established before the reload.
const OLD: u16 = 48;
/// Port-80 connections opened after the reload.
const NEW: u16 = 48;
/// Port-443 connections, before and after the reload.
const HTTPS: u16 = 12;

/// One backend service "web" (L2 DSR, PER_CONNECTION tracking).
struct Svc {
    /// (index into BACKENDS, weight).
    backends: &'static [(usize, u16)],
    connection_draining_timeout: &'static str,
    /// A rule for port 443 too.
    https: bool,
}

fn config(dir: &Path, svc: &Svc) -> String {
    let backends: Vec<String> = svc
        .backends
        .iter()
        .map(|&(i, w)| {
            let (a, m) = BACKENDS[i];
            format!(
                "{{ address = \"{a}\", mac = \"{}\", weight = {w} }}",
                mac_str(&m)
            )
        })
        .collect();
    let https = if svc.https {
        r#"
[[forwarding_rule]]
name = "web-https"
vip = "203.0.113.10"
protocol = "TCP"
ports = "443"
backend_service = "web"
"#
    } else {
        ""
    };
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
name = "web"
encapsulation = "l2"
connection_draining_timeout = "{drain}"
backend = [ {backends} ]
connection_tracking = {{ tracking_mode = "PER_CONNECTION" }}

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
{https}{bystanders}"#,
        dir = dir.display(),
        port_mac = mac_str(&PORT_MAC),
        drain = svc.connection_draining_timeout,
        backends = backends.join(", "),
        bystanders = bystanders(),
    )
}

/// Services the reloads leave as they are (with rules on VIPs the capture
/// never uses): a reload of "web" alone then builds only "web" on the
/// published snapshot, and the replay checks that build.
const BYSTANDERS: usize = 4;

fn bystanders() -> String {
    (0..BYSTANDERS)
        .map(|i| {
            format!(
                "\n[[backend_service]]\nname = \"bystander{i}\"\nencapsulation = \"l2\"\n\
                 backend = [{{ address = \"192.0.2.{}\", mac = \"02:00:00:00:01:{i:02x}\" }}]\n\
                 [[forwarding_rule]]\nname = \"bystander{i}\"\nvip = \"203.0.113.{}\"\n\
                 backend_service = \"bystander{i}\"\n",
                200 + i,
                100 + i
            )
        })
        .collect()
}

/// What a packet of the capture is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// Of a port-80 connection opened before the reload (its SYN or data).
    Established { sport: u16 },
    /// Anything else: port-443 packets, connections opened after the reload.
    Other,
}

struct Input {
    frames: Vec<Vec<u8>>,
    kinds: Vec<Kind>,
    /// Packets before the reload (the hook's N).
    before: usize,
}

impl Input {
    fn push(&mut self, sport: u16, dport: u16, syn: bool, kind: Kind) {
        let index = self.frames.len() as u32;
        let mut out = Vec::new();
        let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC)
            .ipv4([10, 9, 0, 1], [203, 0, 113, 10], 64)
            .tcp(sport, dport, 1000, 65535);
        let b = if syn { b.syn() } else { b.ack(1) };
        b.write(&mut out, &index.to_be_bytes()).unwrap();
        self.frames.push(out);
        self.kinds.push(kind);
    }
}

fn input() -> Input {
    let mut i = Input {
        frames: Vec::new(),
        kinds: Vec::new(),
        before: 0,
    };
    let old = |n: u16| 10_000 + n;
    for n in 0..OLD {
        i.push(old(n), 80, true, Kind::Established { sport: old(n) });
    }
    for n in 0..OLD {
        i.push(old(n), 80, false, Kind::Established { sport: old(n) });
    }
    for n in 0..HTTPS {
        i.push(30_000 + n, 443, true, Kind::Other);
    }
    i.before = i.frames.len();
    // Port 443 on both sides of the reload point: a case whose reload adds
    // that rule sees the reload happen exactly there.
    for n in 0..HTTPS {
        i.push(40_000 + n, 443, true, Kind::Other);
    }
    for n in 0..OLD {
        i.push(old(n), 80, false, Kind::Established { sport: old(n) });
    }
    for n in 0..NEW {
        i.push(20_000 + n, 80, true, Kind::Other);
    }
    for n in 0..NEW {
        i.push(20_000 + n, 80, false, Kind::Other);
    }
    for n in 0..HTTPS {
        i.push(40_000 + n, 443, false, Kind::Other);
    }
    for n in 0..OLD {
        i.push(old(n), 80, false, Kind::Established { sport: old(n) });
    }
    i
}

/// One run's output: capture index → output frame, and the metrics.
struct Output {
    frames: BTreeMap<usize, Vec<u8>>,
    metrics: BTreeMap<String, u64>,
    stderr: String,
}

impl Output {
    /// The backend (index into BACKENDS) packet `i` went to, if forwarded.
    fn backend(&self, i: usize) -> Option<usize> {
        self.frames.get(&i).map(|f| backend_index(f))
    }
}

fn backend_index(frame: &[u8]) -> usize {
    BACKENDS
        .iter()
        .position(|(_, m)| frame[..6] == m[..])
        .unwrap_or_else(|| panic!("destination MAC {:02x?} is no backend's", &frame[..6]))
}

/// Runs the binary over the capture with `start` and, with `reload`, the
/// hook reloading that service (plus extra text appended to the file)
/// after the packets before the reload point.
fn run(name: &str, input: &Input, start: &Svc, reload: Option<(&Svc, &str)>) -> Output {
    let dir = tempdir(name);
    write_pcap(&dir.join("in.pcap"), &input.frames);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir, start)).unwrap();
    let (stderr, metrics) = match reload {
        None => run_sluice_with(&cfg, &dir, &[]),
        Some((svc, extra)) => {
            let next = dir.join("next.toml");
            std::fs::write(&next, config(&dir, svc) + extra).unwrap();
            let hook = format!("{}:{}", input.before, next.display());
            let (stderr, metrics) =
                run_sluice_with(&cfg, &dir, &["--test-reload-after-packets", &hook]);
            assert!(
                stderr.contains("TEST HOOK: reloading"),
                "hook fired: {stderr}"
            );
            // AP-5: a reload that changed "web" alone (no rule and no
            // health check changed: none is configured) built only it.
            if extra.is_empty() {
                let built = format!("1 of {} services built", BYSTANDERS + 1);
                assert!(stderr.contains(&built), "{built}: {stderr}");
            }
            (stderr, metrics)
        }
    };
    let mut frames = BTreeMap::new();
    for f in read_pcap(&dir.join("out.pcap")) {
        let p = SlicedPacket::from_ethernet(&f).expect("an Ethernet frame");
        let Some(TransportSlice::Tcp(t)) = p.transport else {
            panic!("inner TCP untouched: {f:02x?}")
        };
        let i = u32::from_be_bytes(t.payload().try_into().expect("4-byte index")) as usize;
        assert_eq!(&f[6..12], &PORT_MAC, "L2 DSR: source MAC is the port's");
        assert_eq!(
            f[12..],
            input.frames[i][12..],
            "packet {i}: IP packet byte-identical"
        );
        backend_index(&f);
        assert!(frames.insert(i, f).is_none(), "packet {i} sent twice");
    }
    let m = parse_metrics(&metrics);
    let rx = sum_metrics(&m, "sluice_port_rx_packets_total");
    let tx = sum_metrics(&m, "sluice_port_tx_packets_total");
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    let punted = m["sluice_punted_packets_total"];
    assert_eq!(
        rx,
        input.frames.len() as u64,
        "every packet received\n{metrics}"
    );
    assert_eq!(tx, frames.len() as u64, "TX = output capture\n{metrics}");
    assert_eq!(rx, tx + drops + punted, "RX = TX + drops\n{metrics}");
    Output {
        frames,
        metrics: m,
        stderr,
    }
}

/// The packets of established connections after the reload.
fn established_after(input: &Input) -> impl Iterator<Item = (usize, u16)> + '_ {
    (input.before..input.frames.len()).filter_map(|i| match input.kinds[i] {
        Kind::Established { sport } => Some((i, sport)),
        Kind::Other => None,
    })
}

/// Runs `old` with a reload to `new` after `input.before` packets, and the
/// two reference runs; checks the reload run frame by frame against them
/// and per connection. `served`: whether established connections on a
/// backend (index) keep it after the reload (CT-7, CT-10); otherwise they
/// follow the new table. Returns (input, reload run, old ref, new ref).
fn check_reload(
    name: &str,
    old: &Svc,
    new: &Svc,
    served: impl Fn(usize) -> bool,
) -> (Input, Output, Output, Output) {
    let input = input();
    let reload = run(name, &input, old, Some((new, "")));
    let old_ref = run(&format!("{name}_ref_old"), &input, old, None);
    let new_ref = run(&format!("{name}_ref_new"), &input, new, None);

    // The expected capture, frame by frame.
    let mut expected = BTreeMap::new();
    for i in 0..input.frames.len() {
        let keep_old = i < input.before
            || match input.kinds[i] {
                Kind::Established { .. } => old_ref.backend(i).is_some_and(&served),
                Kind::Other => false,
            };
        let reference = if keep_old { &old_ref } else { &new_ref };
        if let Some(f) = reference.frames.get(&i) {
            expected.insert(i, f.clone());
        }
    }
    let sent: BTreeSet<_> = reload.frames.keys().collect();
    let want: BTreeSet<_> = expected.keys().collect();
    assert!(
        sent == want,
        "{name}: the packets forwarded; missing {:?}, unexpected {:?}",
        want.difference(&sent).collect::<Vec<_>>(),
        sent.difference(&want).collect::<Vec<_>>()
    );
    for (i, f) in &expected {
        assert_eq!(
            &reload.frames[i], f,
            "{name}: packet {i} ({:?}) differs from the reference",
            input.kinds[*i]
        );
    }

    // The same, per connection: before vs after the reload point.
    let before: BTreeMap<u16, usize> = (0..input.before)
        .filter_map(|i| match input.kinds[i] {
            Kind::Established { sport } => Some((sport, reload.backend(i)?)),
            Kind::Other => None,
        })
        .collect();
    assert_eq!(before.len(), usize::from(OLD), "every connection forwarded");
    for (i, sport) in established_after(&input) {
        let (b0, b1) = (before[&sport], reload.backend(i).expect("forwarded"));
        if served(b0) {
            assert_eq!(
                b0, b1,
                "CT-7/CT-10: connection from port {sport} moved from {} to {} (packet {i})",
                BACKENDS[b0].0, BACKENDS[b1].0
            );
        }
    }
    assert_eq!(
        reload.metrics["sluice_config_reloads_total{result=\"success\"}"], 1,
        "{}",
        reload.stderr
    );
    assert_eq!(
        reload.metrics["sluice_config_reloads_total{result=\"failure\"}"],
        0
    );
    assert_eq!(
        reload.metrics["sluice_snapshot_generation"], 2,
        "the worker runs on the reloaded snapshot"
    );
    (input, reload, old_ref, new_ref)
}

/// Established connections (index, port) whose backend after the reload
/// would differ if they were hashed on the new table.
fn moved_by_new_table(input: &Input, old_ref: &Output, new_ref: &Output) -> Vec<(usize, u16)> {
    established_after(input)
        .filter(|&(i, _)| old_ref.backend(i) != new_ref.backend(i))
        .collect()
}

/// New connections after the reload on backend `b`.
fn new_on(input: &Input, out: &Output, b: usize) -> usize {
    (input.before..input.frames.len())
        .filter(|&i| input.kinds[i] == Kind::Other && out.backend(i) == Some(b))
        .count()
}

const THREE: Svc = Svc {
    backends: &[(0, 1), (1, 1), (2, 1)],
    connection_draining_timeout: "0s",
    https: false,
};

/// CT-7, AP-5, FR-1: a reload adds a fourth backend and a port-443 rule.
/// Established connections keep their backends although the new table
/// would move some of them; new connections use the new table, some on
/// the added backend; port 443 is dropped (no rule) before the reload and
/// forwarded after it.
#[test]
fn ct_7_reload_adding_backend_and_rule_keeps_established_connections() {
    let new = Svc {
        backends: &[(0, 1), (1, 1), (2, 1), (3, 1)],
        connection_draining_timeout: "0s",
        https: true,
    };
    let (input, reload, old_ref, new_ref) =
        check_reload("golden_reload_add", &THREE, &new, |_| true);
    let moved = moved_by_new_table(&input, &old_ref, &new_ref);
    assert!(
        !moved.is_empty(),
        "some established connections would move on the new table"
    );
    assert!(
        new_on(&input, &reload, 3) > 0,
        "new connections reach 192.0.2.13"
    );
    let https: Vec<usize> = (0..input.frames.len())
        .filter(|&i| input.frames[i][36..38] == 443u16.to_be_bytes())
        .collect();
    assert_eq!(https.len(), 3 * usize::from(HTTPS));
    for &i in &https {
        assert_eq!(
            reload.frames.contains_key(&i),
            i >= input.before,
            "port 443 packet {i}: forwarded only after the reload"
        );
    }
    assert_eq!(
        reload.metrics["sluice_dropped_packets_total{reason=\"no_rule\"}"],
        u64::from(HTTPS)
    );
}

/// CT-7, AP-5: a reload changes weights (1:1:1 → 1:1:4, MG-3). Established
/// connections keep their backends; new ones follow the new weights.
#[test]
fn ct_7_reload_changing_weights_keeps_established_connections() {
    let new = Svc {
        backends: &[(0, 1), (1, 1), (2, 4)],
        ..THREE
    };
    let (input, reload, old_ref, new_ref) =
        check_reload("golden_reload_weights", &THREE, &new, |_| true);
    assert!(!moved_by_new_table(&input, &old_ref, &new_ref).is_empty());
    assert!(
        new_on(&input, &reload, 2) > new_on(&input, &old_ref, 2),
        "more new connections on the heavier 192.0.2.12"
    );
}

/// CT-10, CT-7, AP-5: a reload removes 192.0.2.11 with
/// `connection_draining_timeout = "60s"`: its established connections
/// keep going to it (the replay is far shorter than the timeout), no new
/// connection goes to it, the other connections stay where they were.
#[test]
fn ct_10_removed_backend_drains_established_connections() {
    let old = Svc {
        connection_draining_timeout: "60s",
        ..THREE
    };
    let new = Svc {
        backends: &[(0, 1), (2, 1)],
        ..old
    };
    let (input, reload, old_ref, new_ref) =
        check_reload("golden_reload_drain", &old, &new, |_| true);
    let on_removed = moved_by_new_table(&input, &old_ref, &new_ref)
        .iter()
        .filter(|&&(i, _)| old_ref.backend(i) == Some(1))
        .count();
    assert!(on_removed > 0, "established connections on 192.0.2.11");
    assert_eq!(new_on(&input, &reload, 1), 0, "CT-10: no new connection");
    let drained = established_after(&input)
        .filter(|&(i, _)| reload.backend(i) == Some(1))
        .count();
    assert_eq!(drained, on_removed, "CT-10: they all drain on 192.0.2.11");
}

/// CT-10, CT-7, AP-5: a reload removes 192.0.2.11 with the default
/// `connection_draining_timeout` (0 = cut at once): its established
/// connections are re-selected on the new table at once; connections on
/// the remaining backends stay.
#[test]
fn ct_10_removed_backend_without_draining_cuts_at_once() {
    let new = Svc {
        backends: &[(0, 1), (2, 1)],
        ..THREE
    };
    let (input, reload, old_ref, _) = check_reload("golden_reload_cut", &THREE, &new, |b| b != 1);
    assert!(
        established_after(&input).any(|(i, _)| old_ref.backend(i) == Some(1)),
        "established connections on 192.0.2.11"
    );
    assert!(
        (input.before..input.frames.len()).all(|i| reload.backend(i) != Some(1)),
        "CT-10: nothing goes to 192.0.2.11 after the reload"
    );
}

/// AP-5, CT-7: a reload with an invalid file (the fourth backend of the
/// first case plus a rule naming an unknown service) is rejected: the
/// running configuration stays — every packet goes exactly where it goes
/// without any reload, although the valid part would have sent new
/// connections to 192.0.2.13 — the failure is counted and logged, and no
/// snapshot is built.
#[test]
fn ap_5_invalid_reload_keeps_running_configuration() {
    let input = input();
    let name = "golden_reload_invalid";
    let valid = Svc {
        backends: &[(0, 1), (1, 1), (2, 1), (3, 1)],
        ..THREE
    };
    let invalid = r#"
[[forwarding_rule]]
name = "web-alt"
vip = "203.0.113.10"
protocol = "TCP"
ports = "8080"
backend_service = "nope"
"#;
    let reload = run(name, &input, &THREE, Some((&valid, invalid)));
    let old_ref = run(&format!("{name}_ref_old"), &input, &THREE, None);
    let valid_ref = run(&format!("{name}_ref_valid"), &input, &valid, None);
    assert!(new_on(&input, &valid_ref, 3) > 0, "the file means a change");
    assert_eq!(
        reload.frames, old_ref.frames,
        "AP-5: the running configuration stays"
    );
    assert!(reload.stderr.contains("reload failed"), "{}", reload.stderr);
    assert!(
        reload.stderr.contains("nope"),
        "diagnostic: {}",
        reload.stderr
    );
    let m = &reload.metrics;
    assert_eq!(m["sluice_config_reloads_total{result=\"failure\"}"], 1);
    assert_eq!(m["sluice_config_reloads_total{result=\"success\"}"], 0);
    assert_eq!(m["sluice_table_generation"], 1, "no snapshot built");
    assert_eq!(m["sluice_snapshot_generation"], 1);
    // The worker's own view, from its declared counters.
    assert_eq!(m["sluice_worker_snapshot_generation{worker=\"0\"}"], 1);
    assert!(m["sluice_worker_polls_total{worker=\"0\"}"] > 0);
}
