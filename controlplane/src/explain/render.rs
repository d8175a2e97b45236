//! `sluice explain`'s output: text for a person, JSON (`--json`) for a
//! program, both from the same [`Decision`] lines.

use std::fmt::Write as _;

use serde_json::{json, Value};
use sluice_core::backend::Pool;
use sluice_core::explain::{BackendLine, Balancing, Explanation, Flow, QuicExplained, RuleOutcome};
use sluice_core::flow::TupleKind;
use sluice_core::rules::RuleMiss;
use sluice_core::stage::Verdict;

use super::{BackendLines, Eligibility, Explainer};

fn protocol_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        p => format!("ip proto {p}"),
    }
}

fn endpoint(ip: std::net::IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

fn hashed_fields(t: TupleKind) -> &'static str {
    match t {
        TupleKind::Two => "client IP, VIP",
        TupleKind::Three => "client IP, VIP, protocol",
        TupleKind::Five => "client IP, client port, protocol, VIP, VIP port",
    }
}

fn rule_text(r: &RuleOutcome, flow: Option<&Flow>) -> String {
    match r {
        RuleOutcome::Matched { name, .. } => format!("{name:?}"),
        RuleOutcome::Missed(RuleMiss::NotVip) => {
            "none: the destination is no VIP (for the appliance itself: the kernel, else dropped as not_for_us)".into()
        }
        RuleOutcome::Missed(RuleMiss::NoRule) => format!(
            "none: the destination is a VIP, but {} (dropped as no_rule)",
            flow.map_or_else(|| "no rule takes it".into(), no_rule_why)
        ),
        RuleOutcome::NotIp => "none: not an IP packet".into(),
    }
}

/// Which rule would take a packet no rule of its VIP takes (FR-1, FR-4).
fn no_rule_why(f: &Flow) -> String {
    match (f.protocol, f.ports) {
        (6 | 17, Some((_, port))) => format!(
            "no {} rule takes port {port} and no L3_DEFAULT rule takes the VIP",
            protocol_name(f.protocol).to_uppercase()
        ),
        // A non-first fragment carries no ports (FR-4).
        (6 | 17, None) => format!(
            "a non-first fragment carries no port: only a {} rule over ALL ports or an \
             L3_DEFAULT rule takes it (FR-4), and the VIP has neither",
            protocol_name(f.protocol).to_uppercase()
        ),
        _ => format!(
            "{} is neither TCP nor UDP: only an L3_DEFAULT rule takes it, and the VIP has none",
            protocol_name(f.protocol)
        ),
    }
}

/// Why a backend can or cannot take a new flow from this client.
fn eligibility(
    ex: &Explainer<'_>,
    b: &Balancing,
    line: &BackendLine,
    active: Option<Pool>,
) -> String {
    let s = &line.state;
    match super::eligibility(line, active, b.zone.is_some()) {
        Eligibility::Eligible => {
            format!("eligible: {} of {} slots", line.slots_in_table, b.table_len)
        }
        Eligibility::Draining => {
            "not eligible: draining (removed from the configuration; its connections keep working)"
                .into()
        }
        Eligibility::Unhealthy => {
            let assumed = if ex.unhealthy.contains(&s.address) {
                " (--unhealthy)"
            } else {
                ""
            };
            format!("not eligible: unhealthy{assumed}")
        }
        Eligibility::WeightZero => "not eligible: weight 0".into(),
        Eligibility::InactivePool => format!(
            "not eligible: in the {} pool, which is not active",
            pool_name(s.pool)
        ),
        Eligibility::OtherZone => "not eligible: not in the client's zone table".into(),
        Eligibility::NotInTable => "not eligible: not in the table".into(),
    }
}

/// The service's backends counted by eligibility, and which of them are
/// listed when not all are.
fn backend_counts(lines: &BackendLines) -> Value {
    let mut counts = serde_json::Map::new();
    for kind in Eligibility::ALL {
        counts.insert(kind.key().into(), json!(lines.counts[kind as usize]));
    }
    json!({
        "total": lines.total,
        "listed": lines.listed.len(),
        "all_listed": lines.all_listed,
        "by_eligibility": counts,
    })
}

