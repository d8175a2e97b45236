//! Stage 2 for the packet nearly all traffic is: a tracked, non-SYN
//! packet of an established flow with a live entry, on a backend the
//! snapshot keeps as it is, reached through a prebuilt outer header. It is
//! decided here in one straight line — the entry, the backend's state, the
//! header, the refresh — without the general stage 2's cases (ICMP errors, untracked and zonal selection, CT-1 SYNs,
//! re-selection, the general encapsulation).
//!
//! Every packet this lane forwards, the general path would forward the
//! same way, and leave the shard the same: a live entry for its key (CT-3)
//! whose backend is present, healthy, not drained past its deadline
//! (CT-10) and of the service's current pool epoch (CT-11) is kept
//! (CT-7), and refreshed (CT-5). Anything else — a SYN, a key absent or
//! expired, a backend that is unhealthy (CT-8 decides), draining past its
//! deadline, gone, or of another pool epoch, a packet the prebuilt header
//! does not fit — returns None with the packet untouched, and the general
//! path decides it from scratch. The shard is untouched too, but for an
//! expired entry the lookup found: it is reclaimed and counted, as the
//! general path's own lookup would have done before finding the key
//! absent, which it then does.

use crate::conntrack::{policy, Entry, Shard, Tracked};
use crate::encap;
use crate::fast_path;
use crate::ids::{BackendId, ServiceId};
use crate::packet::PacketBuf;
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::stage::{Balance, LanePacket, Verdict};
use crate::time::Millis;
use crate::wire::L3Layout;

/// The packet forwarded on its recorded backend, or None (untouched: the
/// general stage 2 decides).
#[inline(always)]
pub(crate) fn forward<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    t: &Tracked,
    state: &ForwardingState,
    shard: &mut Shard,
    now: Millis,
) -> Option<Verdict> {
    // CT-1: a SYN may open a new connection or complete none.
    if policy::is_syn(&b.meta) {
        return None;
    }
    let home = shard.home_of(t.hash);
    shard
        .keep_hit_at(&t.key, t.hash, home, now, |e| {
            forward_found(pkt, &b.layout, t, e, state, now, |_, _| b.hash)
        })
        .map(|(port, backend)| Verdict::Forward { port, backend })
}

/// [`forward`] for a packet the IPv4 fast path left for the lane: never a
/// SYN (stage 1 sent those to the general path), and without its flow
/// hash, which is computed from the frame only for a UDP tunnel's source
/// port. The verdict's port and backend.
#[inline(always)]
pub(crate) fn forward_lane<P: PacketBuf>(
    pkt: &mut P,
    lane: &LanePacket,
    t: &Tracked,
    state: &ForwardingState,
    shard: &mut Shard,
    now: Millis,
) -> Option<(u16, BackendId)> {
    let l3 = usize::from(lane.l3_offset);
    let layout = lane.layout();
    shard.keep_hit_at(&t.key, t.hash, lane.home, now, |e| {
        forward_found(pkt, &layout, t, e, state, now, |frame, service| {
            fast_path::flow_hash(frame, l3, state, service)
        })
    })
}

/// The lane once the lookup found the key's live entry `e`: the port and
/// backend of the packet's `Verdict::Forward`, and the idle timeout the
/// entry is refreshed with (CT-5); None, with the packet untouched, when
/// the general path must decide.
#[inline(always)]
fn forward_found<P: PacketBuf>(
    pkt: &mut P,
    layout: &L3Layout,
    t: &Tracked,
    e: &Entry,
    state: &ForwardingState,
    now: Millis,
    flow_hash: impl FnOnce(&[u8], &ServiceState) -> u64,
) -> Option<((u16, BackendId), u32)> {
    let id = e.backend;
    let service_id = t.key.service();
    // CT-7, CT-8, CT-10, CT-11, decided when the snapshot was built.
    let record = state.lane_backends.get(id)?;
    if !record.keeps(service_id, e.pool_epoch, now) {
        return None;
    }
    let port = match record.header() {
        Some(header) => {
            let hash = if header.takes_flow_hash() {
                flow_hash(pkt.data(), state.service(service_id)?)
            } else {
                0
            };
            if !header.apply(pkt, layout, hash) {
                return None;
            }
            header.port
        }
        None => encapsulate_unbuilt(pkt, *layout, id, service_id, state, flow_hash)?,
    };
    Some(((port, id), record.idle_timeout_ms()))
}

/// A backend without a prebuilt outer header (VXLAN's headers are longer
/// than the ones kept; a tunnel over IPv6): the encapsulation the general
/// path runs, here, instead of that path deciding the packet again (for
/// this lane and the stateless one, `stateless`). None,
/// with the packet untouched, for what the general path handles itself
/// (beyond the MTU, next hop unresolved). Its egress port.
#[inline(never)]
pub(crate) fn encapsulate_unbuilt<P: PacketBuf>(
    pkt: &mut P,
    layout: L3Layout,
    id: BackendId,
    service: ServiceId,
    state: &ForwardingState,
    flow_hash: impl FnOnce(&[u8], &ServiceState) -> u64,
) -> Option<u16> {
    let service = state.service(service)?;
    let backend = state.backend(id)?;
    let port = state.ports.get(usize::from(backend.egress.port))?;
    let encap = service.encapsulation;
    // A UDP tunnel's source port and an IPv6 outer header's flow label
    // come from the flow hash; nothing else reads it.
    let hash = if encap.takes_flow_hash(backend.address) {
        flow_hash(pkt.data(), service)
    } else {
        0
    };
    encap::encapsulate(pkt, layout, encap, backend, port, hash).ok()?;
    Some(backend.egress.port)
}
