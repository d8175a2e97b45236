//! The per-packet decision: parse → classify → select → encapsulate.
//! Pure: a function of (bytes, snapshot, worker context). No allocation,
//! no locks, no panics.
//!
//! This first slice selects by consistent hash only; connection tracking
//! (SPEC §3), zonal tables (§6) and ICMP error steering (HA-4) come later.

use std::net::{IpAddr, Ipv6Addr};

use crate::drop_reason::DropReason;
use crate::encap;
use crate::flow::{flow_hash, FlowKey};
use crate::packet::PacketBuf;
use crate::rules::RuleMiss;
use crate::snapshot::{BackendId, ForwardingState, Millis};
use crate::wire::proto::ICMPV6;
use crate::wire::{self, IpInfo, Parsed};

/// What the worker does with a packet after [`process`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) packet on `port`; it went to `backend`.
    Forward { port: u16, backend: BackendId },
    /// Addressed to the appliance itself: hand to the exception path (AP-4).
    Punt,
    /// Drop and count under the reason.
    Drop(DropReason),
}

/// Worker-local state the pipeline may read and update.
#[derive(Debug, Default)]
pub struct PipelineCtx {
    /// Coarse time, read once per burst.
    pub now: Millis,
}

/// Decides what to do with one packet received on `rx_port`, rewriting it in
/// place when it is forwarded.
pub fn process<P: PacketBuf>(
    pkt: &mut P,
    rx_port: u16,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    let _ = (rx_port, &ctx);
    match decide(pkt, state) {
        Ok(v) => v,
        Err(reason) => Verdict::Drop(reason),
    }
}

fn decide<P: PacketBuf>(pkt: &mut P, state: &ForwardingState) -> Result<Verdict, DropReason> {
    let ip = match wire::parse(pkt.data())? {
        Parsed::Arp => return Ok(Verdict::Punt),
        Parsed::Ip(ip) => ip,
    };
    if is_for_appliance(&ip, state) {
        return Ok(Verdict::Punt);
    }
    // FR-4: a non-first fragment has no ports (the parser leaves them out).
    let dst_port = ip.ports.map(|p| p.dst);
    let rule = state
        .rules
        .lookup(ip.dst, ip.protocol, dst_port)
        .map_err(|miss| match miss {
            RuleMiss::NotVip => DropReason::NotForUs,
            RuleMiss::NoRule => DropReason::NoRule,
        })?;
    // A rule naming a missing service is a broken snapshot; there is then
    // no backend to send to, which is what the counter says.
    let service = state.service(rule.service).ok_or(DropReason::NoBackend)?;
    let hash = flow_hash(&FlowKey::for_packet(&ip, service.affinity));
    let id = service
        .table_for(None)
        .and_then(|t| t.lookup(hash))
        .ok_or(DropReason::NoBackend)?;
    let backend = state.backend(id).ok_or(DropReason::NoBackend)?;
    let port = state
        .ports
        .get(usize::from(backend.egress.port))
        .ok_or(DropReason::NextHopUnresolved)?;
    encap::encapsulate(pkt, &ip, service.encapsulation, backend, port, hash)?;
    Ok(Verdict::Forward {
        port: backend.egress.port,
        backend: id,
    })
}

/// AP-4: packets to one of the ports' own addresses, and IPv6 neighbour
/// discovery sent to multicast (solicitations, router advertisements) or to
/// link-local unicast (neighbour unreachability probes to the kernel's
/// link-local address), go to the kernel.
fn is_for_appliance(ip: &IpInfo, state: &ForwardingState) -> bool {
    let own = state.ports.iter().any(|p| match ip.dst {
        IpAddr::V4(a) => p.ipv4 == Some(a),
        IpAddr::V6(a) => p.ipv6 == Some(a),
    });
    own || is_neighbour_discovery(ip)
}

fn is_neighbour_discovery(ip: &IpInfo) -> bool {
    // Router solicitation 133 … redirect 137 (RFC 4861 §4).
    let nd_type = matches!(ip.icmp_type, Some(133..=137));
    let to_link = match ip.dst {
        IpAddr::V6(a) => a.is_multicast() || is_unicast_link_local(a),
        IpAddr::V4(_) => false,
    };
    ip.protocol == ICMPV6 && nd_type && to_link
}

fn is_unicast_link_local(a: Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}