fn pool_name(p: Pool) -> &'static str {
    match p {
        Pool::Primary => "primary",
        Pool::Failover => "failover",
    }
}

fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Forward { .. } => "forward".into(),
        Verdict::Fragment { .. } => "forward in fragments".into(),
        Verdict::Punt => "to the kernel (exception path)".into(),
        Verdict::Reply => "answered to the client (ICMP too big)".into(),
        Verdict::Drop(r) => format!("drop ({})", r.name()),
        Verdict::Hold => "held for its datagram's first fragment (fragments = follow_flow)".into(),
    }
}

/// The explanation as JSON.
pub fn json(ex: &Explainer<'_>, e: &Explanation) -> Value {
    let state = &ex.state;
    let port = |i: u16| state.ports.get(usize::from(i)).map(|p| p.name.clone());
    let flow = e.flow.as_ref().map(|f| {
        json!({
            "protocol": protocol_name(f.protocol),
            "src": endpoint(f.src, f.ports.map(|p| p.0)),
            "dst": endpoint(f.dst, f.ports.map(|p| p.1)),
            "fragmented": f.fragmented,
        })
    });
    let rule = match &e.rule {
        RuleOutcome::Matched { name, .. } => json!({"matched": name}),
        _ => json!({"matched": null, "why": rule_text(&e.rule, e.flow.as_ref())}),
    };
    let quoted = e.quoted.as_ref().map(|f| {
        json!({
            "protocol": protocol_name(f.protocol),
            "src": endpoint(f.src, f.ports.map(|p| p.0)),
            "dst": endpoint(f.dst, f.ports.map(|p| p.1)),
            "fragmented": f.fragmented,
        })
    });
    let balancing = e.balancing.as_ref().map(|b| {
        let svc = state.service(b.service);
        let report = ex.reports.get(usize::from(b.service.0));
        let active = report.and_then(|r| r.active_pool);
        let backends: Vec<Value> = b
            .backends
            .iter()
            .map(|l| {
                json!({
                    "address": l.state.address.to_string(),
                    "id": l.state.id.0,
                    "healthy": l.state.healthy,
                    "weight": l.state.weight,
                    "pool": pool_name(l.state.pool),
                    "draining": l.state.draining_until.is_some(),
                    "slots": l.slots_in_table,
                    "eligibility": eligibility(ex, b, l, active),
                })
            })
            .collect();
        json!({
            "service": svc.map(|s| s.name.clone()),
            "affinity": b.affinity.config_name(),
            "hashed_fields": hashed_fields(b.tuple),
            "flow_hash": format!("{:#018x}", b.hash),
            "tracked": b.tracked,
            "tracking_mode": svc.map(|s| s.tracking.mode.config_name()),
            "zone": b.zone.and_then(|z| state.zones.zones.get(usize::from(z))).map(|z| z.name.clone()),
            "table": b.table,
            "table_size": b.table_len,
            "active_pool": active.map(pool_name),
            "pool_epoch": report.map(|r| r.pool_epoch),
            "slot": b.slot,
            "slot_owner": b.slot_owner.and_then(|id| state.backend(id)).map(|s| s.address.to_string()),
            "encapsulation": svc.map(|s| s.encapsulation.name()),
            "backends": backends,
            "backend_counts": backend_counts(&ex.backend_lines(b)),
            "quic_lb": b.quic.map(|q| quic_json(ex, &q)),
        })
    });
    let (backend, out_port) = match e.verdict {
        Verdict::Forward { port, backend } | Verdict::Fragment { port, backend } => (
            state.backend(backend).map(|b| b.address.to_string()),
            Some(port),
        ),
        _ => (None, None),
    };
    let forwarded = out_port.is_some();
    json!({
        "ingress_port": port(e.rx_port),
        "flow": flow,
        "icmp_error_about": quoted,
        "rule": rule,
        "balancing": balancing,
        "verdict": verdict_text(&e.verdict),
        "backend": backend,
        "egress_port": out_port.and_then(port),
        "next_hop_mac": forwarded.then(|| crate::config::mac_text(e.output.get(..6).unwrap_or(&[]))),
        "output_bytes": e.output.len(),
        "mtu": mtu_text(ex, e),
        "assumed_unhealthy": ex
            .assumed_unhealthy()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
    })
}

