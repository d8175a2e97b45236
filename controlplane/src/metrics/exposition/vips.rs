//! Per VIP, with `[bgp]`: whether it is announced, and whether it could be
//! served.

use super::rows::{Context, Cursor, Rows};
use super::text::{Label, Value};
use crate::metrics::catalog;
use crate::metrics::family::Family;

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

pub(super) fn vip_servable(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::VIP_SERVABLE;
    vip_rows(cx, cur, out, budget, f, |v| v.servable)
}

pub(super) fn vip_announced(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
    let f = &catalog::VIP_ANNOUNCED;
    vip_rows(cx, cur, out, budget, f, |v| v.announced)
}
