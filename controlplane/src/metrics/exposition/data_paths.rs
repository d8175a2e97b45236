//! Per backend and VIP under a data-path check (`path = "data"`): the
//! backend's health is its VIPs' probes together, so an operator whose
//! backend went unhealthy reads here which VIP's path broke, and why.

use super::backends::checked_backends;
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
    checked_backends(cx, cur, out, budget, family, |rows, c| {
        if c.check.path != CheckPath::Data {
            return;
        }
        for &vip in c.vips {
            let key = probe_key_via(c.check, c.backend.address, Route::Data { vip });
            if let Some(status) = c.probes.get(&key) {
                let labels = [
                    Label::Text(&c.svc.name),
                    Label::Ip(c.backend.address),
                    Label::Ip(vip),
                ];
                row(rows, labels, status);
            }
        }
    })
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
