//! The families that grow with the configuration, each written row by row
//! from a [`Cursor`], so a scrape can stop after any row and go on later.
//! A family's header is written with its first row: a family without rows
//! is left out.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use sluice_core::backend::BackendState;
use sluice_core::ids::BackendId;
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

use super::text::{self, Label, Value, MAX_LABELS};
use crate::config::{BackendConfig, BackendServiceConfig, HealthCheckConfig, LocalityLbPolicy};
use crate::control::View;
use crate::health::{backend_status, FailureReason, ProbeStatus};
use crate::metrics::catalog;
use crate::metrics::family::Family;

/// What a scrape reads.
pub struct Context<'a> {
    pub workers: &'a [Arc<CachePadded<WorkerStats>>],
    pub snap: &'a ForwardingState,
    pub view: Option<&'a View>,
    /// Per-backend series are exported (under the limit).
    pub per_backend: bool,
}

/// Where a section is: an outer index (service, rule, VIP), an inner one
/// (a service's backend) and whether the family's header is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor {
    i: usize,
    j: usize,
    started: bool,
}

/// Writes rows from the cursor until `out` holds `budget` bytes; true when
/// the section is complete.
pub type Section = fn(&Context<'_>, &mut Cursor, &mut Vec<u8>, usize) -> bool;

/// Every section, in exposition order.
pub static SECTIONS: &[Section] = &[
    backend_packets,
    backend_bytes,
    backend_connections,
    backend_next_hop,
    health_healthy,
    health_weight,
    health_consecutive,
    health_transitions,
    health_weight_invalid,
    health_probes,
    health_failures,
    health_latency,
    service_packets,
    service_bytes,
    service_connections,
    service_backends,
    service_unresolved,
    service_eligible,
    service_active_pool,
    service_pool_flips,
    service_build_seconds,
    service_table_digest,
    rule_packets,
    vip_announced,
    vip_servable,
];

/// A family's rows being written: the header goes out with the first.
struct Rows<'a> {
    out: &'a mut Vec<u8>,
    family: &'static Family,
    started: &'a mut bool,
}

impl Rows<'_> {
    fn start(&mut self) {
        if !*self.started {
            *self.started = true;
            text::header(self.out, self.family);
        }
    }

    /// One sample: `values` are the family's labels' values, in the order
    /// its declaration names them.
    fn sample(&mut self, values: &[Label<'_>], value: Value) {
        self.start();
        let (pairs, n) = self.labelled(values);
        text::sample(self.out, self.family.name, &pairs[..n], value);
    }

    fn histogram(&mut self, values: &[Label<'_>], st: &ProbeStatus) {
        self.start();
        let (pairs, n) = self.labelled(values);
        text::histogram(
            self.out,
            self.family.name,
            &pairs[..n],
            &crate::health::scheduler::LATENCY_BUCKETS,
            &st.latency_counts,
            st.latency_sum,
        );
    }

    /// `values` named by the family's declared labels.
    fn labelled<'v>(
        &self,
        values: &[Label<'v>],
    ) -> ([(&'static str, Label<'v>); MAX_LABELS], usize) {
        debug_assert!(
            values.len() == self.family.labels.len() && values.len() <= MAX_LABELS,
            "{}'s labels",
            self.family.name
        );
        let mut pairs = [("", Label::Text("")); MAX_LABELS];
        let mut n = 0;
        for (pair, (&name, &value)) in pairs.iter_mut().zip(self.family.labels.iter().zip(values)) {
            *pair = (name, value);
            n += 1;
        }
        (pairs, n)
    }
}

fn sum(workers: &[Arc<CachePadded<WorkerStats>>], f: impl Fn(&WorkerStats) -> u64) -> u64 {
    workers.iter().map(|w| f(w)).fold(0u64, u64::wrapping_add)
}

/// Calls `row` for each backend of each service of the snapshot from the
/// cursor on, while `out` is under `budget`.
fn snapshot_backends(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    family: &'static Family,
    mut row: impl FnMut(&mut Rows<'_>, &ServiceState, BackendId, &BackendState),
) -> bool {
    if !cx.per_backend {
        return true;
    }
    let mut rows = Rows {
        out,
        family,
        started: &mut cur.started,
    };
    while let Some(svc) = cx.snap.services.get(cur.i) {
        while let Some(&id) = svc.backends.get(cur.j) {
            if rows.out.len() >= budget {
                return false;
            }
            cur.j += 1;
            if let Some(b) = cx.snap.backend(id) {
                row(&mut rows, svc, id, b);
            }
        }
        cur.i += 1;
        cur.j = 0;
    }
    true
}

/// A backend's labels' values: service, backend.
fn sb<'a>(svc: &'a str, b: &BackendState) -> [Label<'a>; 2] {
    [Label::Text(svc), Label::Ip(b.address)]
}

fn backend_packets(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_PACKETS;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.get(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

fn backend_bytes(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_BYTES;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.bytes(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

fn backend_connections(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_NEW_CONNECTIONS;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.connections(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

fn backend_next_hop(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_NEXT_HOP_RESOLVED;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, _, b| {
        let v = u64::from(b.egress.next_hop_mac.is_some());
        rows.sample(&sb(&svc.name, b), Value::Int(v));
    })
}

/// A configured backend with a health check and its probe's status.
struct Checked<'a> {
    svc: &'a BackendServiceConfig,
    backend: &'a BackendConfig,
    status: &'a ProbeStatus,
}

/// Calls `row` for each health-checked backend of the running
/// configuration that has a probe status, from the cursor on.
fn checked_backends(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    family: &'static Family,
    mut row: impl FnMut(&mut Rows<'_>, &Checked<'_>),
) -> bool {
    let Some((view, cfg)) = cx.view.and_then(|v| Some((v, v.config.as_ref()?))) else {
        return true;
    };
    if !cx.per_backend || view.health.is_empty() {
        return true;
    }
    let mut rows = Rows {
        out,
        family,
        started: &mut cur.started,
    };
    while let Some(svc) = cfg.backend_services.get(cur.i) {
        let check: Option<&HealthCheckConfig> = svc.health_check.map(|i| &cfg.health_checks[i]);
        while let Some(backend) = check.and_then(|_| svc.backends.get(cur.j)) {
            if rows.out.len() >= budget {
                return false;
            }
            cur.j += 1;
            let check = check.expect("checked above");
            if let Some(status) = backend_status(&view.health, cfg, cur.i, check, backend.address) {
                let c = Checked {
                    svc,
                    backend,
                    status,
                };
                row(&mut rows, &c);
            }
        }
        cur.i += 1;
        cur.j = 0;
    }
    true
}

/// A checked backend's labels' values: service, backend.
fn csb<'a>(c: &'a Checked<'_>) -> [Label<'a>; 2] {
    [Label::Text(&c.svc.name), Label::Ip(c.backend.address)]
}

fn health_healthy(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_HEALTHY;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let v = u64::from(c.status.state.healthy);
        rows.sample(&csb(c), Value::Int(v));
    })
}

fn health_weight(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_WEIGHT;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(u64::from(c.status.state.weight)));
    })
}

