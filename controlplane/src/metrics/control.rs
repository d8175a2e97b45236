//! Control-plane metrics: health per backend, weights, probe
//! latency, transitions; eligible sets, active pool, table generation and
//! build time per service; health flip to publish latency; reloads; DPDK
//! port counters and links.

use prometheus::core::Collector as _;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use crate::control::publish_latency::{self, PublishLatency};
use crate::control::View;

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

/// The control thread's families whose size does not grow with the
/// configuration (reloads, the last build, health publication latency);
/// the per-backend and per-service ones are in `crate::metrics::exposition`.
pub fn families(view: &View, generation: u64) -> Vec<MetricFamily> {
    let mut out = Vec::new();
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
    out.extend(handoff_families(view.handoff));
    out.extend(config_digest_family(view));
    out
}

/// The configuration digest (`crate::fleet`); the per-service table
/// digests and per-VIP announcements are written by the exposition.
fn config_digest_family(view: &View) -> Vec<MetricFamily> {
    let Some(cfg) = &view.config else {
        return Vec::new();
    };
    let config = gauge(
        "sluice_config_digest_info",
        "Always 1; `digest` identifies the fleet-wide part of the published \
         configuration (services, backends, rules, checks, zones, flow key): \
         appliances behind the same VIPs must show the same.",
        &["digest"],
    );
    config
        .with_label_values(&[&view.fleet.config_digest(cfg).to_string()])
        .set(1);
    config.collect()
}

/// The start's conntrack hand-off: whether a file was refused, and the
/// connections of a file taken by outcome, with its gap.
fn handoff_families(report: crate::handoff::StartReport) -> Vec<MetricFamily> {
    use crate::handoff::StartReport;
    let mut out = Vec::new();
    let refused = prometheus::IntGauge::new(
        "sluice_handoff_refused",
        "1 when this start found a conntrack hand-off file and refused it (corrupt, stale, \
         another configuration file; the log says why), else 0.",
    )
    .expect("valid metric definition");
    refused.set(i64::from(report == StartReport::Refused));
    out.extend(refused.collect());
    if let StartReport::Taken {
        taken,
        dropped,
        gap_ms,
    } = report
    {
        let connections = gauge(
            "sluice_handoff_connections",
            "Connections of the conntrack hand-off file this start took, by outcome: taken, or \
             why not (service_gone, backend_gone, tracking_changed, expired).",
            &["outcome"],
        );
        connections
            .with_label_values(&["taken"])
            .set(i64::try_from(taken).unwrap_or(i64::MAX));
        for (reason, n) in dropped.by_reason() {
            connections
                .with_label_values(&[reason])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        out.extend(connections.collect());
        let gap = prometheus::Gauge::new(
            "sluice_handoff_gap_seconds",
            "Time from the writing of the conntrack hand-off file this start took to the start \
             taking it.",
        )
        .expect("valid metric definition");
        gap.set(gap_ms as f64 / 1000.0);
        out.extend(gap.collect());
    }
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
