//! `sluice explain` against the running appliance: the request the
//! client sends over the control socket, and the answer the appliance
//! renders from a copy of its published snapshot, its real health, the
//! port MACs it runs with, and the conntrack entry each worker holds for
//! each packet's flow (asked through the workers' mailboxes, answered
//! between bursts). `--unhealthy` turns backends unhealthy on that copy
//! only: the running appliance is never changed.
//!
//! The request is one line, `explain ` and a JSON [`Request`]: a flow
//! written on the command line, or the frames of a capture in hex. A
//! request carries at most [`MAX_PACKETS`] frames and
//! [`crate::control_socket::MAX_REQUEST_BYTES`] bytes, so answering one
//! takes bounded memory and time; the client refuses bigger captures
//! before sending anything, the appliance refuses bigger requests.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_core::conntrack::policy::persists;
use sluice_core::explain::{ConntrackAnswer, Explanation};
use sluice_core::snapshot::ForwardingState;

use super::{packet, render, Derived, Explainer};
use crate::config::Config;
use crate::publish::ServiceReport;

/// The most frames one live request explains.
pub const MAX_PACKETS: usize = 1024;

/// What the client asks, after `explain ` on the request line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// JSON documents (true) or text.
    pub json: bool,
    /// The port the packets arrive on (None: the first).
    pub port: Option<String>,
    /// Backends to assume unhealthy, on the copy of the snapshot.
    #[serde(default)]
    pub unhealthy: Vec<IpAddr>,
    /// A flow written as on the command line.
    #[serde(default)]
    pub flow: Option<String>,
    /// Frames of a capture, each in hex.
    #[serde(default)]
    pub frames: Vec<String>,
}

impl Request {
    /// The request line sent over the control socket.
    pub fn line(&self) -> String {
        let body = serde_json::to_string(self).expect("a request serialises");
        format!("explain {body}")
    }

    /// How many packets the answer explains.
    pub fn packets(&self) -> usize {
        if self.flow.is_some() {
            1
        } else {
            self.frames.len()
        }
    }
}

/// `frame` in lower-case hex.
pub fn hex(frame: &[u8]) -> String {
    frame.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    text.as_bytes()
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok().filter(|p| p.len() == 2)?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect()
}

/// The frames a request asks about, or why it cannot be answered.
fn frames_of(req: &Request) -> Result<Vec<Vec<u8>>, String> {
    match (&req.flow, req.frames.is_empty()) {
        (Some(flow), true) => Ok(vec![packet::frame_of_flow(flow).map_err(|e| e.to_string())?]),
        (None, false) if req.frames.len() > MAX_PACKETS => Err(format!(
            "{} packets in one request; the running sluice explains at most {MAX_PACKETS}",
            req.frames.len()
        )),
        (None, false) => req
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| unhex(f).ok_or_else(|| format!("packet {}: not hex", i + 1)))
            .collect(),
        _ => Err("malformed explain request: give either a flow or frames".into()),
    }
}

/// The answer to a request line's arguments (after `explain `), or why
/// it cannot be answered. `conntrack` asks every worker about each
/// frame's flow: per frame, (worker, answer) for those that answered.
///
/// `state` is the published snapshot itself, shared: what an explanation
/// derives from it ([`Derived`]) is kept for the next request on the same
/// snapshot, so a request's cost does not grow with the number of
/// backends (docs/performance.md, "Live explain at 100,000 backends").
pub fn answer(
    cfg: &Config,
    state: Arc<ForwardingState>,
    reports: Arc<Vec<ServiceReport>>,
    args: &str,
    conntrack: impl FnOnce(&[Vec<u8>]) -> Vec<Vec<(usize, ConntrackAnswer)>>,
) -> Result<String, String> {
    let req: Request =
        serde_json::from_str(args).map_err(|e| format!("malformed explain request: {e}"))?;
    let frames = frames_of(&req)?;
    let kept = kept_for(&state);
    let ex = Explainer::assuming(cfg, Arc::clone(&state), reports, &req.unhealthy, kept)
        .map_err(|e| e.to_string())?;
    if req.unhealthy.is_empty() {
        keep(&state, ex.derived());
    }
    let rx_port = match req.port.as_deref() {
        None => 0,
        Some(name) => ex
            .port_index(name)
            .ok_or_else(|| format!("no [[dataplane.port]] named {name:?}"))?,
    };
    let explanations: Vec<Explanation> = frames.iter().map(|f| ex.explain(f, rx_port)).collect();
    let mut answers = conntrack(&frames);
    answers.resize_with(frames.len(), Vec::new);
    let what_if = (!ex.unhealthy.is_empty()).then(|| {
        format!(
            "what if {} were unhealthy: computed on a copy of the published snapshot; \
             the running appliance is unchanged",
            ex.assumed_unhealthy()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let docs = explanations
        .iter()
        .zip(answers.iter_mut())
        .map(|(e, answers)| {
            answers.sort_by_key(|a| a.0);
            let ct = conntrack_json(&ex, e, answers);
            let mut v = render::json(&ex, e);
            let mut text = render::text(&ex, e) + &conntrack_text(&ct);
            v["conntrack"] = ct;
            if let Some(note) = &what_if {
                v["what_if"] = json!(note);
                text += &format!("what-if:       {note}\n");
            }
            (v, text)
        })
        .collect();
    Ok(render::join(docs, req.json))
}

/// The [`Derived`] of the latest snapshot explained without
/// `--unhealthy`, with that snapshot (held weakly: a published snapshot is
/// freed by the control thread, not kept alive here). One per process:
/// every request explains from the one published snapshot.
static LATEST: Mutex<Option<(Weak<ForwardingState>, Arc<Derived>)>> = Mutex::new(None);

/// What was derived from `state` before, if it is the latest explained.
fn kept_for(state: &Arc<ForwardingState>) -> Option<Arc<Derived>> {
    let latest = LATEST.lock().unwrap_or_else(|p| p.into_inner());
    let (snapshot, derived) = latest.as_ref()?;
    let same = snapshot.upgrade().is_some_and(|s| Arc::ptr_eq(&s, state));
    same.then(|| Arc::clone(derived))
}

fn keep(state: &Arc<ForwardingState>, derived: Arc<Derived>) {
    *LATEST.lock().unwrap_or_else(|p| p.into_inner()) = Some((Arc::downgrade(state), derived));
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
