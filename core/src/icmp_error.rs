//! HA-4: an ICMP or ICMPv6 error sent to a VIP about a packet the VIP
//! sent (a backend's direct reply) is balanced like the flow it quotes —
//! the client's: its rule, its flow hash, its steering owner and, with
//! connection tracking, the backend its entry records. Rare traffic, so
//! these functions are out of line and re-derive the quote from the frame
//! instead of carrying it through the burst.

use std::net::IpAddr;

use crate::conntrack::{self, Addrs, PacketMeta, Shard};
use crate::flow::packet_hash_seeded;
use crate::ids::{BackendId, ServiceId};
use crate::rules::ForwardingRule;
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::stage::Balance;
use crate::time::Millis;
use crate::wire::ethernet::ETHERTYPE_IPV6;
use crate::wire::{self, icmp as icmp_wire, IpInfo, Parsed, Ports};

/// HA-4: when the packet is an ICMP/ICMPv6 error sent to a VIP (`dst`) and
/// quoting a packet that VIP sent (a backend's DSR reply), the service,
/// rule counter slot and hash that balance it like the quoted flow: its rule is the one the client's packets match
/// (quoted destination port = the client's, source port = the VIP's), its
/// hash the quoted header with source and destination (and ports) swapped,
/// which is the client→VIP flow's hash. None: not such an error, or the
/// quoted flow matches no rule; the packet is then handled like any other
/// (an `L3_DEFAULT` rule balances it as a 3-tuple, otherwise no rule).
// Rare (ICMP errors only): out of line, so the TCP/UDP path stays small.
#[cold]
#[inline(never)]
pub(crate) fn steer(
    frame: &[u8],
    error: (u8, u8, bool, usize, usize, IpAddr),
    state: &ForwardingState,
) -> Option<(ServiceId, u16, u64)> {
    let (rule, flow) = quoted_client_flow(frame, error, state)?;
    let service = state.service(rule.service)?;
    Some((
        rule.service,
        rule.counter,
        packet_hash_seeded(state.flow_seed, &flow, service.affinity),
    ))
}

/// HA-4: the rule and the client's flow (the quote with source and
/// destination swapped; only the fields flow hashing and tracking read)
/// of an ICMP error sent to a VIP that quotes a packet the VIP sent.
fn quoted_client_flow<'s>(
    frame: &[u8],
    (protocol, icmp_type, v6, l4_offset, end, dst): (u8, u8, bool, usize, usize, IpAddr),
    state: &'s ForwardingState,
) -> Option<(&'s ForwardingRule, IpInfo)> {
    if !icmp_wire::is_steered_error(protocol, icmp_type) {
        return None;
    }
    let q = icmp_wire::quoted(frame.get(l4_offset..end)?, v6)?;
    // The error goes back to the offending packet's source; anything else
    // is not about a flow of this VIP.
    if q.src != dst {
        return None;
    }
    let rule = state
        .rules
        .lookup(q.src, q.protocol, q.ports.map(|p| p.src))
        .ok()?;
    let client_flow = IpInfo {
        ethertype: 0,
        l3_offset: 0,
        ip_len: 0,
        src: q.dst,
        dst: q.src,
        protocol: q.protocol,
        l4_offset: 0,
        fragment: q.fragment,
        dont_fragment: false,
        ports: q.ports.map(|p| Ports {
            src: p.dst,
            dst: p.src,
        }),
        tcp_flags: 0,
        icmp_type: None,
    };
    Some((rule, client_flow))
}

/// The quoted client flow of a steered ICMP error, re-derived from the
/// frame (stage 2 and steering; rare, so not carried through the burst).
pub(crate) fn quoted_flow_of_frame<'s>(
    frame: &[u8],
    state: &'s ForwardingState,
) -> Option<(&'s ForwardingRule, IpInfo)> {
    let Ok(Parsed::Ip(ip)) = wire::parse(frame) else {
        return None;
    };
    let icmp_type = ip.icmp_type?;
    let end = ip.l3_offset + ip.ip_len;
    let v6 = ip.ethertype == ETHERTYPE_IPV6;
    quoted_client_flow(
        frame,
        (ip.protocol, icmp_type, v6, ip.l4_offset, end, ip.dst),
        state,
    )
}

/// HA-4 with connection tracking: an ICMP error goes to the backend the
/// quoted flow's entry records (the one that sent the quoted packet, even
/// if the table has changed since, CT-7), else where the flow's hash
/// points in the client's zone table. Looks up only: an error neither
/// creates nor refreshes an entry.
#[cold]
#[inline(never)]
pub(crate) fn backend(
    frame: &[u8],
    b: &Balance,
    service: &ServiceState,
    state: &ForwardingState,
    shard: &mut Shard,
    now: Millis,
) -> Option<BackendId> {
    let Some((_, flow)) = quoted_flow_of_frame(frame, state) else {
        return service.table_for(None).and_then(|t| t.lookup(b.hash));
    };
    let by_table = || {
        service
            .table_for_client(&state.zones, flow.src)
            .and_then(|t| t.lookup(b.hash))
    };
    let meta = PacketMeta::of(&flow);
    let addrs = Addrs::new(flow.src, flow.dst);
    let Some(key) = conntrack::session::tracking_key(&meta, &addrs, b.service, service) else {
        return by_table();
    };
    let h = shard.hash(&key);
    let recorded = shard
        .lookup(&key, h, now)
        .and_then(|slot| shard.entry(slot))
        .map(|e| e.backend);
    match recorded {
        Some(id) if state.backend(id).is_some() => Some(id),
        _ => by_table(),
    }
}

/// Steering (one flow, one shard): the tracking key of the flow a steered
/// ICMP error quotes, so that it meets that flow's shard; an untracked
/// flow's 3-tuple key, owned by its address pair as an untracked flow's
/// fragments are.
#[cold]
pub(crate) fn flow_key(
    frame: &[u8],
    b: &Balance,
    state: &ForwardingState,
) -> Option<conntrack::TrackKey> {
    let (_, flow) = quoted_flow_of_frame(frame, state)?;
    let service = state.service(b.service)?;
    let meta = PacketMeta::of(&flow);
    let addrs = Addrs::new(flow.src, flow.dst);
    conntrack::session::tracking_key(&meta, &addrs, b.service, service).or_else(|| {
        let kind = crate::flow::TupleKind::Three;
        Some(conntrack::TrackKey::new(kind, &addrs, &meta, b.service))
    })
}
