//! Control-plane metrics: health per backend, weights, probe
//! latency, transitions; eligible sets, active pool, table generation and
//! build time per service; reloads; DPDK port hardware counters.

use prometheus::core::Collector as _;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};

use crate::control::View;
use crate::health::{probe_key, FailureReason, ProbeStatus};

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

/// Families from the control thread's last published view.
pub fn families(view: &View, generation: u64) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    let sb = ["service", "backend"];
    let healthy = gauge(
        "sluice_backend_healthy",
        "1 when the backend's health check passes (HC-3), 0 otherwise.",
        &sb,
    );
    let weight = gauge(
        "sluice_backend_weight",
        "Effective weight (HC-7 reported weight under WEIGHTED_MAGLEV).",
        &sb,
    );
    let consecutive = gauge(
        "sluice_backend_consecutive_results",
        "Consecutive probe results of the current kind.",
        &["service", "backend", "result"],
    );
    let transitions = counter(
        "sluice_backend_health_transitions_total",
        "Health state changes.",
        &sb,
    );
    let invalid = counter(
        "sluice_backend_weight_header_invalid_total",
        "Passing HTTP probes whose weight header was missing or invalid (HC-7).",
        &sb,
    );
    let probes = counter("sluice_backend_probes_total", "Probes completed.", &sb);
    let failures = counter(
        "sluice_backend_probe_failures_total",
        "Failed probes by reason (timeout, refused, port_unreachable, ...); reasons never seen are not exported.",
        &["service", "backend", "reason"],
    );
    let mut latency_metrics = Vec::new();
    let eligible = gauge(
        "sluice_service_eligible_backends",
        "Size of the modified eligible set per client zone (\"-\": no zone).",
        &["service", "zone"],
    );
    let pool = gauge(
        "sluice_service_active_pool",
        "1 for the pool new connections go to (primary/failover), 0 for the other.",
        &["service", "pool"],
    );
    let epoch = gauge(
        "sluice_service_pool_epoch",
        "Primary↔failover flips so far (CT-11).",
        &["service"],
    );
    let build = GaugeVec::new(
        Opts::new(
            "sluice_service_table_build_seconds",
            "Duration of the service's last eligibility + Maglev build.",
        ),
        &["service"],
    )
    .expect("valid metric definition");

    if let Some(cfg) = &view.config {
        for svc in &cfg.backend_services {
            let check = svc.health_check.map(|i| &cfg.health_checks[i]);
            for b in &svc.backends {
                let labels = [svc.name.as_str(), &b.address.to_string()];
                let Some(st) = check.and_then(|hc| view.health.get(&probe_key(hc, b.address)))
                else {
                    continue;
                };
                healthy
                    .with_label_values(&labels)
                    .set(i64::from(st.state.healthy));
                weight
                    .with_label_values(&labels)
                    .set(i64::from(st.state.weight));
                consecutive
                    .with_label_values(&[labels[0], labels[1], "success"])
                    .set(i64::from(st.state.consecutive_successes));
                consecutive
                    .with_label_values(&[labels[0], labels[1], "failure"])
                    .set(i64::from(st.state.consecutive_failures));
                transitions
                    .with_label_values(&labels)
                    .inc_by(st.state.transitions);
                invalid
                    .with_label_values(&labels)
                    .inc_by(st.state.weight_header_invalid);
                probes.with_label_values(&labels).inc_by(st.probes);
                for r in FailureReason::ALL {
                    let n = st.failures[r.index()];
                    if n > 0 {
                        failures
                            .with_label_values(&[labels[0], labels[1], r.name()])
                            .inc_by(n);
                    }
                }
                latency_metrics.push(histogram(&labels, st));
            }
        }
        for r in view.reports.iter() {
            for (v, n) in r.eligible.iter().enumerate() {
                let zone = match v {
                    0 => "-".to_string(),
                    z => cfg.zones.get(z - 1).map_or("?".into(), |z| z.name.clone()),
                };
                eligible
                    .with_label_values(&[r.name.as_str(), &zone])
                    .set(*n as i64);
            }
            for (p, name) in [
                (crate::config::Pool::Primary, "primary"),
                (crate::config::Pool::Failover, "failover"),
            ] {
                pool.with_label_values(&[r.name.as_str(), name])
                    .set(i64::from(r.active_pool == Some(p)));
            }
            epoch
                .with_label_values(&[r.name.as_str()])
                .set(i64::from(r.pool_epoch));
            build
                .with_label_values(&[r.name.as_str()])
                .set(r.build_seconds);
        }
    }
    out.extend(healthy.collect());
    out.extend(weight.collect());
    out.extend(consecutive.collect());
    out.extend(transitions.collect());
    out.extend(invalid.collect());
    out.extend(probes.collect());
    out.extend(failures.collect());
    if !latency_metrics.is_empty() {
        let mut f = MetricFamily::default();
        f.set_name("sluice_backend_probe_latency_seconds".into());
        f.set_help("Probe latency (timeouts included).".into());
        f.set_field_type(MetricType::HISTOGRAM);
        f.set_metric(latency_metrics);
        out.push(f);
    }
    out.extend(eligible.collect());
    out.extend(pool.collect());
    out.extend(epoch.collect());
    out.extend(build.collect());

    let reloads = counter(
        "sluice_config_reloads_total",
        "Configuration reloads by result (AP-5).",
        &["result"],
    );
    reloads
        .with_label_values(&["success"])
        .inc_by(view.reloads_ok);
    reloads
        .with_label_values(&["failure"])
        .inc_by(view.reloads_failed);
    out.extend(reloads.collect());
    let g = prometheus::IntGauge::new(
        "sluice_table_generation",
        "Generation of the last snapshot the control thread built.",
    )
    .expect("valid metric definition");
    g.set(i64::try_from(generation).unwrap_or(i64::MAX));
    out.extend(g.collect());
    let b = prometheus::Gauge::new(
        "sluice_table_build_seconds",
        "Duration of the last full snapshot build (all services).",
    )
    .expect("valid metric definition");
    b.set(view.last_build_seconds);
    out.extend(b.collect());
    // A family without samples (no health checks, no services) makes the
    // text encoder fail the whole scrape.
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// DPDK port hardware counters (thread-safe reads).
pub fn port_hw_families(
    ports: &[dataplane::dpdk::PortMonitor],
    names: &[String],
) -> Vec<MetricFamily> {
    let c = counter(
        "sluice_port_hw_total",
        "DPDK port hardware counters (rte_eth_stats).",
        &["port", "counter"],
    );
    for (i, monitor) in ports.iter().enumerate() {
        let s = monitor.hw_stats();
        let port = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| monitor.id().to_string());
        for (name, v) in [
            ("ipackets", s.ipackets),
            ("opackets", s.opackets),
            ("ibytes", s.ibytes),
            ("obytes", s.obytes),
            ("imissed", s.imissed),
            ("ierrors", s.ierrors),
            ("oerrors", s.oerrors),
            ("rx_nombuf", s.rx_nombuf),
        ] {
            c.with_label_values(&[port.as_str(), name]).inc_by(v);
        }
    }
    if ports.is_empty() {
        return Vec::new(); // an empty family fails the whole scrape
    }
    c.collect()
}

/// The scheduler keeps per-bucket counts; Prometheus wants cumulative
/// buckets. Built directly so a scrape costs O(buckets), not O(probes).
fn histogram(labels: &[&str; 2], st: &ProbeStatus) -> proto::Metric {
    let names = ["service", "backend"];
    let pairs = names
        .iter()
        .zip(labels)
        .map(|(n, v)| {
            let mut p = proto::LabelPair::default();
            p.set_name((*n).into());
            p.set_value((*v).into());
            p
        })
        .collect();
    let mut cumulative = 0;
    let buckets = crate::health::scheduler::LATENCY_BUCKETS
        .iter()
        .zip(&st.latency_counts)
        .map(|(&ub, &n)| {
            cumulative += n;
            let mut b = proto::Bucket::default();
            b.set_upper_bound(ub);
            b.set_cumulative_count(cumulative);
            b
        })
        .collect();
    let mut h = proto::Histogram::default();
    h.set_sample_count(st.latency_counts.iter().sum());
    h.set_sample_sum(st.latency_sum);
    h.set_bucket(buckets);
    let mut m = proto::Metric::from_label(pairs);
    m.set_histogram(h);
    m
}