/// The QUIC-LB decoding: config id, server ID (hex, its configured
/// length), and the backend it routed to or the reason it fell back.
fn quic_json(ex: &Explainer<'_>, q: &QuicExplained) -> Value {
    let server_id = q.server_id.map(|(id, len)| {
        let digits = usize::from(len) * 2;
        format!("{id:0digits$x}")
    });
    let (routed_to, fallback) = match q.outcome {
        Ok(id) => (ex.state.backend(id).map(|b| b.address.to_string()), None),
        Err(reason) => (None, Some(reason.name())),
    };
    json!({
        "config_id": q.config_id,
        "server_id": server_id,
        "routed_to": routed_to,
        "fallback": fallback,
    })
}

fn quic_text(q: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    };
    let found = match (&q["config_id"], &q["server_id"]) {
        (Value::Null, _) => "no connection ID".to_string(),
        (c, Value::Null) => format!("config {}", s(c)),
        (c, sid) => format!("config {}, server ID {}", s(c), s(sid)),
    };
    if q["fallback"].is_null() {
        format!(
            "{found} -> {}: routed by its connection ID (no conntrack; the table below is not consulted)",
            s(&q["routed_to"])
        )
    } else {
        format!(
            "{found}: not routable ({}), the ordinary path below decides",
            s(&q["fallback"])
        )
    }
}

fn mtu_text(ex: &Explainer<'_>, e: &Explanation) -> Option<String> {
    let (port, what) = match e.verdict {
        Verdict::Forward { port, .. } => (port, "fits"),
        Verdict::Fragment { port, .. } => (port, "exceeds it: fragmented (IPv4 without DF)"),
        Verdict::Reply => (
            e.rx_port,
            "exceeds the egress MTU: the client is told the path MTU",
        ),
        _ => return None,
    };
    let p = ex.state.ports.get(usize::from(port))?;
    Some(format!(
        "{} bytes out, port MTU {}: {what}",
        e.output.len().saturating_sub(14),
        p.mtu
    ))
}

