//! `/metrics` as a stream (AP-5): the exposition is written in parts of a
//! bounded size as the client takes them, never held whole, so a scrape of
//! 100,000 backends costs the appliance one part per connection, and a
//! client that stops reading costs it nothing more.
//!
//! The families whose size is fixed (ports, drop reasons, workers,
//! conntrack, process, reloads) are rendered at the start of a scrape
//! through the `prometheus` crate's types ([`super::fixed`]);
//! the families that grow with the configuration — per backend, per
//! service, per rule, per VIP — are written here row by row from a cursor
//! ([`rows`]: [`backends`], [`services`], [`rules`], [`vips`]), straight
//! into the text format ([`text`]).
//!
//! Per-backend series are bounded by `[metrics] backend_series_limit`:
//! above it, only the per-service aggregates (always exported) describe
//! the backends, and one log line says so when the choice changes.

mod backends;
mod data_paths;
mod rows;
mod rules;
mod services;
pub mod text;
mod vips;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

use self::rows::Section;
use super::fixed;
use super::sources::MetricsSources;
use crate::config::MetricsConfig;
use crate::control::View;

/// The size a part aims at: one part is written per turn of the admin
/// endpoint's loop for each connection whose socket has room.
pub const PART_BYTES: usize = 64 * 1024;

/// One scrape in progress: what it reads, and where it is.
pub struct Exposition {
    /// The workers' counters (not the sources, which hold the ports open:
    /// a slow reader must not keep them from closing).
    workers: Vec<Arc<CachePadded<WorkerStats>>>,
    /// The snapshot and view as of the scrape's start: a scrape's
    /// backends, services and rules are those of one publication.
    snap: Arc<ForwardingState>,
    view: Option<View>,
    per_backend: bool,
    /// The fixed families, until written.
    head: Option<Vec<u8>>,
    step: usize,
    cursor: rows::Cursor,
}

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exposition")
            .field("generation", &self.snap.generation)
            .field("step", &self.step)
            .finish()
    }
}

impl Exposition {
    /// A scrape of `src`; `since_beat` (the live endpoint) adds the
    /// control loop's age.
    pub fn new(src: &MetricsSources, since_beat: Option<Duration>) -> Self {
        let snap = src.snapshot.load();
        let view = src.control.as_ref().map(|c| c.view());
        let limit = view
            .as_ref()
            .and_then(|v| v.config.as_ref())
            .map_or(MetricsConfig::DEFAULT_BACKEND_SERIES_LIMIT, |c| {
                c.metrics.backend_series_limit
            });
        let backends: usize = snap.services.iter().map(|s| s.backends.len()).sum();
        let per_backend = backends <= limit;
        note_choice(per_backend, backends, limit);
        let mut head = fixed::encode(&fixed::families(src, &snap));
        if let Some(age) = since_beat {
            head.extend(fixed::encode(&super::process::control_loop(age)));
        }
        Self {
            workers: src.workers.clone(),
            snap,
            view,
            per_backend,
            head: Some(head),
            step: 0,
            cursor: rows::Cursor::default(),
        }
    }

    /// Appends the next part to `out` until it holds at least `budget`
    /// bytes or the exposition ends; true once it has ended.
    pub fn fill(&mut self, out: &mut Vec<u8>, budget: usize) -> bool {
        if let Some(head) = self.head.take() {
            out.extend_from_slice(&head);
        }
        let cx = rows::Context {
            workers: &self.workers,
            snap: &self.snap,
            view: self.view.as_ref(),
            per_backend: self.per_backend,
        };
        while out.len() < budget {
            let Some(section) = SECTIONS.get(self.step) else {
                return true;
            };
            if section(&cx, &mut self.cursor, out, budget) {
                self.step += 1;
                self.cursor = rows::Cursor::default();
            }
        }
        self.step >= SECTIONS.len()
    }
}

/// The whole exposition as one string (`--metrics-dump`, tests).
pub fn render(src: &MetricsSources, since_beat: Option<Duration>) -> String {
    let mut e = Exposition::new(src, since_beat);
    let mut out = Vec::new();
    while !e.fill(&mut out, usize::MAX) {}
    String::from_utf8(out).unwrap_or_default()
}

/// Every section, in exposition order.
static SECTIONS: &[Section] = &[
    backends::backend_packets,
    backends::backend_bytes,
    backends::backend_connections,
    backends::backend_next_hop,
    backends::health_healthy,
    backends::health_weight,
    backends::health_consecutive,
    backends::health_transitions,
    backends::health_weight_invalid,
    backends::health_probes,
    backends::health_failures,
    backends::health_latency,
    data_paths::data_path_healthy,
    data_paths::data_path_failures,
    services::service_packets,
    services::service_bytes,
    services::service_connections,
    services::service_backends,
    services::service_unresolved,
    services::service_eligible,
    services::service_active_pool,
    services::service_pool_flips,
    services::service_build_seconds,
    services::service_table_digest,
    rules::rule_packets,
    vips::vip_announced,
    vips::vip_servable,
];

/// The last choice between per-backend series and aggregates (0: none
/// yet, 1: per backend, 2: aggregates), so it is logged when it changes.
static CHOICE: AtomicU8 = AtomicU8::new(0);

fn note_choice(per_backend: bool, backends: usize, limit: usize) {
    let now = if per_backend { 1 } else { 2 };
    let before = CHOICE.swap(now, Ordering::Relaxed);
    if before == now || (before == 0 && per_backend) {
        return;
    }
    if per_backend {
        crate::info!(
            "sluice: metrics: {backends} backends, at most [metrics] backend_series_limit = \
             {limit}: per-backend series are exported again"
        );
    } else {
        crate::warn!(
            "sluice: metrics: {backends} backends exceed [metrics] backend_series_limit = \
             {limit}: per-backend series are left out of /metrics, the per-service \
             aggregates (sluice_service_*) describe them; raise the limit to export them"
        );
    }
}

#[cfg(test)]
mod tests;
