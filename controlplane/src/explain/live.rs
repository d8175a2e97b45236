//! `sluice explain` against the running appliance: the request line the
//! client sends over the control socket, and the answer the appliance
//! renders from its published snapshot, its real health, the port MACs it
//! runs with, and the conntrack entry each worker holds for the flow
//! (asked through the workers' mailboxes, answered between bursts).
//!
//! The request is one line: `explain <text|json> <PORT|-> <FLOW>`.

use serde_json::{json, Value};
use sluice_core::conntrack::policy::persists;
use sluice_core::explain::{ConntrackAnswer, Explanation};
use sluice_core::snapshot::ForwardingState;

use super::{packet, render, Explainer};
use crate::config::Config;
use crate::publish::ServiceReport;

/// The control-socket request for `flow` arriving on `port` (None: the
/// first port).
pub fn request_line(json: bool, port: Option<&str>, flow: &str) -> String {
    let format = if json { "json" } else { "text" };
    format!("explain {format} {} {flow}", port.unwrap_or("-"))
}

/// The answer to a request line's arguments (after `explain `), or why
/// it cannot be answered. `conntrack` asks every worker about a frame's
/// flow: (worker, answer) for those that answered.
pub fn answer(
    cfg: &Config,
    state: ForwardingState,
    reports: Vec<ServiceReport>,
    args: &str,
    conntrack: impl FnOnce(&[u8]) -> Vec<(usize, ConntrackAnswer)>,
) -> Result<String, String> {
    let mut words = args.splitn(3, ' ');
    let (Some(format), Some(port), Some(flow)) = (words.next(), words.next(), words.next()) else {
        return Err(format!("malformed explain request {args:?}"));
    };
    let frame = packet::frame_of_flow(flow).map_err(|e| e.to_string())?;
    let ex = Explainer {
        cfg,
        state,
        reports,
        unhealthy: Default::default(),
    };
    let rx_port = match port {
        "-" => 0,
        name => ex
            .port_index(name)
            .ok_or_else(|| format!("no [[dataplane.port]] named {name:?}"))?,
    };
    let e = ex.explain(&frame, rx_port);
    let mut answers = conntrack(&frame);
    answers.sort_by_key(|a| a.0);
    let ct = conntrack_json(&ex, &e, &answers);
    Ok(match format {
        "json" => {
            let mut v = render::json(&ex, &e);
            v["conntrack"] = ct;
            format!("{v}\n")
        }
        _ => render::text(&ex, &e) + &conntrack_text(&ct),
    })
}

/// Which conntrack rule decides a later packet of the flow, given the
/// entry a worker holds.
fn deciding_rule(ex: &Explainer<'_>, e: &Explanation, a: &ConntrackAnswer) -> String {
    let service = e
        .balancing
        .as_ref()
        .and_then(|b| ex.state.service(b.service));
    let (ConntrackAnswer::Present(entry), Some(service)) = (a, service) else {
        return "CT-1: no entry; the next packet takes the table's choice and opens one".into();
    };
    let backend = ex.state.backend(entry.backend);
    let proto = e.flow.as_ref().map_or(0, |f| f.protocol);
    match backend {
        None => "CT-10: the entry's backend is gone; the table decides".into(),
        Some(_) if entry.pool_epoch != service.pool_epoch && !service.drain_on_failover => {
            "CT-11: the pool flipped since the entry was written; the table decides".into()
        }
        Some(b) if !b.healthy => {
            let p = service.tracking.persistence;
            if persists(p, service.tracking.mode, service.affinity, proto) {
                "CT-8: the entry's backend is unhealthy, and the flow persists on it".into()
            } else {
                "CT-8: the entry's backend is unhealthy; the flow is rebalanced by the table".into()
            }
        }
        Some(_) => "CT-3: the entry decides; later packets go to its backend".into(),
    }
}

fn conntrack_json(
    ex: &Explainer<'_>,
    e: &Explanation,
    answers: &[(usize, ConntrackAnswer)],
) -> Value {
    let entries: Vec<Value> = answers
        .iter()
        .filter_map(|(w, a)| match a {
            ConntrackAnswer::Present(entry) => Some(json!({
                "worker": w,
                "backend": ex.state.backend(entry.backend).map(|b| b.address.to_string()),
                "backend_id": entry.backend.0,
                "idle_ms": entry.idle_ms,
                "idle_timeout_ms": entry.idle_timeout_ms,
                "half_open": entry.half_open,
                "pool_epoch": entry.pool_epoch,
                "decides": deciding_rule(ex, e, a),
            })),
            _ => None,
        })
        .collect();
    let tracked = answers
        .iter()
        .any(|(_, a)| *a != ConntrackAnswer::Untracked);
    json!({
        "workers_answered": answers.len(),
        "tracked": tracked,
        "entries": entries,
        "decides": if answers.is_empty() {
            "no worker answered within a second".to_string()
        } else if !tracked {
            "CT-2/CT-4: not tracked; every packet takes the table's choice".to_string()
        } else if entries.is_empty() {
            deciding_rule(ex, e, &ConntrackAnswer::Absent)
        } else {
            String::new()
        },
    })
}

fn conntrack_text(ct: &Value) -> String {
    let mut o = String::new();
    let entries = ct["entries"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        o += &format!(
            "conntrack:     no entry ({} worker(s) asked): {}\n",
            ct["workers_answered"],
            ct["decides"].as_str().unwrap_or("")
        );
    }
    for en in entries {
        o += &format!(
            "conntrack:     worker {}: backend {}, idle {} ms of {} ms{}, pool epoch {}\n               {}\n",
            en["worker"],
            en["backend"].as_str().unwrap_or("(gone)"),
            en["idle_ms"],
            en["idle_timeout_ms"],
            if en["half_open"] == true { ", half-open" } else { "" },
            en["pool_epoch"],
            en["decides"].as_str().unwrap_or("")
        );
    }
    o
}
