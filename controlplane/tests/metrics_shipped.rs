//! What the real binary's `/metrics` exports (AP-5): the shipped alerts
//! (`contrib/prometheus/sluice.rules.yml`) and dashboard
//! (`contrib/grafana/sluice.json`) name only metrics it exports; each
//! family is exported as declared (`controlplane::metrics::catalog`, the
//! workers' counter blocks), measures one quantity in one unit under a
//! help text that says what it is; build, process, link, pool and reload
//! families exist.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use controlplane::metrics::catalog;
use controlplane::metrics::family::Family;
use controlplane::metrics::ports::DEVICE_COUNTERS;
use sluice_core::stats::{ConntrackStats, Export, PortCounters, QuicLbStats, WorkerStats};

/// An HTTP health-check target that passes without the weight header.
fn plain_target() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    port
}

/// One run for every test here: a MAGLEV service whose HTTP backend passes
/// without a weight header, a failing one, one reload; the scrape once the
/// reload shows.
fn scraped() -> &'static str {
    &run_once().0
}

/// `sluice status --json` of the same run, after the reload.
fn status_json() -> &'static serde_json::Value {
    &run_once().1
}

/// The scrape and `sluice status --json` of the one run.
fn run_once() -> &'static (String, serde_json::Value) {
    static RUN: OnceLock<(String, serde_json::Value)> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempdir("metrics-shipped");
        let hc = plain_target();
        let metrics = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cfg = null_dataplane(metrics)
            + &format!(
                r#"
[[health_check]]
name = "http"
type = "HTTP"
port = {hc}
request_path = "/"
check_interval = "200ms"
timeout = "200ms"
healthy_threshold = 1
unhealthy_threshold = 1
[[backend_service]]
name = "web"
health_check = "http"
backend = [{{ address = "127.0.0.1", mac = "02:00:00:00:00:0a" }}, {{ address = "127.0.0.3", mac = "02:00:00:00:00:0b" }}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#
            );
        let path = dir.join("sluice.toml");
        std::fs::write(&path, cfg).unwrap();
        let run = RunningSluice::start(&path, &dir.join("control.sock"), 30);
        run.wait_status("127.0.0.1 healthy", Duration::from_secs(10), |s| {
            backend_line(s, "127.0.0.1").contains(" healthy")
        });
        run.signal("-HUP");
        let start = Instant::now();
        loop {
            let m = scrape(metrics);
            // The reload's families are checked by a test of their own;
            // the failure counter's series appear with the first failed
            // probe of 127.0.0.3 (nothing listens there).
            let complete = m.contains("sluice_config_last_reload_")
                && m.contains("sluice_backend_probe_failures_total{");
            if complete || start.elapsed() > Duration::from_secs(5) {
                let (ok, text) = run.cli(&["status", "--json"]);
                let json = if ok {
                    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
                } else {
                    serde_json::json!({ "error": text })
                };
                return (m, json);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// Every sample name of the scrape, and histogram families' base names.
fn exported(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            names.extend(rest.split(' ').next().map(str::to_string));
        } else if line.starts_with("sluice_") || line.starts_with("process_") {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The metric names a file mentions: words starting `sluice_` or
/// `process_`.
fn mentioned(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find(|c: char| c.is_ascii_lowercase()) {
        rest = &rest[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = &rest[..end];
        if word.starts_with("sluice_") || word.starts_with("process_") {
            names.insert(word.to_string());
        }
        rest = &rest[end.max(1)..];
    }
    names
}

/// Families this run cannot export, and where they are checked: the
/// VIP families exist only with `[bgp]` (no routers, no kernel table of
/// its own here: `metrics::exposition::tests::fleet_digests_and_announcements_are_exported`
/// and, live, scripts/e2e/scaleout.py); the hand-off's connections and
/// gap only after a start that took a hand-off file (tests/handoff.rs);
/// the kernel's drops only for a `net_af_packet` port (scripts/e2e/suite.py);
/// invalid weight headers only for a `WEIGHTED_MAGLEV` service (the
/// exposition's tests; here the service is `MAGLEV`, see
/// `weight_header_is_counted_only_where_weights_are_used`); the
/// data-path families only under a `path = "data"` check (the
/// exposition's tests, and live scripts/e2e/data_path.py).
static CONDITIONAL: [&Family; 8] = [
    &catalog::VIP_ANNOUNCED,
    &catalog::VIP_SERVABLE,
    &catalog::HANDOFF_CONNECTIONS,
    &catalog::HANDOFF_GAP_SECONDS,
    &catalog::PORT_KERNEL_DROPS,
    &catalog::BACKEND_WEIGHT_HEADER_INVALID,
    &catalog::BACKEND_DATA_PATH_HEALTHY,
    &catalog::BACKEND_DATA_PATH_FAILURES,
];

#[test]
fn shipped_alerts_and_dashboard_name_only_exported_metrics() {
    let mut have = exported(scraped());
    have.extend(CONDITIONAL.iter().map(|f| f.name.to_string()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in [
        "contrib/prometheus/sluice.rules.yml",
        "contrib/prometheus/sluice.rules.test.yml",
        "contrib/grafana/sluice.json",
    ] {
        let used = mentioned(&root.join(file));
        assert!(used.len() > 5, "{file} names {used:?}");
        let missing: Vec<_> = used.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "{file} names metrics /metrics does not export: {missing:?}\nexported: {have:?}"
        );
    }
}

#[test]
fn build_process_link_pool_reload_and_control_loop_families() {
    let m = scraped();
    // The commit under the label build-info metrics conventionally use.
    let info = m
        .lines()
        .find(|l| l.starts_with("sluice_build_info{"))
        .unwrap_or_default();
    assert!(
        info.contains(",revision=\"") && !info.contains("git="),
        "{info}"
    );
    for prefix in [
        "sluice_build_info{dpdk=\"22.11",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "sluice_port_link_up{port=\"p0\"} 1",
        "sluice_port_link_speed_bytes{port=\"p0\"} ",
        "sluice_mbuf_pool_in_use ",
        "sluice_mbuf_pool_size ",
        "sluice_config_last_reload_successful 1",
        "sluice_config_last_reload_timestamp_seconds ",
        "sluice_control_loop_last_run_age_seconds ",
    ] {
        assert!(
            m.lines().any(|l| l.starts_with(prefix)),
            "no line starting {prefix:?} in\n{m}"
        );
    }
}

/// One family per quantity and unit: packets, bytes and errors of the
/// device are separate counters, not values of one `counter` label.
#[test]
fn port_device_counters_are_one_family_per_quantity() {
    let m = scraped();
    assert!(!m.contains("sluice_port_hw_total"), "{m}");
    for family in DEVICE_COUNTERS.map(|f| f.name) {
        assert!(m.contains(&format!("# TYPE {family} counter")), "{family}");
        assert!(
            m.contains(&format!("{family}{{port=\"p0\"}} 0")),
            "{family}"
        );
    }
}

/// Every declared family: the control plane's, and those of the workers'
/// counter blocks, as `# HELP` and `# TYPE` write them.
fn declared() -> BTreeMap<&'static str, (&'static str, String)> {
    let mut out: BTreeMap<_, _> = catalog::ALL
        .iter()
        .map(|f| (f.name, (f.kind.name(), f.help.to_string())))
        .collect();
    let blocks = PortCounters::METRICS
        .iter()
        .map(|m| (m.name, m.export, m.help()))
        .chain(
            WorkerStats::METRICS
                .iter()
                .map(|m| (m.name, m.export, m.help())),
        )
        .chain(
            ConntrackStats::METRICS
                .iter()
                .map(|m| (m.name, m.export, m.help())),
        )
        .chain(
            QuicLbStats::METRICS
                .iter()
                .map(|m| (m.name, m.export, m.help())),
        );
    for (name, export, help) in blocks {
        let kind = match export {
            Export::Total | Export::WorkerCounter => "counter",
            Export::WorkerGauge => "gauge",
        };
        out.insert(name, (kind, help));
    }
    out
}

/// Each family of the scrape is declared, with the type and the help text
/// of its declaration, and each declared family is in the scrape unless
/// this run cannot export it.
#[test]
fn every_family_is_exported_as_declared() {
    let m = scraped();
    let declared = declared();
    let mut seen = BTreeSet::new();
    for line in m.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let want = declared.get(name).map(|(k, _)| *k);
            assert_eq!(want, Some(kind), "{line}: not declared so");
            seen.insert(name);
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            let want = declared
                .get(name)
                .map(|(_, h)| h.replace('\\', "\\\\").replace('\n', "\\n"));
            assert_eq!(want.as_deref(), Some(help), "{name}'s help");
        }
    }
    let conditional: Vec<&str> = CONDITIONAL.iter().map(|f| f.name).collect();
    let missing: Vec<&str> = catalog::ALL
        .iter()
        .map(|f| f.name)
        .filter(|n| !seen.contains(n) && !conditional.contains(n))
        .collect();
    assert!(missing.is_empty(), "declared, not exported: {missing:?}");
}

/// CT-11's flips are a count: a counter named `_total`.
#[test]
fn pool_flips_are_a_counter() {
    let m = scraped();
    assert!(
        m.contains("# TYPE sluice_service_pool_flips_total counter"),
        "{m}"
    );
    assert!(!m.contains("sluice_service_pool_epoch"), "{m}");
}

/// HC-7: a service that is not WEIGHTED_MAGLEV ignores the weight header,
/// so its missing header is not counted as invalid.
#[test]
fn weight_header_is_counted_only_where_weights_are_used() {
    let m = scraped();
    assert!(
        m.contains("sluice_backend_probes_total{backend=\"127.0.0.1\",service=\"web\"}"),
        "{m}"
    );
    assert!(
        !m.contains("sluice_backend_weight_header_invalid_total{"),
        "{m}"
    );
}

/// Help texts say what a metric is, not which rule it serves.
#[test]
fn help_texts_cite_no_spec_ids() {
    let m = scraped();
    for line in m.lines().filter(|l| l.starts_with("# HELP ")) {
        let cites = line.contains('§')
            || line.as_bytes().windows(4).any(|w| {
                w[0].is_ascii_uppercase()
                    && w[1].is_ascii_uppercase()
                    && w[2] == b'-'
                    && w[3].is_ascii_digit()
            });
        assert!(!cites, "{line}");
    }
}

/// `sluice status --json`: what runs, since when, from which file, the
/// reloads, and per backend its state and traffic.
#[test]
fn status_json_through_the_binary() {
    let s = status_json();
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"), "{s}");
    assert!(
        s["dpdk"].as_str().is_some_and(|v| v.starts_with("22.11")),
        "{s}"
    );
    assert!(s["git"].as_str().is_some_and(|g| !g.is_empty()), "{s}");
    assert!(s["uptime_seconds"].as_f64().is_some_and(|u| u > 0.0), "{s}");
    assert!(
        s["config_path"]
            .as_str()
            .is_some_and(|p| p.ends_with("metrics-shipped/sluice.toml")),
        "{s}"
    );
    assert_eq!(s["reloads"]["successful"], 1, "{s}");
    assert_eq!(s["reloads"]["last"]["successful"], true, "{s}");
    assert!(s["reloads"]["last"]["error"].is_null(), "{s}");
    let web = &s["services"][0];
    assert_eq!(web["name"], "web", "{s}");
    assert_eq!(web["active_pool"], "primary", "{s}");
    let b = &web["backends"][0];
    assert_eq!(b["address"], "127.0.0.1", "{s}");
    assert_eq!(b["healthy"], true, "{s}");
    assert_eq!(b["packets"], 0, "{s}");
    assert_eq!(b["new_connections"], 0, "{s}");
    assert_eq!(b["next_hop_resolved"], true, "{s}");
}
