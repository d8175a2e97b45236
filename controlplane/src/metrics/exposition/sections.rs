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

use super::text::{self, Family, Kind, Label, Value};
use crate::config::{BackendConfig, BackendServiceConfig, HealthCheckConfig, LocalityLbPolicy};
use crate::control::View;
use crate::health::{backend_status, FailureReason, ProbeStatus};

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

    fn sample(&mut self, labels: &[(&str, Label<'_>)], value: Value) {
        self.start();
        text::sample(self.out, self.family.name, labels, value);
    }

    fn histogram(&mut self, labels: &[(&str, Label<'_>)], st: &ProbeStatus) {
        self.start();
        text::histogram(
            self.out,
            self.family.name,
            labels,
            &crate::health::scheduler::LATENCY_BUCKETS,
            &st.latency_counts,
            st.latency_sum,
        );
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

fn sb<'a>(svc: &'a str, b: &BackendState) -> [(&'static str, Label<'a>); 2] {
    [
        ("service", Label::Text(svc)),
        ("backend", Label::Ip(b.address)),
    ]
}

macro_rules! family {
    ($name:literal, $kind:ident, $help:expr) => {
        &Family {
            name: $name,
            help: $help,
            kind: Kind::$kind,
        }
    };
}

fn backend_packets(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_packets_total",
        Counter,
        "Packets forwarded to a backend of the current configuration."
    );
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.get(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

fn backend_bytes(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_bytes_total",
        Counter,
        "Bytes (whole frames as sent, before any fragmentation) forwarded to a backend \
         of the current configuration."
    );
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
    let f = family!(
        "sluice_backend_new_connections_total",
        Counter,
        "New connections sent to a backend of the current configuration: conntrack \
         entries created (a SYN, or the first packet of a flow the table did not hold) \
         whose packet was forwarded to it. Tracked traffic only: a backend of a \
         stateless service (or of untracked UDP) stays at 0."
    );
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.connections(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

fn backend_next_hop(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_next_hop_resolved",
        Gauge,
        "1 when the backend's next-hop MAC is known (static `mac`, or resolved \
         through the kernel from the port's TAP); 0 while its packets are dropped as \
         next_hop_unresolved."
    );
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

fn csb<'a>(c: &'a Checked<'_>) -> [(&'static str, Label<'a>); 2] {
    [
        ("service", Label::Text(&c.svc.name)),
        ("backend", Label::Ip(c.backend.address)),
    ]
}

fn health_healthy(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_healthy",
        Gauge,
        "1 when the backend's health check passes, 0 while it fails."
    );
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let v = u64::from(c.status.state.healthy);
        rows.sample(&csb(c), Value::Int(v));
    })
}

fn health_weight(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_weight",
        Gauge,
        "The backend's weight: the one its health check reported under WEIGHTED_MAGLEV, else 1."
    );
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
    let f = family!(
        "sluice_backend_consecutive_results",
        Gauge,
        "Consecutive probe results of the current kind (result=\"success\" or \"failure\")."
    );
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let [s, b] = csb(c);
        let st = &c.status.state;
        for (result, n) in [
            ("success", st.consecutive_successes),
            ("failure", st.consecutive_failures),
        ] {
            let labels = [s, b, ("result", Label::Text(result))];
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
    let f = family!(
        "sluice_backend_health_transitions_total",
        Counter,
        "Changes of the backend's health state (healthy to unhealthy and back)."
    );
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
    let f = family!(
        "sluice_backend_weight_header_invalid_total",
        Counter,
        "Passing HTTP probes of a WEIGHTED_MAGLEV service whose X-Load-Balancing-Endpoint-Weight \
         header was missing or invalid (the backend keeps its last weight)."
    );
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
    let f = family!(
        "sluice_backend_probes_total",
        Counter,
        "Health probes completed, passed or failed."
    );
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(c.status.probes));
    })
}

fn health_failures(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_probe_failures_total",
        Counter,
        "Failed probes by reason (timeout, refused, port_unreachable, ...); reasons never \
         seen are not exported."
    );
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let [s, b] = csb(c);
        for r in FailureReason::ALL {
            let n = c.status.failures[r.index()];
            if n > 0 {
                let labels = [s, b, ("reason", Label::Text(r.name()))];
                rows.sample(&labels, Value::Int(n));
            }
        }
    })
}

fn health_latency(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_backend_probe_latency_seconds",
        Histogram,
        "Probe latency (timeouts included)."
    );
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

