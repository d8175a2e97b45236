//! AP-5: a scrape cut into parts of any size is the scrape rendered in
//! one go, a family without rows is left out, and what the families say.

use sluice_core::backend::BackendState;
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::rules::{ForwardingRule, RuleTable};
use sluice_core::service::ServiceState;
use sluice_core::snapshot::SnapshotCell;
use sluice_core::DropReason;

use super::*;
use crate::control::Shared;
use crate::health::{probe_key, FailureReason, InitialState, ProbeStatus};
use crate::publish::{build_forwarding_state_with, BackendIds, BuildInputs};

/// Three services: `web` (health-checked, `WEIGHTED_MAGLEV`), `dns`
/// (no check) and `empty-ish` with one backend; two rules; the limit
/// given by `limit` (none: the default).
fn config(limit: Option<usize>) -> String {
    let limit = limit.map_or(String::new(), |l| {
        format!("[metrics]\nbackend_series_limit = {l}\n")
    });
    let web: Vec<String> = (10..30)
        .map(|i| format!("{{ address = \"192.0.2.{i}\", mac = \"02:00:00:00:00:{i:02x}\" }}"))
        .collect();
    format!(
        r#"
[dataplane]
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"
{limit}
[[health_check]]
name = "http"
type = "HTTP"
port = 8080
[[health_check]]
name = "through-the-vip"
type = "TCP"
port = 8080
path = "data"
[[backend_service]]
name = "web"
health_check = "http"
locality_lb_policy = "WEIGHTED_MAGLEV"
maglev_table_size = 251
backend = [{web}]
[[backend_service]]
name = "dns"
maglev_table_size = 251
backend = [
  {{ address = "198.51.100.1", mac = "02:00:00:00:01:01" }},
  {{ address = "2001:db8::1", mac = "02:00:00:00:01:02" }},
]
[[backend_service]]
name = "one"
maglev_table_size = 251
health_check = "through-the-vip"
backend = [{{ address = "198.51.100.9", mac = "02:00:00:00:01:09" }}]
[[forwarding_rule]]
name = "one"
vip = "203.0.113.20"
ports = "8080"
backend_service = "one"
[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
backend_service = "web"
[[forwarding_rule]]
name = "dns"
vip = "203.0.113.53"
protocol = "UDP"
ports = "53"
backend_service = "dns"
"#,
        web = web.join(", ")
    )
}

/// Sources for `config(limit)` with probe statuses for `web`'s
/// backends and counters on every backend (two workers).
fn sources(limit: Option<usize>) -> MetricsSources {
    let cfg = Arc::new(
        crate::config::load_str(&config(limit), "t.toml").unwrap_or_else(|d| panic!("{d}")),
    );
    let hc = &cfg.health_checks[0];
    let mut health = crate::health::ProbeStatuses::default();
    for (k, b) in cfg.backend_services[0].backends.iter().enumerate() {
        let mut st = ProbeStatus::new(InitialState::Healthy);
        st.probes = 10 + k as u64;
        st.state.weight = 1 + k as u16;
        st.state.weight_header_invalid = k as u64 % 3;
        st.failures[FailureReason::ALL[k % FailureReason::ALL.len()].index()] = 2;
        st.latency_counts[k % st.latency_counts.len()] = 3;
        st.latency_sum = 0.25 * k as f64;
        health.insert(probe_key(hc, b.address), st);
    }
    // The data-path check of "one": its backend through its one VIP.
    let data = &cfg.health_checks[1];
    let mut st = ProbeStatus::new(InitialState::Healthy);
    st.failures[FailureReason::NoAnswer.index()] = 4;
    let vip = "203.0.113.20".parse().unwrap();
    let route = crate::health::Route::Data { vip };
    let one = cfg.backend_services[2].backends[0].address;
    health.insert(crate::health::probe_key_via(data, one, route), st);
    let (snap, reports) = build_forwarding_state_with(
        &cfg,
        &[[2, 0, 0, 0, 0, 1]],
        &mut BackendIds::new(),
        &mut Default::default(),
        &BuildInputs::with_health(&health),
        3,
    );
    let workers: Vec<_> = (0..2).map(|_| Arc::new(WorkerStats::new())).collect();
    for (n, w) in workers.iter().enumerate() {
        for (k, id) in snap.services.iter().flat_map(|s| &s.backends).enumerate() {
            let p = (k + n + 1) as u64;
            w.backend_opened(*id, p, 100 * p, k % 2 == 0);
        }
        for rule in snap.rules.rules() {
            w.rule_packets.add(rule.counter);
        }
    }
    let view = View {
        config: Some(Arc::clone(&cfg)),
        health: Arc::new(health),
        reports: Arc::new(reports),
        ..View::default()
    };
    MetricsSources {
        workers,
        snapshot: Arc::new(SnapshotCell::new(snap)),
        port_names: vec!["uplink".into()],
        control: Some(Arc::new(Shared {
            view: std::sync::Mutex::new(view),
        })),
        ports: vec![],
        kernel_drops: vec![],
        pool: None,
    }
}

/// `text` with the values of the `process_*` samples (read from
/// /proc/self at each scrape's start, so they differ between two
/// scrapes) replaced by `X`.
fn steady(text: &str) -> String {
    text.lines()
        .map(|l| match l.rsplit_once(' ') {
            Some((k, _)) if l.starts_with("process_") => format!("{k} X\n"),
            _ => format!("{l}\n"),
        })
        .collect()
}

/// Every `# TYPE` is followed by a sample of its family, and no family
/// is typed twice.
fn assert_no_empty_or_repeated_family(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let mut seen = std::collections::HashSet::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.strip_prefix("# TYPE ") else {
            continue;
        };
        let name = rest.split(' ').next().unwrap();
        assert!(seen.insert(name), "family {name} typed twice");
        let next = lines.get(i + 1).copied().unwrap_or("");
        assert!(
            next.starts_with(name) && !next.starts_with('#'),
            "family {name} without rows (next line {next:?})"
        );
    }
}

