//! The transmit lane of one port: the worker's TX queue on it and the
//! burst being filled for it, sent when full and at the end of each poll.
//! TX counts what the driver accepted; what it refused is freed and
//! counted as `tx_queue_full`.

use crate::dpdk::{Mbuf, MbufBurst, TxQueue};
use sluice_core::drop_reason::DropReason;
use sluice_core::stats::WorkerStats;

/// One port's TX queue and the burst queued for it.
#[derive(Debug)]
pub(super) struct TxLane {
    queue: TxQueue,
    burst: MbufBurst,
    /// The port's config index (its counters).
    port: usize,
}

impl TxLane {
    pub(super) fn new(queue: TxQueue, port: usize) -> Self {
        Self {
            queue,
            burst: MbufBurst::default(),
            port,
        }
    }

    /// Queues one frame; a full burst is sent first. Always inlined: with
    /// the fragment path as a second caller the compiler otherwise keeps
    /// it out of line, a call per forwarded packet (+32 instructions per
    /// packet, `scripts/bench-instructions.sh`).
    #[inline(always)]
    pub(super) fn queue(&mut self, m: Mbuf, stats: &WorkerStats) {
        let Self { queue, burst, port } = self;
        if burst
            .push_or_flush(m, |b| send(queue, b, stats, *port))
            .is_err()
        {
            stats.count_drop(DropReason::TxQueueFull, 1);
        }
    }

    /// Sends what is queued (end of a poll).
    #[inline]
    pub(super) fn flush(&mut self, stats: &WorkerStats) {
        if !self.burst.is_empty() {
            send(&mut self.queue, &mut self.burst, stats, self.port);
        }
    }

    /// The port's TX queue itself, for frames that do not wait in the
    /// lane (the kernel's, injected from the TAP once per poll).
    pub(super) fn queue_mut(&mut self) -> &mut TxQueue {
        &mut self.queue
    }
}

/// Sends a TX burst; whatever the driver refuses is freed and counted.
#[inline]
fn send(txq: &mut TxQueue, burst: &mut MbufBurst, stats: &WorkerStats, port: usize) {
    let bytes = burst.total_len();
    let n = burst.len();
    let sent = txq.tx_burst(burst);
    let unsent_bytes = burst.total_len();
    let unsent = burst.clear();
    debug_assert_eq!(sent + unsent, n);
    if let Some(pc) = stats.ports.get(port) {
        pc.tx_packets.add(sent as u64);
        pc.tx_bytes.add(bytes - unsent_bytes);
    }
    if unsent > 0 {
        stats.count_drop(DropReason::TxQueueFull, unsent as u64);
    }
}
