//! Software steering's lanes (AP-1, [`sluice_core::steering`]): per peer
//! worker, the ring to it and the burst held for it. Tracked packets whose
//! key another worker owns wait here until the peer's ring takes them
//! ([`handover`](super::handover)).

use super::handover::{self, Held};
use crate::dpdk::{Mbuf, MbufBurst, RingConsumer, RingProducer};
use sluice_core::drop_reason::DropReason;
use sluice_core::stats::WorkerStats;
use sluice_core::steering::{Owners, RxPlacement};

/// This worker's rings to and from every other worker (see
/// [`sluice_core::steering`]).
#[derive(Debug)]
pub struct Steering {
    /// Indexed by worker; None at this worker's own index.
    pub to: Vec<Option<RingProducer>>,
    pub from: Vec<RingConsumer>,
    /// Per config port: which of its tracked packets are already at
    /// their owner.
    pub ports: Vec<RxPlacement>,
    /// Who owns a key, for every port alike.
    pub owners: Owners,
}

/// The ring to one peer and the burst held for it.
#[derive(Debug)]
pub(super) struct SteerLane {
    /// None at this worker's own index.
    ring: Option<RingProducer>,
    held: MbufBurst,
}

impl SteerLane {
    pub(super) fn new(ring: Option<RingProducer>) -> Self {
        Self {
            ring,
            held: MbufBurst::default(),
        }
    }

    /// Frees what is still held (the worker is stopping); returns how many.
    pub(super) fn clear(&mut self) -> usize {
        self.held.clear()
    }
}

impl Held for SteerLane {
    #[inline]
    fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Queues a packet for the worker that owns its tracking key. The held
/// burst has room: RX that steers is read only when nothing is held
/// ([`hand_over`]), and an RX burst is at most a held burst's size.
#[inline]
pub(super) fn steer(lanes: &mut [SteerLane], owner: usize, m: Mbuf, stats: &WorkerStats) {
    let Some(SteerLane {
        ring: Some(ring),
        held,
    }) = lanes.get_mut(owner)
    else {
        stats.count_drop(DropReason::SteeringRingFull, 1);
        return;
    };
    if held.push_or_flush(m, |b| send(ring, b, stats)).is_err() {
        stats.count_drop(DropReason::SteeringRingFull, 1);
    }
}

/// Offers what is held for each peer to its ring; true when nothing is
/// held any more (see [`handover`]).
#[inline]
pub(super) fn hand_over(lanes: &mut [SteerLane], stats: &WorkerStats) -> bool {
    handover::hand_over(lanes, |_, lane| match &mut lane.ring {
        Some(ring) => send(ring, &mut lane.held, stats),
        // No ring to that peer (cannot happen: steering only picks other
        // workers, each with a ring).
        None => {
            let n = lane.held.clear() as u64;
            stats.count_drop(DropReason::SteeringRingFull, n);
        }
    })
}

/// Hands a burst to another worker's ring; what does not fit stays in
/// `burst`, in order, for the next poll (backpressure, [`handover`]).
#[inline]
fn send(ring: &mut RingProducer, burst: &mut MbufBurst, stats: &WorkerStats) {
    let sent = ring.enqueue(burst) as u64;
    stats.steered_out.add(sent);
}
