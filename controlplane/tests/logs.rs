//! The real binary's log (stderr outside the journal): one line per event,
//! `TIME LEVEL sluice: ...`, for a health transition with the failing
//! probe's reason (HC-3/HC-4), then its fields for searching (`backend=`,
//! `service=`, `reason=`), and a reload naming what changed (AP-5).

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn config(hc: u16, metrics: u16, backends: &str) -> String {
    null_dataplane(metrics)
        + &format!(
            r#"
[[health_check]]
name = "http"
type = "HTTP"
port = {hc}
request_path = "/"
check_interval = "100ms"
timeout = "100ms"
healthy_threshold = 1
unhealthy_threshold = 2
[[backend_service]]
name = "web"
health_check = "http"
backend = [{backends}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#
        )
}

/// `2026-12-01T22:15:04.512Z LEVEL ` at the start of `line`: the rest.
fn after_time_and_level<'a>(line: &'a str, level: &str) -> Option<&'a str> {
    let (time, rest) = line.split_once(' ')?;
    let shape = time.len() == 24
        && time.ends_with('Z')
        && time.as_bytes()[10] == b'T'
        && time[..4].bytes().all(|b| b.is_ascii_digit());
    rest.strip_prefix(level)?
        .strip_prefix(' ')
        .filter(|_| shape)
}