fn service_label(svc: &ServiceState) -> [(&'static str, Label<'_>); 1] {
    [("service", Label::Text(&svc.name))]
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
    let f = family!(
        "sluice_service_packets_total",
        Counter,
        "Packets forwarded to the service's current backends (the sum of their \
         sluice_backend_packets_total; a backend removed by a reload takes its count \
         with it)."
    );
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.get(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

fn service_bytes(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_service_bytes_total",
        Counter,
        "Bytes forwarded to the service's current backends (the sum of their \
         sluice_backend_bytes_total)."
    );
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
    let f = family!(
        "sluice_service_new_connections_total",
        Counter,
        "New connections sent to the service's current backends (the sum of their \
         sluice_backend_new_connections_total)."
    );
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.connections(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

fn service_backends(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_service_backends",
        Gauge,
        "The service's backends by state in the published snapshot: healthy, unhealthy \
         or draining (removed or drained, within their draining timeout)."
    );
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
            rows.sample(&[s, ("state", Label::Text(state))], Value::Int(n));
        }
    })
}

fn service_unresolved(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = family!(
        "sluice_service_backends_next_hop_unresolved",
        Gauge,
        "The service's backends whose next-hop MAC is not known: their packets are \
         dropped as next_hop_unresolved."
    );
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
    let f = family!(
        "sluice_service_eligible_backends",
        Gauge,
        "Size of the modified eligible set per client zone (\"-\": no zone)."
    );
    reports(cx, cur, out, budget, f, |rows, r, cfg| {
        for (v, n) in r.eligible.iter().enumerate() {
            let zone = match v {
                0 => "-",
                z => cfg.zones.get(z - 1).map_or("?", |z| z.name.as_str()),
            };
            let labels = [
                ("service", Label::Text(&r.name)),
                ("zone", Label::Text(zone)),
            ];
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
    let f = family!(
        "sluice_service_active_pool",
        Gauge,
        "1 for the pool new connections go to (primary/failover), 0 for the other."
    );
    reports(cx, cur, out, budget, f, |rows, r, _| {
        for (p, name) in [
            (crate::config::Pool::Primary, "primary"),
            (crate::config::Pool::Failover, "failover"),
        ] {
            let labels = [
                ("service", Label::Text(&r.name)),
                ("pool", Label::Text(name)),
            ];
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
    let f = family!(
        "sluice_service_pool_flips_total",
        Counter,
        "Times the service's new connections moved between its primary and failover pools."
    );
    reports(cx, cur, out, budget, f, |rows, r, _| {
        let labels = [("service", Label::Text(&r.name))];
        rows.sample(&labels, Value::Int(u64::from(r.pool_epoch)));
    })
}

fn service_build_seconds(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = family!(
        "sluice_service_table_build_seconds",
        Gauge,
        "Duration of the service's last eligibility + Maglev build."
    );
    reports(cx, cur, out, budget, f, |rows, r, _| {
        let labels = [("service", Label::Text(&r.name))];
        rows.sample(&labels, Value::Float(r.build_seconds));
    })
}

fn service_table_digest(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = family!(
        "sluice_service_table_digest_info",
        Gauge,
        "Always 1; `digest` identifies the service's Maglev tables slot by slot: \
         appliances behind the same VIPs must show the same."
    );
    let Some(view) = cx.view else {
        return true;
    };
    // A digest still computing (tables published a moment ago) is left
    // out of this scrape rather than waited for.
    services(cx, cur, out, budget, f, |rows, svc| {
        let Some(digest) = view.fleet.cached_table_digest(svc) else {
            return;
        };
        let digest = digest.to_string();
        let labels = [
            ("service", Label::Text(&svc.name)),
            ("digest", Label::Text(&digest)),
        ];
        rows.sample(&labels, Value::Int(1));
    })
}

fn rule_packets(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_rule_packets_total",
        Counter,
        "Packets that matched a forwarding rule of the current configuration, \
         forwarded or not (a packet dropped after the match, e.g. no_backend, counts \
         too). A rule keeps its count across reloads."
    );
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
        rows.sample(&[("rule", Label::Text(&rule.name))], Value::Int(n));
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
        let labels = [("vip", Label::Ip(v.vip))];
        rows.sample(&labels, Value::Int(u64::from(value(v))));
    }
    true
}

fn vip_servable(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_vip_servable",
        Gauge,
        "1 while a service of the VIP has a healthy, eligible backend with a known next hop \
         (the appliance could serve it), else 0. Announced or not: a servable VIP that is \
         withdrawn is withdrawn for another reason (stopping, not ready, the route not \
         installed)."
    );
    vip_rows(cx, cur, out, budget, f, |v| v.servable)
}

fn vip_announced(cx: &Context<'_>, cur: &mut Cursor, out: &mut Vec<u8>, budget: usize) -> bool {
    let f = family!(
        "sluice_vip_announced",
        Gauge,
        "1 while the VIP's route is in bgp.kernel_table for BIRD to announce, \
         0 while it is withdrawn (`sluice status` says why)."
    );
    vip_rows(cx, cur, out, budget, f, |v| v.announced)
}