/// Parts of any size (down to 1 byte, where each part holds one row)
/// join to the text `render` gives, and a part overshoots its budget
/// by at most one row.
#[test]
fn a_scrape_in_tiny_parts_is_the_scrape_in_one_part() {
    for limit in [None, Some(5)] {
        let src = sources(limit);
        let whole = render(&src, None);
        assert!(whole.contains("sluice_service_packets_total{service=\"web\"}"));
        for budget in [1, 100, 333, 4096] {
            let mut e = Exposition::new(&src, None);
            let (mut joined, mut parts) = (Vec::new(), 0usize);
            loop {
                let mut part = Vec::new();
                let ended = e.fill(&mut part, budget);
                if parts > 0 {
                    // The head (fixed families) is written whole with
                    // the first part; after it, one row at most past
                    // the budget (a histogram's row is ~1.5 KiB).
                    assert!(
                        part.len() < budget + 2048,
                        "part {parts} of {} bytes for a budget of {budget}",
                        part.len()
                    );
                }
                parts += 1;
                joined.extend_from_slice(&part);
                if ended {
                    break;
                }
                assert!(!part.is_empty(), "an empty part before the end");
            }
            let mut after = Vec::new();
            assert!(e.fill(&mut after, budget), "still ended");
            assert!(after.is_empty(), "nothing after the end");
            let (joined, whole) = (steady(&String::from_utf8(joined).unwrap()), steady(&whole));
            if joined != whole {
                let line = joined
                    .lines()
                    .zip(whole.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(joined.lines().count().min(whole.lines().count()));
                panic!(
                    "limit {limit:?}, budget {budget}, {parts} parts: line {line} is {:?} in \
                     parts, {:?} in one render",
                    joined.lines().nth(line),
                    whole.lines().nth(line)
                );
            }
            if budget == 100 && limit.is_none() {
                assert!(parts > 100, "only {parts} parts of 100 bytes");
            }
        }
        assert_no_empty_or_repeated_family(&whole);
    }
}

fn series<'a>(text: &'a str, family: &str) -> Vec<(&'a str, u64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(family)?.strip_prefix('{')?;
            let (labels, v) = rest.rsplit_once("} ")?;
            Some((labels, v.parse().ok()?))
        })
        .collect()
}

/// Under the limit, every per-backend family is there and each
/// per-service aggregate is the sum of its backends' series; above it,
/// no `sluice_backend_*` family is, and the aggregates are the same.
#[test]
fn the_aggregates_sum_the_backends_and_stay_above_the_limit() {
    let under = render(&sources(None), None);
    let over = render(&sources(Some(22)), None);
    for (agg, per) in [
        (
            "sluice_service_packets_total",
            "sluice_backend_packets_total",
        ),
        ("sluice_service_bytes_total", "sluice_backend_bytes_total"),
        (
            "sluice_service_new_connections_total",
            "sluice_backend_new_connections_total",
        ),
    ] {
        let services = series(&under, agg);
        assert_eq!(services.len(), 3, "{agg}: {services:?}");
        for (labels, total) in services {
            let svc = labels.strip_prefix("service=").unwrap();
            let sum: u64 = series(&under, per)
                .iter()
                .filter(|(l, _)| l.ends_with(&format!("service={svc}")))
                .map(|(_, v)| v)
                .sum();
            assert!(total > 0, "{agg}{{{labels}}} is 0");
            assert_eq!(total, sum, "{agg}{{{labels}}}");
            assert!(
                over.lines()
                    .any(|l| l == format!("{agg}{{{labels}}} {total}")),
                "{agg}{{{labels}}} {total} above the limit"
            );
        }
    }
    // Every family labelled by backend: the ones the limit holds back.
    let per_backend: Vec<&str> = crate::metrics::catalog::ALL
        .iter()
        .filter(|f| f.labels.contains(&"backend"))
        .map(|f| f.name)
        .collect();
    assert!(!per_backend.is_empty());
    for family in per_backend {
        assert!(
            under.contains(&format!("# TYPE {family} ")),
            "{family} under the limit"
        );
        assert!(
            !over.contains(&format!("{family}{{")) && !over.contains(&format!(" {family} ")),
            "{family} above the limit"
        );
    }
    let web = [
        "sluice_service_backends{service=\"web\",state=\"healthy\"} 20",
        "sluice_service_backends{service=\"web\",state=\"unhealthy\"} 0",
        "sluice_service_backends{service=\"web\",state=\"draining\"} 0",
        "sluice_service_backends_next_hop_unresolved{service=\"web\"} 0",
    ];
    for line in web {
        assert!(under.lines().any(|l| l == line), "{line} in\n{under}");
        assert!(over.lines().any(|l| l == line), "{line} in\n{over}");
    }
    assert_no_empty_or_repeated_family(&under);
    assert_no_empty_or_repeated_family(&over);
}