#[test]
fn health_transition_with_reason_and_reload_with_changes_are_logged() {
    let dir = tempdir("logs");
    let status = Arc::new(AtomicU16::new(200));
    let hc = status_target(Arc::clone(&status));
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let one = r#"{ address = "127.0.0.1", mac = "02:00:00:00:00:0a" }"#;
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(hc, metrics, one)).unwrap();
    let log = dir.join("stderr.txt");
    let mut child = Command::new(sluice_bin())
        .args(["run", "--duration", "30", "--no-control-socket", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let wait_for = |what: &str| {
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap();
            if text.contains(what) {
                return text;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no {what:?} in\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("is healthy");
    status.store(503, Ordering::Relaxed);
    wait_for("is unhealthy");
    let two = format!(r#"{one}, {{ address = "127.0.0.3", mac = "02:00:00:00:00:0b" }}"#);
    std::fs::write(&cfg, config(hc, metrics, &two)).unwrap();
    let _ = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status();
    let text = wait_for("reloaded ");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();

    let unhealthy = text
        .lines()
        .find_map(|l| after_time_and_level(l, "WARN").filter(|r| r.contains("is unhealthy")))
        .unwrap_or_else(|| panic!("no WARN health line in\n{text}"));
    assert_eq!(
        unhealthy,
        format!(
            "sluice: health: backend 127.0.0.1:{hc} is unhealthy (reason http_status, 2 consecutive failures) \
             backend=127.0.0.1:{hc} service=web reason=http_status"
        ),
        "{text}"
    );
    let reload = text
        .lines()
        .find_map(|l| after_time_and_level(l, "INFO").filter(|r| r.contains("reloaded ")))
        .unwrap_or_else(|| panic!("no INFO reload line in\n{text}"));
    assert!(
        reload.ends_with("services ~web; backends +web/127.0.0.3"),
        "{reload}"
    );
    for line in text.lines() {
        assert!(
            ["INFO", "WARN", "ERROR"]
                .iter()
                .any(|level| after_time_and_level(line, level).is_some()),
            "a line without time and level: {line:?}\n{text}"
        );
    }
}

/// One worker on `net_null` with a TAP, a service, a rule.
const TAP_CONFIG: &str = r#"[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci"]
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
tap = "sl-logtest"
[[backend_service]]
name = "web"
backend = [{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#;

/// A one-second run of [`TAP_CONFIG`] with the TAP named `tap` (runs at
/// the same time need their own) and `SLUICE_LOG` set to `filter` (unset
/// if None): stdout, stderr.
fn run_with_log(tap: &str, filter: Option<&str>) -> (String, String) {
    let dir = tempdir(tap);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, TAP_CONFIG.replace("sl-logtest", tap)).unwrap();
    // In a network namespace of its own: the TAP takes the port's address
    // (192.0.2.1/24), which may be an address of this host's own network.
    let mut run = Command::new("unshare");
    run.args(["-n"])
        .arg(sluice_bin())
        .args(["run", "--duration", "1", "--no-control-socket"])
        .args(["--no-metrics-server", "--config"])
        .arg(&cfg)
        .env_remove("RUST_LOG")
        .env_remove("SLUICE_LOG");
    if let Some(filter) = filter {
        run.env("SLUICE_LOG", filter);
    }
    let out = run.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// DPDK's own messages reach the log once, on stderr as sluice lines
/// with time and level (not on stdout, not twice), and the TAP driver's
/// harmless multiq/rte_flow reports are not errors (AP-4 TAP).
#[test]
fn dpdk_log_once_in_the_same_stream() {
    let (stdout, stderr) = run_with_log("sl-logtest", None);
    assert!(!stdout.contains("EAL"), "DPDK on stdout:\n{stdout}");
    let detected: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("EAL: Detected CPU lcores"))
        .collect();
    assert_eq!(detected.len(), 1, "{stderr}");
    assert!(
        after_time_and_level(detected[0], "INFO")
            .is_some_and(|r| r.starts_with("sluice: DPDK: EAL: Detected CPU lcores")),
        "{stderr}"
    );
    assert!(
        !stderr.lines().any(|l| l.contains(" ERROR ")),
        "an error at a clean start:\n{stderr}"
    );
}

/// `SLUICE_LOG` filters by level and by target (`dpdk` for DPDK's
/// messages); a value that is no filter leaves `info` and says so.
#[test]
fn sluice_log_sets_the_levels() {
    let (_, warn) = run_with_log("sl-logwarn", Some("warn"));
    assert!(
        !warn.lines().any(|l| l.contains(" INFO ")),
        "info lines under SLUICE_LOG=warn:\n{warn}"
    );
    let (_, no_dpdk) = run_with_log("sl-lognodpdk", Some("info,dpdk=off"));
    assert!(
        no_dpdk.contains(" INFO sluice: 1 worker(s) on lcores"),
        "{no_dpdk}"
    );
    assert!(!no_dpdk.contains("DPDK: "), "{no_dpdk}");
    let (_, invalid) = run_with_log("sl-logbad", Some("dpdk=loud"));
    let first = invalid.lines().next().unwrap_or_default();
    assert!(
        after_time_and_level(first, "WARN")
            .is_some_and(|r| r.starts_with("sluice: SLUICE_LOG=\"dpdk=loud\" is not a log filter")),
        "{invalid}"
    );
    assert!(invalid.contains(" INFO sluice: DPDK: EAL: "), "{invalid}");
}

/// SPEC §3: a worker's conntrack shard past 90 % of `conntrack_capacity`
/// is logged once as a warning.
#[test]
fn conntrack_near_full_is_logged() {
    const CAPACITY: u16 = 1024;
    let dir = tempdir("logs-conntrack");
    let port_mac = [0x02, 0, 0, 0, 0, 0x01];
    let config = format!(
        r#"{dataplane}
[[backend_service]]
name = "web"
backend = [{list}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#,
        dataplane = pcap_dataplane(
            &dir,
            &port_mac,
            "192.0.2.1/24",
            &format!("conntrack_capacity = {CAPACITY}"),
        ),
        list = backend_list(&[("192.0.2.10", [0x02, 0, 0, 0, 0, 0x0a])]),
    );
    // Established-looking packets of 1000 flows: 98 % of the capacity.
    let frames: Vec<Vec<u8>> = (0..1000u16)
        .map(|n| {
            tcp_frame(
                port_mac,
                [10, 20, (n >> 8) as u8, n as u8],
                [203, 0, 113, 10],
                30_000 + n,
                80,
                1,
            )
        })
        .collect();
    let r = replay(&dir, &config, &frames, &[]);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("conntrack: worker 0 near full"))
        .unwrap_or_else(|| panic!("no near-full line in\n{}", r.stderr));
    assert!(after_time_and_level(line, "WARN").is_some(), "{line}");
    // The control loop reads the shard's occupancy every 10 ms while the
    // worker replays: the line names what it held at the first read past
    // 90 % (922), which on a loaded machine comes before the last flow.
    let held: u32 = line
        .split(" of 1024 connections")
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no \"N of 1024 connections\" in {line}"));
    assert!((922..=1000).contains(&held), "{line}");
    assert!(line.ends_with(" worker=0"), "{line}");
}
