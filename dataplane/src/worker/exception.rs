//! AP-4, the exception path: one lane per port with a TAP. Packets for the
//! appliance itself are punted to the kernel through the worker's TAP
//! queue; what the kernel sends on the TAP is injected onto the port.

use crate::dpdk::{Mbuf, MbufBurst, RxQueue, TxQueue, MAX_BURST};
use sluice_core::drop_reason::DropReason;
use sluice_core::stats::WorkerStats;
use sluice_core::vlan;

/// One worker's queue pair on a port's exception-path TAP (AP-4).
#[derive(Debug)]
pub struct ExceptionQueues {
    /// What the kernel sends on the TAP: transmitted on the data port.
    pub rx: RxQueue,
    /// Packets for the appliance itself: handed to the kernel.
    pub tx: TxQueue,
}

/// A port's TAP queues and the burst being punted to it.
#[derive(Debug)]
pub(super) struct ExceptionLane {
    queues: ExceptionQueues,
    punted: MbufBurst,
    /// The port's config index (its counters).
    port: usize,
}

impl ExceptionLane {
    pub(super) fn new(queues: ExceptionQueues, port: usize) -> Self {
        Self {
            queues,
            punted: MbufBurst::default(),
            port,
        }
    }

    /// Queues a packet for the kernel; a full burst is written first.
    #[inline]
    pub(super) fn punt(&mut self, m: Mbuf, stats: &WorkerStats) {
        let Self {
            queues,
            punted,
            port,
        } = self;
        if punted
            .push_or_flush(m, |b| write_to_tap(&mut queues.tx, b, stats, *port))
            .is_err()
        {
            stats.count_drop(DropReason::ExceptionQueueFull, 1);
        }
    }

    /// Writes what is punted to the TAP (end of a poll).
    pub(super) fn flush(&mut self, stats: &WorkerStats) {
        if !self.punted.is_empty() {
            write_to_tap(&mut self.queues.tx, &mut self.punted, stats, self.port);
        }
    }

    /// Transmits on the data port (`txq`) what the kernel sent on the TAP
    /// (ARP and ND answers, ICMP, health-check probes, BGP, management),
    /// with the port's 802.1Q tag pushed on a trunk port. One burst per
    /// poll: the kernel's traffic is light, and the data path comes first.
    /// Returns the frames read from the TAP.
    pub(super) fn inject(
        &mut self,
        txq: &mut TxQueue,
        burst: &mut MbufBurst,
        stats: &WorkerStats,
        vlan: Option<u16>,
    ) -> usize {
        let n = self.queues.rx.rx_burst(burst, MAX_BURST);
        if n == 0 {
            return 0;
        }
        let counters = stats.ports.get(self.port);
        if let Some(vid) = vlan {
            // Cannot fail: the TAP's buffers come with the pool's headroom.
            // If one did, the burst is not sent half untagged onto the VLAN.
            let tagged = burst.iter_mut().all(|m| vlan::push_tag(m, vid));
            if !tagged {
                let n = burst.clear() as u64;
                if let Some(pc) = counters {
                    pc.inject_failed.add(n);
                }
                return n as usize;
            }
        }
        let sent = txq.tx_burst(burst) as u64;
        let unsent = burst.clear() as u64;
        if let Some(pc) = counters {
            pc.injected.add(sent);
            pc.inject_failed.add(unsent);
        }
        n
    }
}

/// Writes punted packets to the TAP; what the kernel side refuses is a drop.
fn write_to_tap(txq: &mut TxQueue, burst: &mut MbufBurst, stats: &WorkerStats, port: usize) {
    let sent = txq.tx_burst(burst) as u64;
    let unsent = burst.clear() as u64;
    if let Some(pc) = stats.ports.get(port) {
        pc.punted.add(sent);
    }
    if unsent > 0 {
        stats.count_drop(DropReason::ExceptionQueueFull, unsent);
    }
}
