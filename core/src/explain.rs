//! Why a packet goes where it goes: the packet path's own decision for one
//! frame, with the intermediate answers an operator asks about (rule,
//! hashed fields, flow hash, table, Maglev slot, every backend's state).
//!
//! Read-only over a snapshot and pure: the verdict comes from
//! [`crate::pipeline::process`] run on a copy of the frame with a fresh
//! worker context, and every intermediate answer from the functions the
//! pipeline itself calls (`classify`, `RuleTable::lookup`,
//! `ServiceState::table_for_client`, `MaglevTable::slot_index`), so the
//! explanation cannot drift from what the dataplane does with a packet
//! that opens a flow. What a worker's conntrack entry changes for a later
//! packet is that worker's to say (its shard is not read here).

use std::net::IpAddr;

use crate::affinity::SessionAffinity;
use crate::backend::BackendState;
use crate::conntrack::session::quic_connection_stays;
use crate::flow::{tuple_kind, TupleKind};
use crate::ids::{BackendId, ServiceId};
use crate::packet::{PacketBuf, VecPacket};
use crate::pipeline::{classify, process, PipelineCtx};
use crate::quic_lb::{Decision, Fallback, ServerId};
use crate::rules::RuleMiss;
use crate::snapshot::ForwardingState;
use crate::stage::{QuicAt, Stage, Verdict};
use crate::time::Millis;
use crate::wire::{self, Parsed};

/// The packet's fields the decision reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: u8,
    /// (source, destination); None for portless packets and non-first
    /// fragments.
    pub ports: Option<(u16, u16)>,
    pub fragmented: bool,
    pub(crate) tcp_flags: u8,
}

/// Which rule took the packet, or why none did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleOutcome {
    Matched {
        name: String,
        service: ServiceId,
    },
    Missed(RuleMiss),
    /// The frame is no IP packet for a rule (ARP, or unparsable).
    NotIp,
}

/// One backend of the service, as the snapshot holds it.
#[derive(Clone, Debug)]
pub struct BackendLine {
    pub state: BackendState,
    /// Slots the chosen table gives it (0: not eligible for new flows).
    pub slots_in_table: usize,
}

/// The balancing part of the decision (a packet some rule took).
#[derive(Clone, Debug)]
pub struct Balancing {
    pub service: ServiceId,
    pub affinity: SessionAffinity,
    pub tuple: TupleKind,
    pub hash: u64,
    /// Whether connection tracking applies to the packet (CT-2, CT-4).
    pub tracked: bool,
    /// The client's zone, when the service has zonal tables (ZA-3).
    pub zone: Option<u16>,
    /// Index into `ServiceState::tables` (0: the no-zone table).
    pub table: usize,
    pub table_len: usize,
    pub slot: Option<usize>,
    pub slot_owner: Option<BackendId>,
    pub backends: Vec<BackendLine>,
    /// A UDP packet of a QUIC-LB service: what its connection ID said.
    pub quic: Option<QuicExplained>,
}

/// The QUIC-LB decoding of a packet, and what came of it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QuicExplained {
    /// The config rotation bits, once a connection ID was found.
    pub config_id: Option<u8>,
    /// The server ID and its length in bytes, once a configuration
    /// decoded it.
    pub server_id: Option<(ServerId, u8)>,
    /// The backend it was routed to, or why it took the ordinary path.
    pub outcome: Result<BackendId, Fallback>,
}

/// The whole decision for one frame.
#[derive(Clone, Debug)]
pub struct Explanation {
    pub rx_port: u16,
    pub flow: Option<Flow>,
    /// An ICMP error about a VIP flow (HA-4): the client's flow its
    /// quoted packet belongs to (client to VIP), which it is balanced as.
    pub quoted: Option<Flow>,
    pub rule: RuleOutcome,
    pub balancing: Option<Balancing>,
    /// The pipeline's verdict for the frame opening its flow.
    pub verdict: Verdict,
    /// The frame as the pipeline rewrote it (what leaves the port).
    pub output: Vec<u8>,
}