/// A family none of whose rows exist is left out, header and all: no
/// services (no backend, service or rule families), no view (no
/// health, pool, digest or VIP families).
#[test]
fn families_without_rows_are_left_out() {
    let src = MetricsSources {
        workers: vec![Arc::new(WorkerStats::new())],
        snapshot: Arc::new(SnapshotCell::new(Default::default())),
        // A port: without one the fixed families' encoder refuses the
        // empty port families and writes nothing at all.
        port_names: vec!["uplink".into()],
        control: None,
        ports: vec![],
        kernel_drops: vec![],
        pool: None,
    };
    let text = render(&src, None);
    for prefix in [
        "sluice_backend_packets_total",
        "sluice_service_",
        "sluice_rule_",
        "sluice_vip_",
    ] {
        assert!(
            !text.lines().any(|l| l.contains(prefix)),
            "{prefix} in\n{text}"
        );
    }
    assert!(text.contains("sluice_workers 1"), "{text}");
    assert_no_empty_or_repeated_family(&text);
    // A view, and services with backends but no health check: no
    // health family, the others are there.
    let mut full = sources(None);
    let mut cfg = (*full.control.as_ref().unwrap().view().config.unwrap()).clone();
    std::sync::Arc::make_mut(&mut cfg.backend_services[0]).health_check = None;
    std::sync::Arc::make_mut(&mut cfg.backend_services[2]).health_check = None;
    let view = View {
        config: Some(Arc::new(cfg)),
        ..full.control.as_ref().unwrap().view()
    };
    full.control = Some(Arc::new(Shared {
        view: std::sync::Mutex::new(view),
    }));
    let text = render(&full, None);
    assert!(!text.contains("sluice_backend_healthy"), "{text}");
    assert!(!text.contains("sluice_backend_probe"), "{text}");
    assert!(!text.contains("sluice_backend_data_path"), "{text}");
    assert!(text.contains("# TYPE sluice_backend_packets_total counter"));
    assert!(text.contains("# TYPE sluice_rule_packets_total counter"));
    assert_no_empty_or_repeated_family(&text);
}

