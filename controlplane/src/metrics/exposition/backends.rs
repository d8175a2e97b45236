//! Per backend of the running configuration, while it has at most
//! `[metrics] backend_series_limit` backends: its traffic and next hop
//! (from the snapshot), and its health check (from the control thread's
//! view).

use sluice_core::backend::BackendState;
use sluice_core::ids::BackendId;
use sluice_core::service::ServiceState;

use super::rows::{sum, Context, Cursor, Rows};
use super::text::{Label, Value};
use crate::config::{BackendConfig, BackendServiceConfig, HealthCheckConfig, LocalityLbPolicy};
use crate::health::{backend_status, FailureReason, ProbeStatus};
use crate::metrics::catalog;
use crate::metrics::family::Family;

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

pub(super) fn backend_packets(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_PACKETS;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.get(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

pub(super) fn backend_bytes(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_BYTES;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, id, b| {
        let n = sum(cx.workers, |w| w.backend_packets.bytes(id.index()));
        rows.sample(&sb(&svc.name, b), Value::Int(n));
    })
}

pub(super) fn backend_connections(
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

pub(super) fn backend_next_hop(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_NEXT_HOP_RESOLVED;
    snapshot_backends(cx, cur, out, budget, f, |rows, svc, _, b| {
        let v = u64::from(b.egress.next_hop_mac.is_some());
        rows.sample(&sb(&svc.name, b), Value::Int(v));
    })
}

/// A configured backend with a health check and its probe's status.
pub(super) struct Checked<'a> {
    pub svc: &'a BackendServiceConfig,
    pub backend: &'a BackendConfig,
    /// The status deciding its health (`health::backend_status`).
    pub status: &'a ProbeStatus,
    pub check: &'a HealthCheckConfig,
    /// Every probe's status, for the ones of a data-path check's VIPs.
    pub probes: &'a crate::health::ProbeStatuses,
    /// The VIPs its data-path check probes through (none for a direct
    /// check).
    pub vips: &'a [std::net::IpAddr],
}

/// Calls `row` for each health-checked backend of the running
/// configuration that has a probe status, from the cursor on.
pub(super) fn checked_backends(
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
                    check,
                    probes: &view.health,
                    vips: cfg.probe_vips.get(cur.i).map_or(&[], Vec::as_slice),
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

pub(super) fn health_healthy(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_HEALTHY;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        let v = u64::from(c.status.state.healthy);
        rows.sample(&csb(c), Value::Int(v));
    })
}

pub(super) fn health_weight(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_WEIGHT;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(u64::from(c.status.state.weight)));
    })
}

pub(super) fn health_consecutive(
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

pub(super) fn health_transitions(
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

pub(super) fn health_weight_invalid(
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

pub(super) fn health_probes(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_PROBES;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.sample(&csb(c), Value::Int(c.status.probes));
    })
}

pub(super) fn health_failures(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
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

pub(super) fn health_latency(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_PROBE_LATENCY_SECONDS;
    checked_backends(cx, cur, out, budget, f, |rows, c| {
        rows.histogram(&csb(c), c.status);
    })
}