/// Explains what the packet path does with `frame` received on `rx_port`
/// (config index) under `state`, as the first packet of its flow.
pub fn explain(frame: &[u8], rx_port: u16, state: &ForwardingState) -> Explanation {
    let mut pkt = VecPacket::new(frame);
    let mut ctx = PipelineCtx::new(64);
    let verdict = process(&mut pkt, rx_port, state, &mut ctx);
    let output = pkt.data().to_vec();
    let Ok(Parsed::Ip(ip)) = wire::parse(frame) else {
        return Explanation {
            rx_port,
            flow: None,
            quoted: None,
            rule: RuleOutcome::NotIp,
            balancing: None,
            verdict,
            output,
        };
    };
    let flow = Flow {
        src: ip.src,
        dst: ip.dst,
        protocol: ip.protocol,
        ports: ip.ports.map(|p| (p.src, p.dst)),
        fragmented: ip.fragment.is_fragmented(),
        tcp_flags: ip.tcp_flags,
    };
    // HA-4: an ICMP error about a VIP flow takes that flow's rule and is
    // hashed as that flow.
    let quoted = crate::icmp_error::quoted_flow_of_frame(frame, state).map(|(r, q)| {
        let f = Flow {
            src: q.src,
            dst: q.dst,
            protocol: q.protocol,
            ports: q.ports.map(|p| (p.src, p.dst)),
            fragmented: q.fragment.is_fragmented(),
            tcp_flags: 0,
        };
        (r, f)
    });
    let rule = match quoted.as_ref().map(|(r, _)| Ok(*r)).unwrap_or_else(|| {
        state
            .rules
            .lookup(ip.dst, ip.protocol, ip.ports.map(|p| p.dst))
    }) {
        Ok(r) => RuleOutcome::Matched {
            name: r.name.clone(),
            service: r.service,
        },
        Err(miss) => RuleOutcome::Missed(miss),
    };
    let quoted = quoted.map(|(_, f)| f);
    let hashed = quoted.as_ref().unwrap_or(&flow);
    let balancing = match classify(frame, state) {
        Stage::Balance(b) => balancing(&b, hashed, state).map(|mut out| {
            out.quic = quic(&b, frame, state, ctx.now);
            out
        }),
        Stage::Done(_) => None,
    };
    Explanation {
        rx_port,
        flow: Some(flow),
        quoted,
        rule,
        balancing,
        verdict,
        output,
    }
}

/// What a QUIC-LB packet's connection ID says and what stage 2 makes of
/// it (`pipeline::select_quic`'s decision, at `now`).
fn quic(
    b: &crate::stage::Balance,
    frame: &[u8],
    state: &ForwardingState,
    now: Millis,
) -> Option<QuicExplained> {
    if b.quic == QuicAt::NONE {
        return None;
    }
    let service = state.service(b.service)?;
    let routing = service.quic_lb.as_deref()?;
    let payload = b.quic.payload(frame, &b.layout);
    let decoded = routing.decode(payload);
    let length = |config: u8| {
        routing
            .configs
            .get(usize::from(config))
            .and_then(Option::as_ref)
            .map(|c| c.codec.lengths().server_id)
    };
    let server_id = decoded.server_id.zip(decoded.config_id.and_then(length));
    let outcome = match decoded.decision {
        Decision::Routed(server) => quic_connection_stays(server, service, state, now),
        Decision::Fallback(reason) => Err(reason),
    };
    Some(QuicExplained {
        config_id: decoded.config_id,
        server_id,
        outcome,
    })
}

