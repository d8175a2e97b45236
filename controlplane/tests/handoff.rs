//! Conntrack hand-off through the real `sluice` binary on DPDK
//! (`net_pcap`): a run opens TCP connections, is stopped by SIGTERM and
//! writes its connections to the hand-off file; the next run, under a
//! configuration whose Maglev table moves some of them, takes the file
//! and continues every connection on the backend it had (CT-3, CT-7).
//! The same continuation without the file shows the moves it prevents.
//! Also: one worker to two and two to one, CT-8 persistence on a backend
//! unhealthy in the next run, and files that are refused or trimmed
//! (corrupt, stale, another configuration file, services and backends
//! gone) — each said in the log, none stopping the start.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use sluice_core::handoff::HandOff;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKENDS: [(&str, [u8; 6]); 3] = [
    ("192.0.2.10", [0x02, 0, 0, 0, 0, 0x10]),
    ("192.0.2.11", [0x02, 0, 0, 0, 0, 0x11]),
    ("192.0.2.12", [0x02, 0, 0, 0, 0, 0x12]),
];
const FLOWS: u16 = 120;

/// Service `service` of `backends` (indexes into BACKENDS) behind
/// 203.0.113.10:80, L2 DSR, PER_CONNECTION, removed backends draining
/// for a minute (CT-10); on `workers` workers (each with its own input
/// and output pcap).
fn config(dir: &Path, backends: &[usize], workers: usize, service: &str) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|&i| {
            let (a, m) = BACKENDS[i];
            format!("{{ address = \"{a}\", mac = \"{}\" }}", mac_str(&m))
        })
        .collect();
    let d = dir.display();
    let queues: String = (0..workers)
        .map(|w| format!("rx_pcap={d}/in{w}.pcap,"))
        .chain((0..workers).map(|w| format!("tx_pcap={d}/out{w}.pcap,")))
        .collect();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = {workers}
conntrack_capacity = 4096

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,{queues}"
mac = "{port_mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "{service}"
encapsulation = "l2"
backend = [ {list} ]
connection_tracking = {{ tracking_mode = "PER_CONNECTION" }}
connection_draining_timeout = "60s"

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "{service}"
"#,
        queues = queues.trim_end_matches(','),
        port_mac = mac_str(&PORT_MAC),
        list = list.join(", "),
    )
}

fn tcp(sport: u16, syn: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC)
        .ipv4(
            [10, 9, (sport >> 8) as u8, sport as u8],
            [203, 0, 113, 10],
            64,
        )
        .tcp(sport, 80, 1000, 65535);
    let b = if syn { b.syn() } else { b.ack(1) };
    b.write(&mut out, &sport.to_be_bytes()).unwrap();
    out
}

/// Per client port, the backend its packets went to (every packet of a
/// flow to one backend, checked).
fn backends_of(frames: &[Vec<u8>]) -> BTreeMap<u16, &'static str> {
    let mut seen = BTreeMap::new();
    for f in frames {
        let mac: [u8; 6] = f[..6].try_into().unwrap();
        let addr = BACKENDS
            .iter()
            .find(|(_, m)| *m == mac)
            .expect("a backend MAC")
            .0;
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(TransportSlice::Tcp(t)) = p.transport else {
            panic!("inner TCP untouched")
        };
        let before = seen.insert(t.source_port(), addr);
        assert!(
            before.is_none_or(|b| b == addr),
            "port {} on two backends within one run",
            t.source_port()
        );
    }
    seen
}

fn outputs(dir: &Path, workers: usize) -> Vec<Vec<u8>> {
    (0..workers)
        .flat_map(|w| read_pcap(&dir.join(format!("out{w}.pcap"))))
        .collect()
}

/// Writes `frames` spread over `workers` inputs (flow i to input i %
/// workers, so that steering has work).
fn write_inputs(dir: &Path, frames: &[Vec<u8>], workers: usize) {
    for w in 0..workers {
        let mine: Vec<Vec<u8>> = frames
            .iter()
            .enumerate()
            .filter(|(i, _)| i % workers == w)
            .map(|(_, f)| f.clone())
            .collect();
        write_pcap(&dir.join(format!("in{w}.pcap")), &mine);
    }
}