fn health_consecutive(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_CONSECUTIVE_RESULTS;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let [s, b] = csb(c);
        let st = &c.status.state;
        for (result, n) in [
            ("success", st.consecutive_successes),
            ("failure", st.consecutive_failures),
        ] {
            let labels = [s, b, Label::Text(result)];
            rows.sample(&labels, Value::Int(u64::from(n)));
        }
    })
}

fn health_transitions(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_HEALTH_TRANSITIONS;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(c.status.state.transitions));
    })
}

fn health_weight_invalid(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_WEIGHT_HEADER_INVALID;
    // Only WEIGHTED_MAGLEV reads the weight header: elsewhere its absence
    // is normal and not counted.
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        if c.svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev {
            let n = c.status.state.weight_header_invalid;
            rows.sample(&csb(c), Value::Int(n));
        }
    })
}

fn health_probes(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_PROBES;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(c.status.probes));
    })
}

fn health_failures(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_PROBE_FAILURES;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let [s, b] = csb(c);
        for r in FailureReason::ALL {
            let n = c.status.failures[r.index()];
            if n > 0 {
                let labels = [s, b, Label::Text(r.name())];
                rows.sample(&labels, Value::Int(n));
            }
        }
    })
}

fn health_latency(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::BACKEND_PROBE_LATENCY_SECONDS;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.histogram(&csb(c), c.status);
    })
}

