//! Control-plane metrics: health per backend, weights, probe
//! latency, transitions; eligible sets, active pool, table generation and
//! build time per service; health flip to publish latency; reloads; DPDK
//! port counters and links.

use prometheus::core::Collector as _;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};

use crate::config::LocalityLbPolicy;
use crate::control::publish_latency::{self, PublishLatency};
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
        "1 when the backend's health check passes, 0 while it fails.",
        &sb,
    );
    let weight = gauge(
        "sluice_backend_weight",
        "The backend's weight: the one its health check reported under WEIGHTED_MAGLEV, else 1.",
        &sb,
    );
    let consecutive = gauge(
        "sluice_backend_consecutive_results",
        "Consecutive probe results of the current kind (result=\"success\" or \"failure\").",
        &["service", "backend", "result"],
    );
    let transitions = counter(
        "sluice_backend_health_transitions_total",
        "Changes of the backend's health state (healthy to unhealthy and back).",
        &sb,
    );
    let invalid = counter(
        "sluice_backend_weight_header_invalid_total",
        "Passing HTTP probes of a WEIGHTED_MAGLEV service whose X-Load-Balancing-Endpoint-Weight \
         header was missing or invalid (the backend keeps its last weight).",
        &sb,
    );
    let probes = counter(
        "sluice_backend_probes_total",
        "Health probes completed, passed or failed.",
        &sb,
    );
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
    let flips = counter(
        "sluice_service_pool_flips_total",
        "Times the service's new connections moved between its primary and failover pools.",
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
            // Only WEIGHTED_MAGLEV reads the weight header: elsewhere its
            // absence is normal and not counted.
            let weighted = svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev;
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
                if weighted {
                    invalid
                        .with_label_values(&labels)
                        .inc_by(st.state.weight_header_invalid);
                }
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
            flips
                .with_label_values(&[r.name.as_str()])
                .inc_by(u64::from(r.pool_epoch));
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
    out.extend(flips.collect());
    out.extend(build.collect());

    let reloads = counter(
        "sluice_config_reloads_total",
        "Configuration reloads (SIGHUP or `sluice reload`) by result: success or failure.",
        &["result"],
    );
    reloads
        .with_label_values(&["success"])
        .inc_by(view.reloads_ok);
    reloads
        .with_label_values(&["failure"])
        .inc_by(view.reloads_failed);
    out.extend(reloads.collect());
    if let Some(last) = &view.last_reload {
        let ok = prometheus::IntGauge::new(
            "sluice_config_last_reload_successful",
            "1 when the latest configuration reload applied, 0 when it was refused \
             (the previous configuration keeps running). Absent before the first reload.",
        )
        .expect("valid metric definition");
        ok.set(i64::from(last.ok));
        out.extend(ok.collect());
        let at = prometheus::Gauge::new(
            "sluice_config_last_reload_timestamp_seconds",
            "When the latest configuration reload was tried, in seconds since the Unix epoch.",
        )
        .expect("valid metric definition");
        at.set(last.unix_seconds);
        out.extend(at.collect());
    }
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
    out.push(health_publish_family(&view.health_publish));
    // A family without samples (no health checks, no services) makes the
    // text encoder fail the whole scrape.
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// The DPDK port counters (`rte_eth_stats`), one family per quantity and
/// unit, and each port's link state and speed (thread-safe reads).
pub fn port_hw_families(
    ports: &[dataplane::dpdk::PortMonitor],
    names: &[String],
) -> Vec<MetricFamily> {
    if ports.is_empty() {
        return Vec::new(); // an empty family fails the whole scrape
    }
    let families = [
        ("sluice_port_hw_rx_packets_total", "Packets the port's device received (rte_eth_stats ipackets)."),
        ("sluice_port_hw_tx_packets_total", "Packets the port's device sent (rte_eth_stats opackets)."),
        ("sluice_port_hw_rx_bytes_total", "Bytes the port's device received (rte_eth_stats ibytes)."),
        ("sluice_port_hw_tx_bytes_total", "Bytes the port's device sent (rte_eth_stats obytes)."),
        ("sluice_port_hw_rx_missed_packets_total", "Packets the device dropped because its receive queues were full (rte_eth_stats imissed)."),
        ("sluice_port_hw_rx_errors_total", "Erroneous packets the device received (rte_eth_stats ierrors)."),
        ("sluice_port_hw_tx_errors_total", "Packets the device failed to send (rte_eth_stats oerrors)."),
        ("sluice_port_hw_rx_no_mbuf_total", "Receive failures for want of a free mbuf in the packet pool (rte_eth_stats rx_nombuf)."),
    ]
    .map(|(name, help)| counter(name, help, &["port"]));
    let up = gauge(
        "sluice_port_link_up",
        "1 while the port's link is up, 0 while it is down.",
        &["port"],
    );
    let speed = gauge(
        "sluice_port_link_speed_bytes",
        "The port's link speed in bytes per second (0: unknown or down).",
        &["port"],
    );
    for (i, monitor) in ports.iter().enumerate() {
        let s = monitor.hw_stats();
        let port = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| monitor.id().to_string());
        let values = [
            s.ipackets,
            s.opackets,
            s.ibytes,
            s.obytes,
            s.imissed,
            s.ierrors,
            s.oerrors,
            s.rx_nombuf,
        ];
        for (family, v) in families.iter().zip(values) {
            family.with_label_values(&[port.as_str()]).inc_by(v);
        }
        let link = monitor.link();
        up.with_label_values(&[port.as_str()])
            .set(i64::from(link.up));
        let mbps = if link.up {
            link.speed_mbps.unwrap_or(0)
        } else {
            0
        };
        speed
            .with_label_values(&[port.as_str()])
            .set(i64::from(mbps) * 1_000_000 / 8);
    }
    let mut out: Vec<MetricFamily> = families.iter().flat_map(|f| f.collect()).collect();
    out.extend(up.collect());
    out.extend(speed.collect());
    out
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

/// `sluice_health_event_publish_seconds`: exported from the start (count
/// 0), so a rate over it is defined before the first flip.
fn health_publish_family(h: &PublishLatency) -> MetricFamily {
    let mut cumulative = 0;
    let buckets = publish_latency::BUCKETS
        .iter()
        .zip(&h.counts)
        .map(|(&ub, &n)| {
            cumulative += n;
            let mut b = proto::Bucket::default();
            b.set_upper_bound(ub);
            b.set_cumulative_count(cumulative);
            b
        })
        .collect();
    let mut histogram = proto::Histogram::default();
    histogram.set_sample_count(h.count());
    histogram.set_sample_sum(h.sum);
    histogram.set_bucket(buckets);
    let mut m = proto::Metric::default();
    m.set_histogram(histogram);
    let mut f = MetricFamily::default();
    f.set_name("sluice_health_event_publish_seconds".into());
    f.set_help(
        "Seconds from a health checker's verdict change (a backend turning healthy or \
         unhealthy) to the publication to the workers of the forwarding snapshot that \
         reflects it."
            .into(),
    );
    f.set_field_type(MetricType::HISTOGRAM);
    f.set_metric(vec![m]);
    f
}