/// The fleet's families: one info series per digest (the
/// configuration's, each service's tables once computed), one gauge
/// per VIP and what it says.
#[test]
fn fleet_digests_and_announcements_are_exported() {
    let src = sources(None);
    let view = src.control.as_ref().unwrap().view();
    let cfg = view.config.clone().unwrap();
    let snap = src.snapshot.load();
    view.fleet
        .announce
        .set(vec![crate::fleet::announced::VipStatus {
            vip: "203.0.113.10".parse().unwrap(),
            announced: false,
            servable: true,
            reason: "stopping".into(),
        }]);
    let pending = render(&src, None);
    assert!(
        !pending.contains("sluice_service_table_digest_info{"),
        "a digest still computing is left out:\n{pending}"
    );
    // What the control thread does after a publish.
    view.fleet.table_digest(&snap, &snap.services[0]);
    let text = render(&src, None);
    for line in [
        format!(
            "sluice_config_digest_info{{digest=\"{}\"}} 1",
            crate::fleet::config_digest(&cfg)
        ),
        format!(
            "sluice_service_table_digest_info{{digest=\"{}\",service=\"web\"}} 1",
            crate::fleet::table_digest(&snap, &snap.services[0])
        ),
        "sluice_vip_announced{vip=\"203.0.113.10\"} 0".to_string(),
        "sluice_vip_servable{vip=\"203.0.113.10\"} 1".to_string(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert_no_empty_or_repeated_family(&text);
}

/// The backend's index is above 65,535 and its generation is not 0: every
/// index has its counter.
const WEB: BackendId = BackendId::new(70_000, 5);

fn two_workers() -> MetricsSources {
    let w0 = Arc::new(WorkerStats::new());
    let w1 = Arc::new(WorkerStats::new());
    w0.ports[0].rx_packets.add(10);
    w1.ports[0].rx_packets.add(5);
    w0.ports[1].tx_bytes.add(1000);
    w1.ports[1].tx_bytes.add(24);
    w0.drops[DropReason::NoRule.index()].add(2);
    w1.drops[DropReason::NoRule.index()].add(3);
    w1.ports[0].punted.add(7);
    w0.fragmented.add(2);
    w1.fragmented.add(1);
    w0.fragments.add(5);
    w1.fragments.add(2);
    w0.backend(WEB, 4, 400);
    w1.backend(WEB, 6, 624);
    w0.backend_opened(WEB, 0, 0, true);
    w1.backend_opened(WEB, 0, 0, true);
    w1.backend_opened(WEB, 0, 0, true);
    for w in [&w0, &w0, &w1] {
        w.rule_packets.add(3);
    }
    let state = ForwardingState {
        rules: std::sync::Arc::new(RuleTable::new(vec![ForwardingRule {
            name: "web-http".into(),
            vip: "203.0.113.10".parse().unwrap(),
            protocol: sluice_core::rules::RuleProtocol::Tcp,
            ports: sluice_core::rules::PortRange {
                first: 80,
                last: 80,
            },
            service: ServiceId(0),
            counter: 3,
        }])),
        generation: 42,
        services: vec![ServiceState {
            name: "web".into(),
            encapsulation: sluice_core::encap::Encapsulation::L2,
            affinity: Default::default(),
            tracking: Default::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch: 0,
            tables: vec![],
            backends: vec![WEB],
            quic_lb: None,
        }],
        backends: (0..=WEB.index())
            .map(|i| {
                (i == WEB.index()).then(|| BackendState {
                    id: WEB,
                    service: ServiceId(0),
                    address: "192.0.2.10".parse().unwrap(),
                    healthy: true,
                    weight: 1,
                    pool: Default::default(),
                    draining_until: None,
                    egress: Default::default(),
                })
            })
            .collect(),
        ..Default::default()
    };
    MetricsSources {
        workers: vec![w0, w1],
        snapshot: Arc::new(SnapshotCell::new(state)),
        port_names: vec!["uplink".into(), "downlink".into()],
        control: None,
        ports: vec![],
        kernel_drops: vec![],
        pool: None,
    }
}

/// The workers' counters are summed over the workers, per label set.
#[test]
fn render_sums_two_workers() {
    let text = render(&two_workers(), None);
    for line in [
        "sluice_port_rx_packets_total{port=\"uplink\"} 15",
        "sluice_port_rx_packets_total{port=\"downlink\"} 0",
        "sluice_port_tx_bytes_total{port=\"downlink\"} 1024",
        "sluice_dropped_packets_total{reason=\"no_rule\"} 5",
        "sluice_dropped_packets_total{reason=\"shutdown\"} 0",
        "sluice_punted_packets_total 7",
        "sluice_fragmented_packets_total 3",
        "sluice_fragments_created_total 7",
        "sluice_backend_packets_total{backend=\"192.0.2.10\",service=\"web\"} 10",
        "sluice_backend_bytes_total{backend=\"192.0.2.10\",service=\"web\"} 1024",
        "sluice_backend_new_connections_total{backend=\"192.0.2.10\",service=\"web\"} 3",
        "sluice_rule_packets_total{rule=\"web-http\"} 3",
        "sluice_snapshot_generation 42",
        "sluice_workers 2",
        "sluice_conntrack_entries{worker=\"1\"} 0",
        "sluice_conntrack_slots{worker=\"1\"} 0",
        "sluice_conntrack_insert_failed_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let reasons = text
        .lines()
        .filter(|l| l.starts_with("sluice_dropped_packets_total{"))
        .count();
    assert_eq!(reasons, DropReason::COUNT, "every reason, zeros included");
}

/// HC-9: under a data-path check, each VIP's probe of each backend is a
/// series of its own, with its failures by reason; direct checks have
/// none.
#[test]
fn hc_9_data_path_probes_are_exported_per_vip() {
    let text = render(&sources(None), None);
    assert!(
        text.contains(
            "sluice_backend_data_path_healthy{backend=\"198.51.100.9\",service=\"one\",vip=\"203.0.113.20\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "sluice_backend_data_path_failures_total{backend=\"198.51.100.9\",reason=\"no_answer\",service=\"one\",vip=\"203.0.113.20\"} 4"
        ),
        "{text}"
    );
    assert!(!text.contains("service=\"web\",vip="), "{text}");
}