/// Sum of the backends' packets in `sluice status --json`.
fn forwarded(sock: &Path) -> u64 {
    let out = Command::new(sluice_bin())
        .args(["status", "--json", "--control-socket"])
        .arg(sock)
        .output()
        .expect("sluice status");
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return 0;
    };
    v["services"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["backends"].as_array().into_iter().flatten())
        .filter_map(|b| b["packets"].as_u64())
        .sum()
}

/// Run A: SYN and ACK of every flow on `backends`, stopped by SIGTERM
/// once all are forwarded; returns where each flow went and the log.
fn first_run(
    dir: &Path,
    handoff: &Path,
    backends: &[usize],
    workers: usize,
) -> (BTreeMap<u16, &'static str>, String) {
    first_run_then(dir, handoff, backends, workers, |_, _| {})
}

/// [`first_run`] with `before_stop(config, control socket)` run once
/// every packet is forwarded, before the SIGTERM.
fn first_run_then(
    dir: &Path,
    handoff: &Path,
    backends: &[usize],
    workers: usize,
    before_stop: impl Fn(&Path, &Path),
) -> (BTreeMap<u16, &'static str>, String) {
    let frames: Vec<Vec<u8>> = (0..FLOWS)
        .flat_map(|i| [tcp(10_000 + i, true), tcp(10_000 + i, false)])
        .collect();
    write_inputs(dir, &frames, workers);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(dir, backends, workers, "web")).unwrap();
    let sock = dir.join("ctl.sock");
    let log = dir.join("first.log");
    let mut child = Command::new(sluice_bin())
        .args(["run", "--no-metrics-server", "--config"])
        .arg(&cfg)
        .arg("--control-socket")
        .arg(&sock)
        .arg("--handoff-file")
        .arg(handoff)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn sluice run");
    let t0 = Instant::now();
    while forwarded(&sock) < 2 * u64::from(FLOWS) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not every packet forwarded:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(child.try_wait().unwrap().is_none(), "run A exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    before_stop(&cfg, &sock);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "run A: {status}\n{log}");
    (backends_of(&outputs(dir, workers)), log)
}

/// Run B: the ACK of every flow again, on `backends`, until idle; with
/// the hand-off file or without (`--no-handoff`). Returns where each
/// flow went, the log and the metrics.
fn next_run(
    dir: &Path,
    handoff: Option<&Path>,
    backends: &[usize],
    workers: usize,
    service: &str,
    extra: &[&str],
) -> (BTreeMap<u16, &'static str>, String, BTreeMap<String, u64>) {
    let frames: Vec<Vec<u8>> = (0..FLOWS).map(|i| tcp(10_000 + i, false)).collect();
    write_inputs(dir, &frames, workers);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(dir, backends, workers, service)).unwrap();
    let mut args: Vec<&str> = extra.to_vec();
    let file;
    match handoff {
        Some(p) => {
            file = p.display().to_string();
            args.extend(["--handoff-file", &file]);
        }
        None => args.push("--no-handoff"),
    }
    let (stderr, metrics) = run_sluice_with(&cfg, dir, &args);
    let out = outputs(dir, workers);
    assert_eq!(
        out.len(),
        usize::from(FLOWS),
        "every ACK forwarded\n{stderr}"
    );
    (backends_of(&out), stderr, parse_metrics(&metrics))
}

fn moved(a: &BTreeMap<u16, &str>, b: &BTreeMap<u16, &str>) -> usize {
    a.iter().filter(|(p, bk)| b.get(p) != Some(bk)).count()
}

fn handoff_path(dir: &Path) -> PathBuf {
    dir.join("run").join("conntrack.handoff")
}

