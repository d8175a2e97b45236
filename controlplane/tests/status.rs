//! The real `sluice` binary with real HTTP health-check targets on
//! loopback: health and weights follow the servers within the HC-4 windows
//! (seen through `sluice status` and `/metrics`), and reload (AP-5) keeps
//! the running configuration on errors and applies a valid one.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// A health-check target: status code and weight header set by the test.
struct Target {
    status: Arc<AtomicU16>,
    weight: Arc<Mutex<String>>,
}

fn target(l: TcpListener) -> Target {
    let status = Arc::new(AtomicU16::new(200));
    let weight = Arc::new(Mutex::new(String::from("1")));
    let (s, w) = (status.clone(), weight.clone());
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let resp = format!(
                "HTTP/1.1 {} X\r\nX-Load-Balancing-Endpoint-Weight: {}\r\nContent-Length: 0\r\n\r\n",
                s.load(Ordering::Relaxed),
                w.lock().unwrap()
            );
            let _ = c.write_all(resp.as_bytes());
        }
    });
    Target { status, weight }
}

fn config(dir: &Path, hc_port: u16, metrics: u16, backends: &str) -> String {
    null_dataplane(metrics)
        + &format!(
            r#"
[[health_check]]
name = "http"
type = "HTTP"
port = {hc_port}
request_path = "/healthz"
check_interval = "200ms"
timeout = "200ms"
healthy_threshold = 2
unhealthy_threshold = 2
[[backend_service]]
name = "web"
health_check = "http"
locality_lb_policy = "WEIGHTED_MAGLEV"
maglev_table_size = 65537
backend = [{backends}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#
        )
        + &format!("# {}\n", dir.display())
}

/// HC-2/HC-4/HC-5/HC-7 through the binary, then AP-5 reload.
#[test]
fn health_weights_and_reload_through_the_binary() {
    let dir = tempdir("status-live");
    // One port free on both addresses, both listeners bound before use (a
    // port picked, released and bound again could be taken in between by
    // a test running in parallel).
    let (la, lb, port) = (0..100)
        .find_map(|_| {
            let la = TcpListener::bind("127.0.0.1:0").ok()?;
            let port = la.local_addr().ok()?.port();
            let lb = TcpListener::bind(SocketAddr::from(([127, 0, 0, 2], port))).ok()?;
            Some((la, lb, port))
        })
        .expect("a port free on 127.0.0.1 and 127.0.0.2");
    let a = target(la);
    let b = target(lb);
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let both = r#"{ address = "127.0.0.1" }, { address = "127.0.0.2" }"#;
    let cfg_path = dir.join("sluice.toml");
    std::fs::write(&cfg_path, config(&dir, port, metrics, both)).unwrap();
    let sock = dir.join("control.sock");
    let run = RunningSluice::start(&cfg_path, &sock, 30);

    // Success window: 2 × response + 1 × interval ≈ 0.2 s, plus the first
    // probe's jitter (< one interval) and process start-up.
    run.wait_status("both healthy", Duration::from_secs(10), |s| {
        backend_line(s, "127.0.0.1").contains(" healthy weight 1")
            && backend_line(s, "127.0.0.2").contains(" healthy weight 1")
    });
    // HC-7 + MG-3: weights 1:4 → 20 % / 80 %.
    *b.weight.lock().unwrap() = "4".into();
    run.wait_status("weights 1:4", Duration::from_secs(2), |s| {
        (backend_share(s, "127.0.0.1") - 20.0).abs() < 0.5
            && (backend_share(s, "127.0.0.2") - 80.0).abs() < 0.5
    });
    // HC-4 failure window: timeout × 2 + interval = 0.6 s (+ one interval
    // of phase and the status poll).
    b.status.store(503, Ordering::Relaxed);
    let took = run.wait_status("b unhealthy", Duration::from_secs(3), |s| {
        backend_line(s, "127.0.0.2").contains("unhealthy") && backend_share(s, "127.0.0.1") == 100.0
    });
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let m = scrape(metrics);
    assert!(
        m.contains("sluice_backend_healthy{backend=\"127.0.0.2\",service=\"web\"} 0"),
        "{m}"
    );
    assert!(m.contains("sluice_backend_weight{backend=\"127.0.0.2\",service=\"web\"} 4"));
    assert!(
        m.contains("sluice_backend_probe_latency_seconds_count{"),
        "{m}"
    );
    assert!(
        m.contains("sluice_service_eligible_backends{service=\"web\",zone=\"-\"} 1"),
        "{m}"
    );
    // AP-2: a reload that leaves the probes as they were (another table
    // size) publishes with every probe's state as it was: b unhealthy
    // with its reported weight, a holding the whole table.
    std::fs::write(
        &cfg_path,
        config(&dir, port, metrics, both).replace("65537", "65521"),
    )
    .unwrap();
    let (ok, text) = run.cli(&["reload"]);
    assert!(ok, "{text}");
    let s = run.cli(&["status"]).1;
    assert!(
        backend_line(&s, "127.0.0.2").contains("unhealthy weight 4")
            && backend_share(&s, "127.0.0.1") == 100.0,
        "{s}"
    );
    b.status.store(200, Ordering::Relaxed);
    run.wait_status("b back", Duration::from_secs(3), |s| {
        backend_line(s, "127.0.0.2").contains(" healthy")
    });
    drop(a.status);

    // AP-5: an invalid file is refused with diagnostics, nothing changes.
    std::fs::write(
        &cfg_path,
        config(&dir, port, metrics, both).replace("timeout = \"200ms\"", "timeout = \"9s\""),
    )
    .unwrap();
    let (ok, text) = run.cli(&["reload"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("sluice.toml:") && text.contains("timeout"),
        "{text}"
    );
    // A valid one removes backend b; the id of a is kept.
    let before = run.cli(&["status"]).1;
    std::fs::write(
        &cfg_path,
        config(&dir, port, metrics, r#"{ address = "127.0.0.1" }"#),
    )
    .unwrap();
    let (ok, text) = run.cli(&["reload"]);
    assert!(ok, "{text}");
    let after = run.cli(&["status"]).1;
    assert!(backend_line(&after, "127.0.0.2").is_empty(), "{after}");
    assert_eq!(
        backend_id(&before, "127.0.0.1"),
        backend_id(&after, "127.0.0.1"),
        "stable backend id"
    );
    assert!(after.contains("reloads ok 2 failed 1"), "{after}");
    let m = scrape(metrics);
    assert!(
        m.contains("sluice_config_reloads_total{result=\"failure\"} 1"),
        "{m}"
    );
}

/// AP-5: SIGHUP re-reads the file; an added backend appears with a new id
/// while the existing one keeps its id.
#[test]
fn sighup_reload_adds_a_backend() {
    let dir = tempdir("status-sighup");
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let one = r#"{ address = "127.0.0.1" }"#;
    // Port 9 (discard) on loopback: nothing listens, probes fail, which
    // is fine here; the test is about the reload.
    let cfg_path = dir.join("sluice.toml");
    std::fs::write(&cfg_path, config(&dir, 9, metrics, one)).unwrap();
    let sock = dir.join("control.sock");
    let run = RunningSluice::start(&cfg_path, &sock, 20);
    run.wait_status("running", Duration::from_secs(10), |s| {
        !backend_line(s, "127.0.0.1").is_empty()
    });
    let first = run.cli(&["status"]).1;
    std::fs::write(
        &cfg_path,
        config(
            &dir,
            9,
            metrics,
            r#"{ address = "127.0.0.1" }, { address = "127.0.0.3" }"#,
        ),
    )
    .unwrap();
    run.signal("-HUP");
    run.wait_status("added", Duration::from_secs(5), |s| {
        !backend_line(s, "127.0.0.3").is_empty()
    });
    let after = run.cli(&["status"]).1;
    assert_eq!(
        backend_id(&first, "127.0.0.1"),
        backend_id(&after, "127.0.0.1"),
        "{first}\n{after}"
    );
    assert!(after.contains("reloads ok 1 failed 0"), "{after}");
}

/// HC-9's `sluice doctor` through the binary and its control socket: on a
/// port without a TAP (net_null) no probe can take the data path, so the
/// path fails with a named problem and a hint while the direct check
/// against the loopback server passes, and the command exits 1; with no
/// sluice at the socket it exits 2.
#[test]
fn doctor_names_the_broken_path_and_exits_by_its_verdict() {
    let dir = tempdir("doctor");
    let la = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = la.local_addr().unwrap().port();
    let _a = target(la);
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg_path = dir.join("sluice.toml");
    let one = r#"{ address = "127.0.0.1" }"#;
    std::fs::write(&cfg_path, config(&dir, port, metrics, one)).unwrap();
    let sock = dir.join("control.sock");
    let run = RunningSluice::start(&cfg_path, &sock, 30);
    run.wait_status("healthy", Duration::from_secs(10), |s| {
        backend_line(s, "127.0.0.1").contains(" healthy")
    });
    let doctor = |json: bool| {
        let mut args = vec!["doctor", "--control-socket", sock.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        std::process::Command::new(sluice_bin())
            .args(&args)
            .output()
            .unwrap()
    };
    let out = doctor(true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    let row = &rows[0];
    assert_eq!(row["service"], "web");
    assert_eq!(row["vip"], "203.0.113.10");
    assert_eq!(row["port"], port);
    assert_eq!(row["direct"]["outcome"], "pass", "{row}");
    assert_ne!(row["to_vip"]["outcome"], "pass", "{row}");
    assert!(row["problem"].is_string(), "{row}");
    let text = doctor(false);
    assert_eq!(text.status.code(), Some(1));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("SERVICE"), "{text}");
    assert!(text.contains("hint: "), "{text}");
    assert!(text.contains("1 path(s) checked, 1 failing"), "{text}");
    drop(run);
    let gone = doctor(false);
    assert_eq!(gone.status.code(), Some(2), "{gone:?}");
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("sluice doctor"),
        "{gone:?}"
    );
}