/// Calls `row` for each service of the snapshot from the cursor on.
fn services(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    family: &'static Family,
    mut row: impl FnMut(&mut Rows<'_>, &ServiceState),
) -> bool {
    let mut rows = Rows {
        out,
        family,
        started: &mut cur.started,
    };
    while let Some(svc) = cx.snap.services.get(cur.i) {
        if rows.out.len() >= budget {
            return false;
        }
        cur.i += 1;
        row(&mut rows, svc);
    }
    true
}

/// A service's label's value.
fn service_label(svc: &ServiceState) -> [Label<'_>; 1] {
    [Label::Text(&svc.name)]
}

/// The sum over `svc`'s current backends of a per-backend counter.
fn service_sum(
    cx: &Context<'_>,
    svc: &ServiceState,
    f: impl Fn(&WorkerStats, usize) -> u64,
) -> u64 {
    svc.backends
        .iter()
        .map(|id| sum(cx.workers, |w| f(w, id.index())))
        .fold(0u64, u64::wrapping_add)
}

fn service_packets(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::SERVICE_PACKETS;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.get(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

fn service_bytes(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::SERVICE_BYTES;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.bytes(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

fn service_connections(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_NEW_CONNECTIONS;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.connections(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

fn service_backends(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::SERVICE_BACKENDS;
    services(cx, cur, out, budget, f, |rows, svc| {
        let mut counts = [0u64; 3];
        for b in svc.backends.iter().filter_map(|&id| cx.snap.backend(id)) {
            let k = match (b.draining_until, b.healthy) {
                (Some(_), _) => 2,
                (None, true) => 0,
                (None, false) => 1,
            };
            counts[k] += 1;
        }
        let [s] = service_label(svc);
        for (state, n) in ["healthy", "unhealthy", "draining"].iter().zip(counts) {
            rows.sample(&[s, Label::Text(state)], Value::Int(n));
        }
    })
}

fn service_unresolved(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_BACKENDS_NEXT_HOP_UNRESOLVED;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = svc
            .backends
            .iter()
            .filter_map(|&id| cx.snap.backend(id))
            .filter(|b| b.egress.next_hop_mac.is_none())
            .count();
        rows.sample(&service_label(svc), Value::Int(n as u64));
    })
}

/// Calls `row` for each service report of the view from the cursor on.
fn reports(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    family: &'static Family,
    mut row: impl FnMut(&mut Rows<'_>, &crate::publish::ServiceReport, &crate::config::Config),
) -> bool {
    let Some((view, cfg)) = cx.view.and_then(|v| Some((v, v.config.as_ref()?))) else {
        return true;
    };
    let mut rows = Rows {
        out,
        family,
        started: &mut cur.started,
    };
    while let Some(r) = view.reports.get(cur.i) {
        if rows.out.len() >= budget {
            return false;
        }
        cur.i += 1;
        row(&mut rows, r, cfg);
    }
    true
}

fn service_eligible(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::SERVICE_ELIGIBLE_BACKENDS;
    reports(cx, cur, out, budget, f, |rows, r, cfg| {
        for (v, n) in r.eligible.iter().enumerate() {
            let zone = match v {
                0 => "-",
                z => cfg.zones.get(z - 1).map_or("?", |z| z.name.as_str()),
            };
            let labels = [Label::Text(&r.name), Label::Text(zone)];
            rows.sample(&labels, Value::Int(*n as u64));
        }
    })
}

fn service_active_pool(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_ACTIVE_POOL;
    reports(cx, cur, out, budget, f, |rows, r, _| {
        for (p, name) in [
            (crate::config::Pool::Primary, "primary"),
            (crate::config::Pool::Failover, "failover"),
        ] {
            let labels = [Label::Text(&r.name), Label::Text(name)];
            rows.sample(&labels, Value::Int(u64::from(r.active_pool == Some(p))));
        }
    })
}

fn service_pool_flips(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_POOL_FLIPS;
    reports(cx, cur, out, budget, f, |rows, r, _| {
        let labels = [Label::Text(&r.name)];
        rows.sample(&labels, Value::Int(u64::from(r.pool_epoch)));
    })
}

fn service_build_seconds(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_TABLE_BUILD_SECONDS;
    reports(cx, cur, out, budget, f, |rows, r, _| {
        let labels = [Label::Text(&r.name)];
        rows.sample(&labels, Value::Float(r.build_seconds));
    })
}

fn service_table_digest(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let Some(view) = cx.view else {
        return true;
    };
    // A digest still computing (tables published a moment ago) is left
    // out of this scrape rather than waited for.
    let f = &catalog::SERVICE_TABLE_DIGEST_INFO;
    services(cx, cur, out, budget, f, |rows, svc| {
        let Some(digest) = view.fleet.cached_table_digest(svc) else {
            return;
        };
        let digest = digest.to_string();
        let labels = [Label::Text(&svc.name), Label::Text(&digest)];
        rows.sample(&labels, Value::Int(1));
    })
}

fn rule_packets(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::RULE_PACKETS;
    let mut rows = Rows {
        out,
        family: f,
        started: &mut cur.started,
    };
    for rule in cx.snap.rules.rules().skip(cur.i) {
        if rows.out.len() >= budget {
            return false;
        }
        cur.i += 1;
        let n = sum(cx.workers, |w| w.rule_packets.get(rule.counter));
        rows.sample(&[Label::Text(&rule.name)], Value::Int(n));
    }
    true
}

/// One row per announced-or-not VIP of `f`, valued by `value`.
fn vip_rows(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    f: &'static Family,
    value: fn(&crate::fleet::announced::VipStatus) -> bool,
) -> bool {
    let Some(vips) = cx.view.and_then(|v| v.fleet.announce.vips()) else {
        return true;
    };
    let mut rows = Rows {
        out,
        family: f,
        started: &mut cur.started,
    };
    for v in vips.iter().skip(cur.i) {
        if rows.out.len() >= budget {
            return false;
        }
        cur.i += 1;
        let labels = [Label::Ip(v.vip)];
        rows.sample(&labels, Value::Int(u64::from(value(v))));
    }
    true
}

fn vip_servable(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::VIP_SERVABLE;
    vip_rows(cx, cur, out, budget, f, |v| v.servable)
}

fn vip_announced(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = &catalog::VIP_ANNOUNCED;
    vip_rows(cx, cur, out, budget, f, |v| v.announced)
}