/// CT-3/CT-7 across a restart: a backend added to the service moves a
/// third of the table; with the hand-off every connection continues on
/// its backend, without it some move (a reset for a real client).
#[test]
fn connections_continue_on_their_backend_across_a_restart() {
    let dir = tempdir("handoff-continue");
    let file = handoff_path(&dir);
    let (before, log) = first_run(&dir, &file, &[0, 1], 1);
    assert_eq!(before.len(), usize::from(FLOWS));
    assert!(
        log.contains(&format!("{FLOWS} connection(s) written for the next start")),
        "{log}"
    );
    let written = HandOff::decode(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written.connections.len(), usize::from(FLOWS));
    assert_eq!(written.services, ["web"]);

    let (after, log, m) = next_run(&dir, Some(&file), &[0, 1, 2], 1, "web", &[]);
    assert!(
        log.contains(&format!("{FLOWS} of {FLOWS} connection(s) taken")),
        "{log}"
    );
    assert!(!file.exists(), "the file is taken once");
    assert!(
        log.contains(&format!("{FLOWS} connection(s) restored into 1 shard(s)")),
        "{log}"
    );
    assert_eq!(moved(&before, &after), 0, "every connection stays");
    assert_eq!(m["sluice_conntrack_inserts_total"], 0, "all found: {m:?}");
    assert_eq!(
        m["sluice_handoff_connections{outcome=\"taken\"}"],
        u64::from(FLOWS)
    );
    assert_eq!(m["sluice_handoff_connections{outcome=\"expired\"}"], 0);
    assert_eq!(m["sluice_handoff_refused"], 0);

    // The same continuation without the file: the table moves some.
    first_run(&dir, &file, &[0, 1], 1);
    let (without, _, _) = next_run(&dir, None, &[0, 1, 2], 1, "web", &[]);
    let moves = moved(&before, &without);
    assert!(
        moves > usize::from(FLOWS) / 10,
        "only {moves} moved without the hand-off"
    );
    let _ = std::fs::remove_file(&file);
}

/// The shard an entry goes to follows the next run's workers: one worker
/// to two (software steering brings each flow to the shard that holds
/// it) and two to one.
#[test]
fn worker_count_may_change_across_a_restart() {
    for (from, to) in [(1, 2), (2, 1)] {
        let dir = tempdir(&format!("handoff-workers-{from}-{to}"));
        let file = handoff_path(&dir);
        let (before, _) = first_run(&dir, &file, &[0, 1], from);
        let (after, log, m) = next_run(&dir, Some(&file), &[0, 1, 2], to, "web", &[]);
        assert_eq!(moved(&before, &after), 0, "{from} → {to}:\n{log}");
        assert!(
            log.contains(&format!(
                "{FLOWS} connection(s) restored into {to} shard(s)"
            )),
            "{log}"
        );
        assert_eq!(
            m["sluice_conntrack_inserts_total"], 0,
            "{from} → {to}: {m:?}"
        );
    }
}

/// CT-8 across a restart: a backend unhealthy in the next run keeps the
/// connections handed over to it (TCP persists by default); without the
/// hand-off they move, as it is out of the table.
#[test]
fn connections_persist_on_a_backend_unhealthy_after_the_restart() {
    let dir = tempdir("handoff-ct8");
    let file = handoff_path(&dir);
    let sick = BACKENDS[0].0;
    let hook = format!("0:{sick}");
    let (before, _) = first_run(&dir, &file, &[0, 1], 1);
    let on_sick = before.values().filter(|b| **b == sick).count();
    assert!(on_sick > 0);
    let extra = ["--test-mark-unhealthy-after-packets", hook.as_str()];
    let (after, log, _) = next_run(&dir, Some(&file), &[0, 1], 1, "web", &extra);
    assert!(log.contains("TEST HOOK"), "{log}");
    assert_eq!(moved(&before, &after), 0, "CT-8: they persist\n{log}");

    first_run(&dir, &file, &[0, 1], 1);
    let (without, _, _) = next_run(&dir, None, &[0, 1], 1, "web", &extra);
    assert_eq!(
        moved(&before, &without),
        on_sick,
        "without the hand-off exactly those on {sick} move"
    );
    let _ = std::fs::remove_file(&file);
}

/// CT-10 across a restart: a backend removed by a reload drains; the
/// next run, whose configuration no longer lists it, drains it on for the
/// time left, so its connections stay; without the hand-off they move.
#[test]
fn a_draining_backend_keeps_its_connections_across_a_restart() {
    let dir = tempdir("handoff-draining");
    let file = handoff_path(&dir);
    let gone = BACKENDS[1].0;
    let remove = |cfg: &Path, sock: &Path| {
        let text = std::fs::read_to_string(cfg).unwrap();
        let (a, m) = BACKENDS[1];
        let line = format!(", {{ address = \"{a}\", mac = \"{}\" }}", mac_str(&m));
        assert!(text.contains(&line));
        std::fs::write(cfg, text.replace(&line, "")).unwrap();
        let out = Command::new(sluice_bin())
            .args(["reload", "--control-socket"])
            .arg(sock)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let status = sluice_status(sock);
        let text = String::from_utf8_lossy(&status.stdout);
        assert!(
            text.lines()
                .any(|l| l.contains(gone) && l.contains("draining")),
            "{text}"
        );
    };
    let (before, log) = first_run_then(&dir, &file, &[0, 1], 1, remove);
    let on_gone = before.values().filter(|b| **b == gone).count();
    assert!(on_gone > 0);
    let (after, log2, _) = next_run(&dir, Some(&file), &[0], 1, "web", &[]);
    assert!(
        log2.contains("1 removed backend(s) drain on (CT-10)"),
        "{log}\n{log2}"
    );
    assert_eq!(moved(&before, &after), 0, "CT-10: they stay\n{log2}");

    first_run_then(&dir, &file, &[0, 1], 1, remove);
    let (without, _, _) = next_run(&dir, None, &[0], 1, "web", &[]);
    assert_eq!(moved(&before, &without), on_gone, "without it they move");
    let _ = std::fs::remove_file(&file);
}

