//! The control thread's families whose size is fixed, read from its view:
//! reloads, the last build, health flip to publish latency, the start's
//! hand-off and the configuration digest. Its per-backend and per-service
//! families grow with the configuration and are written by the
//! exposition.

use prometheus::proto::MetricFamily;

use super::catalog;
use crate::control::publish_latency::BUCKETS;
use crate::control::View;
use crate::handoff::StartReport;

/// The control thread's families whose size does not grow with the
/// configuration, `generation` being the last snapshot it built.
pub fn families(view: &View, generation: u64) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    let reloads = catalog::CONFIG_RELOADS.ints();
    reloads.put(&["success"], view.reloads_ok);
    reloads.put(&["failure"], view.reloads_failed);
    out.extend(reloads.collect());
    if let Some(last) = &view.last_reload {
        out.extend(catalog::CONFIG_LAST_RELOAD_SUCCESSFUL.int(u64::from(last.ok)));
        out.extend(catalog::CONFIG_LAST_RELOAD_TIMESTAMP_SECONDS.float(last.unix_seconds));
    }
    out.extend(catalog::TABLE_GENERATION.int(generation));
    out.extend(catalog::TABLE_BUILD_SECONDS.float(view.last_build_seconds));
    // Exported from the start (count 0), so a rate over it is defined
    // before the first flip.
    let h = &view.health_publish;
    out.push(catalog::HEALTH_EVENT_PUBLISH_SECONDS.histogram(&BUCKETS, &h.counts, h.sum));
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
    let config = catalog::CONFIG_DIGEST_INFO.ints();
    config.put(&[&view.fleet.config_digest(cfg).to_string()], 1);
    config.collect()
}

/// The start's conntrack hand-off: whether a file was refused, and the
/// connections of a file taken by outcome, with its gap.
fn handoff_families(report: StartReport) -> Vec<MetricFamily> {
    let mut out = catalog::HANDOFF_REFUSED.int(u64::from(report == StartReport::Refused));
    if let StartReport::Taken {
        taken,
        dropped,
        gap_ms,
    } = report
    {
        let connections = catalog::HANDOFF_CONNECTIONS.ints();
        connections.put(&["taken"], taken);
        for (reason, n) in dropped.by_reason() {
            connections.put(&[reason], n);
        }
        out.extend(connections.collect());
        out.extend(catalog::HANDOFF_GAP_SECONDS.float(gap_ms as f64 / 1000.0));
    }
    out
}