fn balancing(b: &crate::stage::Balance, flow: &Flow, state: &ForwardingState) -> Option<Balancing> {
    let service = state.service(b.service)?;
    let zone = if service.tables.len() > 1 {
        state.zones.zone_of(flow.src)
    } else {
        None
    };
    let table = service.table_for_client(&state.zones, flow.src);
    // The index `ServiceState::table_for` reads for this zone.
    let table_index = zone
        .map(|z| 1 + usize::from(z))
        .filter(|&i| i < service.tables.len())
        .unwrap_or(0);
    let slot = table.and_then(|t| t.slot_index(b.hash));
    let slot_owner = table.and_then(|t| t.lookup(b.hash));
    let backends = service
        .backends
        .iter()
        .filter_map(|&id| state.backend(id))
        .map(|s| BackendLine {
            state: s.clone(),
            slots_in_table: table.map_or(0, |t| t.slots.iter().filter(|&&o| o == s.id).count()),
        })
        .collect();
    Some(Balancing {
        service: b.service,
        affinity: service.affinity,
        tuple: tuple_kind(
            service.affinity,
            flow.protocol,
            flow.ports.is_some(),
            flow.fragmented,
        ),
        hash: b.hash,
        tracked: b.tracked,
        zone,
        table: table_index,
        table_len: table.map_or(0, |t| t.slots.len()),
        slot,
        slot_owner,
        backends,
        quic: None,
    })
}

/// What a worker's conntrack shard holds for a frame's flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ConntrackAnswer {
    /// The packet is not tracked (no rule, or CT-2/CT-4: the service does
    /// not track its protocol).
    Untracked,
    /// Tracked, and this shard holds no live entry for its key.
    Absent,
    Present(ConntrackEntry),
}

/// A live conntrack entry as an operator reads it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConntrackEntry {
    pub backend: BackendId,
    /// Since the last packet that matched it.
    pub idle_ms: u64,
    pub idle_timeout_ms: u32,
    /// Written by a SYN, no later packet of the connection seen yet.
    pub half_open: bool,
    /// The service's pool epoch when it was written (CT-11).
    pub pool_epoch: u32,
}

/// The entry `shard` holds for `frame`'s flow, built with the key and hash
/// the pipeline's own functions give it (`classify`, `tracking_key`,
/// `Shard::hash`). Called by the worker that owns the shard, between
/// bursts: a lookup reclaims an expired entry (CT-5) as the pipeline's
/// would, and changes nothing else.
pub fn conntrack_entry(
    frame: &[u8],
    state: &ForwardingState,
    shard: &mut crate::conntrack::Shard,
    now: crate::time::Millis,
) -> ConntrackAnswer {
    let Stage::Balance(b) = classify(frame, state) else {
        return ConntrackAnswer::Untracked;
    };
    let Some(service) = state.service(b.service) else {
        return ConntrackAnswer::Untracked;
    };
    let Some(addrs) = crate::conntrack::Addrs::from_frame(frame, &b.layout) else {
        return ConntrackAnswer::Untracked;
    };
    if !b.tracked {
        return ConntrackAnswer::Untracked;
    }
    let Some(key) = crate::conntrack::tracking_key(&b.meta, &addrs, b.service, service) else {
        return ConntrackAnswer::Untracked;
    };
    let h = shard.hash(&key);
    match shard.lookup(&key, h, now).and_then(|s| shard.entry(s)) {
        Some(e) => ConntrackAnswer::Present(ConntrackEntry {
            backend: e.backend,
            idle_ms: now.0.saturating_sub(e.last_seen().0),
            idle_timeout_ms: e.idle_timeout_ms,
            half_open: e.is_half_open(),
            pool_epoch: e.pool_epoch,
        }),
        None => ConntrackAnswer::Absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::ForwardingState;

    /// A frame with no rule is untracked; the explanation of a non-IP
    /// frame says so (FR-1).
    #[test]
    fn untracked_without_a_rule() {
        let state = ForwardingState::default();
        let mut shard = crate::conntrack::Shard::with_capacity(16);
        let frame = [0u8; 60];
        assert_eq!(
            conntrack_entry(&frame, &state, &mut shard, crate::time::Millis(0)),
            ConntrackAnswer::Untracked
        );
        assert_eq!(explain(&frame, 0, &state).rule, RuleOutcome::NotIp);
    }
}
