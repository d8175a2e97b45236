//! AP-3, the worker's side of fragmentation (`sluice_core::fragment` is the
//! sans-IO side): buffers for the extra fragments come from the mbuf pool,
//! all or none, then every fragment goes onto the egress port's TX lane.
//! Cold: the burst path only gains one match arm.

use super::transmit::TxLane;
use crate::dpdk::{Mbuf, MbufBurst};
use sluice_core::drop_reason::DropReason;
use sluice_core::fragment;
use sluice_core::packet::PacketBuf;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;
use sluice_core::vlan;

/// Splits `m` (a `Verdict::Fragment` for port `out`) to that port's MTU and
/// queues every fragment, first to last. Counts the packet once under
/// `fragmented` and each fragment under `fragments` (each is then counted
/// in `tx_packets` or under `tx_queue_full` like any frame); a packet that
/// cannot be split, or whose buffers the pool cannot supply, is one drop
/// and sends nothing (`fragment_alloc_failed`, or `plan`'s reason).
#[cold]
#[inline(never)]
pub(super) fn send(
    mut m: Mbuf,
    out: usize,
    state: &ForwardingState,
    tx: &mut [TxLane],
    stats: &WorkerStats,
) {
    let (Some(port), Some(lane)) = (state.ports.get(out), tx.get_mut(out)) else {
        stats.count_drop(DropReason::TxQueueFull, 1);
        return;
    };
    let plan = match fragment::plan(m.data(), port.mtu, m.fresh_room()) {
        Ok(plan) => plan,
        Err(reason) => {
            stats.count_drop(reason, 1);
            return;
        }
    };
    let mut extra = MbufBurst::default();
    if plan.extra() > 0 && !extra.alloc_from_pool_of(&m, plan.extra()) {
        stats.count_drop(DropReason::FragmentAllocFailed, 1);
        return;
    }
    if let Err(reason) = fragment::split(&mut m, &plan, extra.iter_mut()) {
        // `m` and the fresh buffers go back to the pool on drop.
        stats.count_drop(reason, 1);
        return;
    }
    // A trunk port's tag goes onto every fragment (each has the headroom
    // of its buffer; all or none, like the buffers).
    if let Some(vid) = port.vlan {
        let tagged = std::iter::once(&mut m)
            .chain(extra.iter_mut())
            .all(|f| vlan::push_tag(f, vid));
        if !tagged {
            stats.count_drop(DropReason::NoHeadroom, 1);
            return;
        }
    }
    if plan.count() > 1 {
        stats.fragmented.add(1);
        stats.fragments.add(plan.count() as u64);
    }
    for f in std::iter::once(m).chain(extra.drain()) {
        lane.queue(f, stats);
    }
}