/// What a start does with files it cannot use: each is named in a log
/// line, removed, and the run starts with empty conntrack. A file whose
/// services or backends are gone is trimmed, by counted reason.
#[test]
fn bad_stale_foreign_and_trimmed_files() {
    let dir = tempdir("handoff-refused");
    let file = handoff_path(&dir);
    first_run(&dir, &file, &[0, 1], 1);
    let good = std::fs::read(&file).unwrap();
    let mut h = HandOff::decode(&good).unwrap();

    let mut cut = good.clone();
    cut.truncate(good.len() / 2);
    let stale = {
        let mut s = h.clone();
        s.written_unix_ms -= 600_000;
        s.encode()
    };
    let foreign = {
        let mut s = h.clone();
        s.config = "/etc/another/sluice.toml".into();
        s.encode()
    };
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "garbage",
            b"not a hand-off file at all".to_vec(),
            "not a sluice hand-off file",
        ),
        ("truncated", cut, "refused: "),
        ("stale", stale, "s ago, more than 300 s"),
        (
            "foreign",
            foreign,
            "written by a sluice running /etc/another/sluice.toml",
        ),
    ];
    for (name, bytes, says) in cases {
        std::fs::write(&file, bytes).unwrap();
        let (_, log, m) = next_run(&dir, Some(&file), &[0, 1], 1, "web", &[]);
        assert!(
            log.lines()
                .any(|l| l.contains(" WARN ") && l.contains("refused") && l.contains(says)),
            "{name}: {log}"
        );
        assert!(!file.exists(), "{name}: the file is removed");
        assert_eq!(
            m["sluice_conntrack_inserts_total"],
            u64::from(FLOWS),
            "{name}: empty start"
        );
        assert_eq!(m["sluice_handoff_refused"], 1, "{name}");
        assert!(!m.contains_key("sluice_handoff_connections{outcome=\"taken\"}"));
    }

    // Backend 192.0.2.11 gone: its connections are not taken.
    std::fs::write(&file, h.encode()).unwrap();
    let on_11 = h
        .connections
        .iter()
        .filter(|c| h.backends[c.backend as usize].address.to_string() == "192.0.2.11")
        .count();
    let (_, log, m) = next_run(&dir, Some(&file), &[0, 2], 1, "web", &[]);
    assert!(
        log.contains(&format!(
            "{} of {FLOWS} connection(s) taken",
            usize::from(FLOWS) - on_11
        )) && log.contains(&format!("not taken: backend_gone {on_11}")),
        "{log}"
    );
    assert_eq!(
        m["sluice_handoff_connections{outcome=\"backend_gone\"}"],
        on_11 as u64
    );
    // The service renamed: nothing is taken.
    h.written_unix_ms = controlplane::handoff::store::unix_ms();
    std::fs::write(&file, h.encode()).unwrap();
    let (_, log, _) = next_run(&dir, Some(&file), &[0, 1], 1, "www", &[]);
    assert!(
        log.contains(&format!("0 of {FLOWS} connection(s) taken"))
            && log.contains(&format!("service_gone {FLOWS}")),
        "{log}"
    );
}

/// A run that ends by --duration or --exit-on-idle is no planned stop:
/// it leaves no file.
#[test]
fn only_a_stop_by_signal_writes_the_file() {
    let dir = tempdir("handoff-limit");
    let file = handoff_path(&dir);
    let (_, log, _) = next_run(&dir, Some(&file), &[0, 1], 1, "web", &[]);
    assert!(!file.exists(), "{log}");
}
