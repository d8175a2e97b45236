//! Per backend and VIP under a data-path check (`path = "data"`): the
//! backend's health is its VIPs' probes together, so an operator whose
//! backend went unhealthy reads here which VIP's path broke, and why.

use std::net::IpAddr;

use super::rows::{Context, Cursor, Rows};
use super::text::{Label, Value};
use crate::config::CheckPath;
use crate::health::{probe_key_via, FailureReason, ProbeStatus, Route};
use crate::metrics::catalog;
use crate::metrics::family::Family;

/// Calls `row` with the labels (service, backend, VIP) and the status of
/// each data-path probe of each backend, from the cursor on.
fn data_path_probes(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
    family: &'static Family,
    mut row: impl FnMut(&mut Rows<'_>, [Label<'_>; 3], &ProbeStatus),
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
        let check = svc
            .health_check
            .and_then(|i| cfg.health_checks.get(i))
            .filter(|h| h.path == CheckPath::Data);
        let vips: &[IpAddr] = cfg.probe_vips.get(cur.i).map_or(&[], Vec::as_slice);
        while let Some(backend) = check.and_then(|_| svc.backends.get(cur.j)) {
            if rows.out.len() >= budget {
                return false;
            }
            cur.j += 1;
            let Some(check) = check else { break };
            for &vip in vips {
                let key = probe_key_via(check, backend.address, Route::Data { vip });
                if let Some(status) = view.health.get(&key) {
                    let labels = [
                        Label::Text(&svc.name),
                        Label::Ip(backend.address),
                        Label::Ip(vip),
                    ];
                    row(&mut rows, labels, status);
                }
            }
        }
        cur.i += 1;
        cur.j = 0;
    }
    true
}

pub(super) fn data_path_healthy(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_DATA_PATH_HEALTHY;
    data_path_probes(cx, cur, out, budget, f, |rows, labels, st| {
        rows.sample(&labels, Value::Int(u64::from(st.state.healthy)));
    })
}

pub(super) fn data_path_failures(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::BACKEND_DATA_PATH_FAILURES;
    data_path_probes(cx, cur, out, budget, f, |rows, [s, b, v], st| {
        for r in FailureReason::ALL {
            let n = st.failures[r.index()];
            if n > 0 {
                rows.sample(&[s, b, v, Label::Text(r.name())], Value::Int(n));
            }
        }
    })
}
