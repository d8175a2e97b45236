//! Per forwarding rule: the packets that matched it.

use super::rows::{sum, Context, Cursor, Rows};
use super::text::{Label, Value};
use crate::metrics::catalog;

pub(super) fn rule_packets(
    cx: &Context<'_>,
    cur: &mut Cursor,
    out: &mut Vec<u8>,
    budget: usize,
) -> bool {
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
