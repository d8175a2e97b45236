//! The `sluice` binary's behaviour on bad configuration (AP-5): every error
//! printed with file:line:column and a hint, exit code 2, nothing started.

mod common;

use std::process::Command;

use common::*;

const BROKEN: &str = r#"[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [ { address = "192.0.2.300", mac = "02:00:00:00:00:10" } ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "nope"
"#;

#[test]
fn check_config_reports_every_error_with_line_and_exit_2() {
    let dir = tempdir("cli-broken");
    let cfg = dir.join("broken.toml");
    std::fs::write(&cfg, BROKEN).unwrap();
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // The bad backend address is on line 13, the dangling service on line 20.
    assert!(err.contains("broken.toml:13:"), "{err}");
    assert!(err.contains("192.0.2.300"), "{err}");
    assert!(err.contains("broken.toml:20:"), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(err.contains("hint:"), "{err}");
}

#[test]
fn run_refuses_to_start_on_a_broken_config() {
    let dir = tempdir("cli-run-broken");
    let cfg = dir.join("broken.toml");
    std::fs::write(&cfg, BROKEN).unwrap();
    let out = Command::new(sluice_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing started"), "{err}");
    assert!(
        !err.contains("EAL:"),
        "EAL must not have been initialised: {err}"
    );
}

/// `conntrack_capacity` is memory reserved at start: shards the
/// process cannot back are refused before EAL starts, by setting name, with
/// the capacity that would fit — not an allocation abort or the OOM killer
/// half-way through start-up. An address-space limit (`ulimit -v`, 1 GiB)
/// makes the shortage the same on every machine: 8 workers × 136 MiB.
#[test]
fn run_refuses_conntrack_tables_the_process_cannot_hold() {
    let dir = tempdir("cli-run-ct-memory");
    let cfg = dir.join("big.toml");
    // -m 1024: 8 workers' packet pool (262,143 mbufs, steering rings
    // included) needs 592 MiB.
    let text = BROKEN
        .replace("\"256\"", "\"1024\"")
        .replace("workers = 1", "workers = 8")
        .replace("192.0.2.300", "192.0.2.30")
        .replace("backend_service = \"nope\"", "backend_service = \"web\"");
    std::fs::write(&cfg, text).unwrap();
    let check = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let script = format!(
        "ulimit -v 1048576 && exec {} run --config {} --duration 1",
        sluice_bin(),
        cfg.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("dataplane.conntrack_capacity = 1048576: 8 worker(s) × 2097152 slots"),
        "{err}"
    );
    assert!(
        err.contains("lower dataplane.conntrack_capacity to at most"),
        "{err}"
    );
    assert!(!err.contains("EAL:"), "refused before EAL: {err}");
}

#[test]
fn check_config_accepts_the_shipped_examples() {
    let conf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf");
    let files: Vec<_> = std::fs::read_dir(&conf)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert!(!files.is_empty(), "conf/ has example configurations");
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