/// The explanation as text, one fact a line.
pub fn text(ex: &Explainer<'_>, e: &Explanation) -> String {
    let v = json(ex, e);
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    };
    let mut o = String::new();
    let flow = &v["flow"];
    if flow.is_null() {
        let _ = writeln!(o, "packet:        not IP");
    } else {
        let _ = writeln!(
            o,
            "packet:        {} {} -> {}{}",
            s(&flow["protocol"]),
            s(&flow["src"]),
            s(&flow["dst"]),
            if flow["fragmented"] == true {
                " (fragment)"
            } else {
                ""
            }
        );
    }
    let q = &v["icmp_error_about"];
    if !q.is_null() {
        let _ = writeln!(
            o,
            "icmp error:    about the client's flow {} {} -> {} (its quoted packet, reversed): \
             balanced as that flow (HA-4)",
            s(&q["protocol"]),
            s(&q["src"]),
            s(&q["dst"]),
        );
    }
    let _ = writeln!(o, "ingress port:  {}", s(&v["ingress_port"]));
    let assumed = ex.assumed_unhealthy();
    if !assumed.is_empty() {
        let list: Vec<String> = assumed.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            o,
            "assumed:       {} unhealthy (--unhealthy)",
            list.join(", ")
        );
    }
    let _ = writeln!(o, "rule:          {}", rule_text(&e.rule, e.flow.as_ref()));
    let b = &v["balancing"];
    if !b.is_null() {
        let _ = writeln!(o, "service:       {}", s(&b["service"]));
        let _ = writeln!(
            o,
            "affinity:      {} (hashes {})",
            s(&b["affinity"]),
            s(&b["hashed_fields"])
        );
        if !b["quic_lb"].is_null() {
            let _ = writeln!(o, "quic-lb:       {}", quic_text(&b["quic_lb"]));
        }
        let _ = writeln!(o, "flow hash:     {}", s(&b["flow_hash"]));
        let _ = writeln!(
            o,
            "tracking:      {} ({})",
            if b["tracked"] == true {
                "tracked: a new flow takes the table's choice, a later packet its conntrack entry's"
            } else {
                "not tracked: every packet takes the table's choice"
            },
            s(&b["tracking_mode"])
        );
        let zone = if b["zone"].is_null() {
            "no zone".to_string()
        } else {
            format!("zone {}", s(&b["zone"]))
        };
        let _ = writeln!(
            o,
            "table:         #{} ({zone}), {} slots, active pool {} (epoch {})",
            s(&b["table"]),
            s(&b["table_size"]),
            s(&b["active_pool"]),
            s(&b["pool_epoch"])
        );
        let _ = writeln!(
            o,
            "maglev slot:   {} -> {}",
            s(&b["slot"]),
            s(&b["slot_owner"])
        );
        let counts = &b["backend_counts"];
        if counts["all_listed"] == false {
            let by = &counts["by_eligibility"];
            let mut parts = vec![format!("{} eligible", s(&by["eligible"]))];
            for kind in &Eligibility::ALL[1..] {
                let n = by[kind.key()].as_u64().unwrap_or(0);
                if n > 0 {
                    parts.push(format!("{n} {}", kind.key().replace('_', " ")));
                }
            }
            let _ = writeln!(
                o,
                "backends:      {} in all: {}; listed: the slot's owner, then up to {} \
                 not eligible (`sluice status` lists every one)",
                s(&counts["total"]),
                parts.join(", "),
                super::LISTED - 1
            );
        } else {
            let _ = writeln!(o, "backends:");
        }
        for l in b["backends"].as_array().into_iter().flatten() {
            let _ = writeln!(
                o,
                "  {:<24} id {:<5} {:<9} weight {:<4} {:<8} {}",
                s(&l["address"]),
                s(&l["id"]),
                if l["healthy"] == true {
                    "healthy"
                } else {
                    "unhealthy"
                },
                s(&l["weight"]),
                s(&l["pool"]),
                s(&l["eligibility"])
            );
        }
        let _ = writeln!(o, "encapsulation: {}", s(&b["encapsulation"]));
    }
    let _ = writeln!(o, "verdict:       {}", s(&v["verdict"]));
    if !v["backend"].is_null() {
        let _ = writeln!(o, "backend:       {}", s(&v["backend"]));
        let _ = writeln!(
            o,
            "next hop:      {} via port {}",
            s(&v["next_hop_mac"]),
            s(&v["egress_port"])
        );
        let _ = writeln!(o, "mtu:           {}", s(&v["mtu"]));
        // What explain shows is the appliance's decision; whether the
        // backend takes the packet and answers is the doctor's to check.
        let _ = writeln!(
            o,
            "path:          `sluice doctor` checks this backend's path (tunnel, VIP on \
             the backend, answer, MTU)"
        );
    } else if !v["mtu"].is_null() {
        let _ = writeln!(o, "mtu:           {}", s(&v["mtu"]));
    }
    o
}

/// Several packets' documents, each (JSON, text), as `sluice explain`
/// prints them: with `json` one document a line, numbered by
/// `packet_index` (from 0); else the texts, headed `# packet N` (from 1)
/// when there are several.
pub fn join(docs: Vec<(Value, String)>, json: bool) -> String {
    let several = docs.len() > 1;
    let mut o = String::new();
    for (i, (mut v, text)) in docs.into_iter().enumerate() {
        if json {
            v["packet_index"] = json!(i);
            let _ = writeln!(o, "{v}");
        } else {
            if several {
                let _ = writeln!(o, "# packet {}", i + 1);
            }
            o += &text;
        }
    }
    o
}
