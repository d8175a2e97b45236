//! The control thread's families whose size is fixed, read from its view:
//! reloads, the last build, health flip to publish latency, the start's
//! hand-off and the configuration digest. Its per-backend and per-service
//! families grow with the configuration and are written by the
//! exposition.

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
