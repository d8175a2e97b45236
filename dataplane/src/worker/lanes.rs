//! A worker's output lanes: where the burst path puts each packet once its
//! outcome is known — a TX lane per port, an exception lane per port with
//! a TAP (AP-4), a steering lane per peer worker (AP-1), and the burst's
//! free list of dropped packets. Packets wait in their lane's burst and
//! leave in bursts: when one is full, and at the end of every poll
//! ([`Lanes::flush`]).

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::exception::{ExceptionLane, ExceptionPath};
use super::fragments;
use super::steering::{self, SteerLane};
use super::transmit::TxLane;
use crate::dpdk::{Mbuf, MbufBurst, RingProducer, TxQueue};
use sluice_core::drop_reason::DropReason;
use sluice_core::probe_path::ProbeTable;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

/// Every lane of one worker, and the counters they count in.
#[derive(Debug)]
pub(super) struct Lanes {
    /// Per config port.
    tx: Vec<TxLane>,
    /// Per config port; None: the port has no TAP.
    exception: Vec<Option<ExceptionLane>>,
    /// Per worker (this one's without a ring); empty without steering.
    steer: Vec<SteerLane>,
    /// This burst's dropped packets, freed together at its end: a flood
    /// of unwanted packets costs one mempool put per burst.
    dropped: MbufBurst,
    /// Data-path probe sockets: whose packets from the kernel leave
    /// encapsulated, and whose answers are noted on the way to it.
    probes: Arc<ProbeTable>,
    stats: Arc<CachePadded<WorkerStats>>,
}

impl Lanes {
    /// The lanes over a worker's TX queues, TAP queues and rings to its
    /// peers (`to`: indexed by worker, empty without steering).
    pub(super) fn new(
        tx: Vec<TxQueue>,
        exception: Vec<Option<ExceptionPath>>,
        to: Vec<Option<RingProducer>>,
        probes: Arc<ProbeTable>,
        stats: Arc<CachePadded<WorkerStats>>,
    ) -> Self {
        Self {
            tx: tx
                .into_iter()
                .enumerate()
                .map(|(port, q)| TxLane::new(q, port))
                .collect(),
            exception: exception
                .into_iter()
                .enumerate()
                .map(|(port, q)| Some(ExceptionLane::new(q?, port)))
                .collect(),
            steer: to.into_iter().map(SteerLane::new).collect(),
            dropped: MbufBurst::default(),
            probes,
            stats,
        }
    }

    #[inline]
    pub(super) fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Workers steered between (0: no steering).
    #[inline]
    pub(super) fn workers(&self) -> usize {
        self.steer.len()
    }

    /// Queues a frame on a port's TX lane. Always inlined: the burst loop
    /// queues from two places (the established lane's packets and the
    /// others'), and a call would cost as much as the queueing.
    #[inline(always)]
    pub(super) fn transmit(&mut self, port: usize, m: Mbuf) {
        match self.tx.get_mut(port) {
            Some(lane) => lane.queue(m, &self.stats),
            None => self.stats.count_drop(DropReason::TxQueueFull, 1),
        }
    }

    /// AP-3: splits an oversize packet to `port`'s MTU onto its TX lane.
    #[inline]
    pub(super) fn fragment(&mut self, port: usize, m: Mbuf, state: &ForwardingState) {
        fragments::send(m, port, state, &mut self.tx, &self.stats);
    }

    /// AP-4: hands a packet for the appliance to `port`'s TAP, or drops it
    /// (counted) when the port has no exception path. An answer to a
    /// data-path probe is noted on the way.
    #[inline]
    pub(super) fn punt(&mut self, port: usize, m: Mbuf, state: &ForwardingState) {
        if self.probes.is_active() {
            super::probes::note_answer(&m, state, &self.probes);
        }
        match self.exception.get_mut(port) {
            Some(Some(lane)) => lane.punt(m, &self.stats),
            _ => self.stats.count_drop(DropReason::NoExceptionPath, 1),
        }
    }

    /// AP-1: queues a tracked packet for the worker that owns its key.
    #[inline]
    pub(super) fn steer(&mut self, owner: usize, m: Mbuf) {
        steering::steer(&mut self.steer, owner, m, &self.stats);
    }

    /// Counts a drop; the packet joins the burst's free list.
    #[inline]
    pub(super) fn discard(&mut self, reason: DropReason, m: Mbuf) {
        self.stats.count_drop(reason, 1);
        let _ = self.dropped.push_or_flush(m, |b| {
            b.clear();
        });
    }

    /// End of a burst: its dropped packets go back to the pool together.
    #[inline]
    pub(super) fn free_dropped(&mut self) {
        self.dropped.clear();
    }

    /// Offers what is held for each peer to its ring; true when nothing
    /// is held any more, and only then may RX that steers be read.
    #[inline]
    pub(super) fn hand_over_steered(&mut self) -> bool {
        steering::hand_over(&mut self.steer, &self.stats)
    }

    /// End of a poll: every lane's burst goes out, and each TAP's kernel
    /// traffic is injected onto its port (`scratch`: an empty burst to
    /// read it into). Returns the frames read from the TAPs and the TAP
    /// relay rings.
    pub(super) fn flush(&mut self, state: &ForwardingState, scratch: &mut MbufBurst) -> usize {
        self.hand_over_steered();
        let stats = &self.stats;
        for lane in &mut self.tx {
            lane.flush(stats);
        }
        let mut injected = 0;
        for (port, lane) in self.exception.iter_mut().enumerate() {
            if let Some(lane) = lane {
                injected += lane.flush(stats);
                if let Some(tx) = self.tx.get_mut(port) {
                    injected += lane.inject(tx.queue_mut(), scratch, stats, state, &self.probes);
                }
            }
        }
        injected
    }

    /// The worker stops: packets still held for a peer are freed, and
    /// counted.
    pub(super) fn stop(&mut self) {
        for lane in &mut self.steer {
            let n = lane.clear() as u64;
            self.stats.count_drop(DropReason::Shutdown, n);
        }
    }
}
