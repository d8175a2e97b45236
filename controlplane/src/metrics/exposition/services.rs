//! Per service: the sums over its backends (always exported, whatever the
//! number of backends), and what the control thread reports of it.

use sluice_core::service::ServiceState;
use sluice_core::stats::WorkerStats;

use super::rows::{sum, Context, Cursor, Rows};
use super::text::{Label, Value};
use crate::metrics::catalog;
use crate::metrics::family::Family;

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

pub(super) fn service_packets(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_PACKETS;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.get(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

pub(super) fn service_bytes(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::SERVICE_BYTES;
    services(cx, cur, out, budget, f, |rows, svc| {
        let n = service_sum(cx, svc, |w, i| w.backend_packets.bytes(i));
        rows.sample(&service_label(svc), Value::Int(n));
    })
}

pub(super) fn service_connections(
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

pub(super) fn service_backends(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
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

pub(super) fn service_unresolved(
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

pub(super) fn service_eligible(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
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

pub(super) fn service_active_pool(
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

pub(super) fn service_pool_flips(
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

pub(super) fn service_build_seconds(
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

pub(super) fn service_table_digest(
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
