//! AP-4, the exception path: one lane per port with a TAP. Packets for the
//! appliance itself are punted to the kernel through a TAP queue; what the
//! kernel sends on the TAP is injected onto the port.
//!
//! A TAP has fewer queue pairs than there may be workers (sluice opens at
//! most `dpdk::NET_TAP_START_QUEUE_PAIRS`, 4 on DPDK 22.11). Workers `0..Q` each own one of the `Q` pairs; every other
//! worker `i` hands its punted packets over a single-producer
//! single-consumer ring to worker [`tap_owner`]`(i, Q)`, which writes them
//! to its TAP queue with its own. Only owners read the TAP (the kernel's
//! traffic, injected on the owner's TX queue of the port).

use super::probes::{kernel_frame, KernelFrame};
use crate::dpdk::{Mbuf, MbufBurst, RingConsumer, RingProducer, RxQueue, TxQueue, MAX_BURST};
use sluice_core::drop_reason::DropReason;
use sluice_core::probe_path::ProbeTable;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;
use sluice_core::vlan;

/// Slots of a relay ring from a worker without a TAP queue pair to its
/// owner: a few bursts of the kernel's light traffic (ARP, ICMP, BGP,
/// health checks); more waiting than that is dropped as
/// `exception_relay_full`, never waited for.
pub const RELAY_SLOTS: u32 = 256;

/// The worker whose TAP queue pair carries worker `worker`'s punted
/// packets, on a TAP of `tap_queues` queue pairs (at least 1): itself when
/// it owns one, else a spread of the others over the owners.
pub fn tap_owner(worker: usize, tap_queues: usize) -> usize {
    worker % tap_queues.max(1)
}

/// One worker's queue pair on a port's exception-path TAP (AP-4).
#[derive(Debug)]
pub struct ExceptionQueues {
    /// What the kernel sends on the TAP: transmitted on the data port.
    pub rx: RxQueue,
    /// Packets for the appliance itself: handed to the kernel.
    pub tx: TxQueue,
}

/// How a worker reaches a port's TAP.
#[derive(Debug)]
pub enum ExceptionPath {
    /// It owns a queue pair, and writes to it what the workers relaying
    /// through it (`relayed`, one ring each) hand over.
    Tap {
        queues: ExceptionQueues,
        relayed: Vec<RingConsumer>,
    },
    /// It has no queue pair: a ring to the worker that owns one.
    Relay(RingProducer),
}

/// A port's exception path and the burst being punted to it.
#[derive(Debug)]
pub(super) struct ExceptionLane {
    path: ExceptionPath,
    punted: MbufBurst,
    /// The port's config index (its counters).
    port: usize,
}

impl ExceptionLane {
    pub(super) fn new(path: ExceptionPath, port: usize) -> Self {
        Self {
            path,
            punted: MbufBurst::default(),
            port,
        }
    }

    /// Queues a packet for the kernel; a full burst is written first.
    #[inline]
    pub(super) fn punt(&mut self, m: Mbuf, stats: &WorkerStats) {
        let Self { path, punted, port } = self;
        if punted
            .push_or_flush(m, |b| hand_to_kernel(path, b, stats, *port))
            .is_err()
        {
            stats.count_drop(full(path), 1);
        }
    }

    /// End of a poll: writes what is punted to the TAP (or the relay
    /// ring), and an owner writes one burst from each relay ring into it.
    /// Returns the packets taken off relay rings (work found, for the
    /// idle back-off).
    pub(super) fn flush(&mut self, stats: &WorkerStats) -> usize {
        if !self.punted.is_empty() {
            hand_to_kernel(&mut self.path, &mut self.punted, stats, self.port);
        }
        let ExceptionPath::Tap { queues, relayed } = &mut self.path else {
            return 0;
        };
        let mut taken = 0;
        for ring in relayed {
            let n = ring.dequeue(&mut self.punted);
            if n > 0 {
                taken += n;
                write_to_tap(&mut queues.tx, &mut self.punted, stats, self.port);
            }
        }
        taken
    }

    /// Transmits on the data port (`txq`) what the kernel sent on the TAP
    /// (ARP and ND answers, ICMP, health-check probes, BGP, management),
    /// with the port's 802.1Q tag pushed on a trunk port; a data-path
    /// probe's packets leave encapsulated to their backend instead
    /// (`probes`). One burst per poll: the kernel's traffic is light, and
    /// the data path comes first. Returns the frames read from the TAP
    /// (none without a queue pair).
    pub(super) fn inject(
        &mut self,
        txq: &mut TxQueue,
        burst: &mut MbufBurst,
        stats: &WorkerStats,
        state: &ForwardingState,
        probes: &ProbeTable,
    ) -> usize {
        let ExceptionPath::Tap { queues, .. } = &mut self.path else {
            return 0;
        };
        let n = queues.rx.rx_burst(burst, MAX_BURST);
        if n == 0 {
            return 0;
        }
        let counters = stats.ports.get(self.port);
        let vlan = state.ports.get(self.port).and_then(|p| p.vlan);
        if vlan.is_some() || probes.is_active() {
            let mut out = MbufBurst::default();
            let mut untagged = 0;
            for mut m in burst.drain() {
                match kernel_frame(&mut m, self.port, state, probes) {
                    KernelFrame::Probe => {}
                    KernelFrame::Dropped(reason) => {
                        stats.count_drop(reason, 1);
                        continue;
                    }
                    KernelFrame::Kernel => {
                        // Cannot fail: the TAP's buffers come with the
                        // pool's headroom. If one did, it is not sent
                        // untagged onto the VLAN.
                        if vlan.is_some_and(|vid| !vlan::push_tag(&mut m, vid)) {
                            untagged += 1;
                            continue;
                        }
                    }
                }
                // Cannot be full: it holds what the burst held.
                let _ = out.push(m);
            }
            if let Some(pc) = counters {
                pc.inject_failed.add(untagged);
            }
            std::mem::swap(burst, &mut out);
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

/// The drop reason of a punted packet the path could not take.
fn full(path: &ExceptionPath) -> DropReason {
    match path {
        ExceptionPath::Tap { .. } => DropReason::ExceptionQueueFull,
        ExceptionPath::Relay(_) => DropReason::ExceptionRelayFull,
    }
}

/// Writes punted packets to the TAP, or hands them to the owner's relay
/// ring; what is not taken is a drop (never waited for).
fn hand_to_kernel(
    path: &mut ExceptionPath,
    burst: &mut MbufBurst,
    stats: &WorkerStats,
    port: usize,
) {
    match path {
        ExceptionPath::Tap { queues, .. } => write_to_tap(&mut queues.tx, burst, stats, port),
        ExceptionPath::Relay(ring) => {
            ring.enqueue(burst);
            let unsent = burst.clear() as u64;
            if unsent > 0 {
                stats.count_drop(DropReason::ExceptionRelayFull, unsent);
            }
        }
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

/// AP-4 on real DPDK (run by `dpdk::tests`, which owns the process's one
/// EAL; `tap` stands in for a TAP): a relay lane hands its punted burst to
/// the ring at the end of the poll and counts what a full ring does not
/// take as `exception_relay_full`, without waiting; the owner writes what
/// the ring holds to its TAP queue, a burst per poll, and reports it as
/// work (the idle back-off).
#[cfg(test)]
pub(crate) fn a_full_relay_ring_is_a_counted_drop_and_the_owner_drains_it(
    pool: &crate::dpdk::Mempool,
    tap: &str,
) {
    use crate::dpdk::{mbuf_ring, Port, PortConfig};
    let relaying = WorkerStats::new();
    let owning = WorkerStats::new();
    let (to, from) = mbuf_ring(pool, "test_tap_relay", 16).expect("ring");
    let cfg = PortConfig {
        queue_pairs: 2,
        ..PortConfig::default()
    };
    let (_port, mut pairs) = Port::start(tap, &cfg, pool).expect("tap");
    let q = pairs.remove(0);
    let mut data_port = pairs.remove(0);
    let mut relay = ExceptionLane::new(ExceptionPath::Relay(to), 0);
    let queues = ExceptionQueues { rx: q.rx, tx: q.tx };
    let mut owner = ExceptionLane::new(
        ExceptionPath::Tap {
            queues,
            relayed: vec![from],
        },
        0,
    );
    let mut burst = MbufBurst::default();
    assert!(pool.alloc_into(&mut burst, 40), "pool short");
    for m in burst.drain() {
        relay.punt(m, &relaying);
    }
    assert_eq!(relaying.total_drops(), 0, "held until the end of the poll");
    assert_eq!(relay.flush(&relaying), 0, "a relay reads no ring");
    // A 16-slot ring takes 15.
    assert_eq!(relaying.total_drops(), 25);
    let (state, probes) = (ForwardingState::default(), ProbeTable::new());
    let injected = relay.inject(&mut data_port.tx, &mut burst, &relaying, &state, &probes);
    assert_eq!(injected, 0, "only owners read the TAP");
    assert_eq!(owner.flush(&owning), 15, "the relayed packets are work");
    assert_eq!(owning.ports[0].punted.get(), 15, "written to the TAP");
    assert_eq!(owner.flush(&owning), 0, "the ring is empty");
    assert_eq!(owning.total_drops(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AP-4: with fewer TAP queue pairs than workers, each owner keeps its
    /// own pair, every other worker relays to an owner, and the relaying
    /// workers are spread evenly over the owners.
    #[test]
    fn ap_4_workers_without_a_tap_queue_relay_to_an_owner() {
        for (workers, queues) in [(18, 16), (64, 16), (128, 16), (16, 16), (5, 1), (40, 7)] {
            let mut relaying = vec![0usize; queues];
            for w in 0..workers {
                let owner = tap_owner(w, queues);
                assert!(owner < queues, "{w} of {workers} -> {owner}");
                if w < queues {
                    assert_eq!(owner, w, "an owner relays to itself");
                } else {
                    relaying[owner] += 1;
                }
            }
            let (min, max) = (relaying.iter().min(), relaying.iter().max());
            assert!(
                max.zip(min).is_some_and(|(a, b)| a - b <= 1),
                "{relaying:?}"
            );
        }
        assert_eq!(tap_owner(16, 16), 0);
        assert_eq!(tap_owner(17, 16), 1);
        assert_eq!(tap_owner(3, 0), 0, "no division by zero");
    }

    /// A relay ring and the burst held for it fit in what the pool counts
    /// per worker for a TAP queue pair (`mbuf_pool`).
    #[test]
    fn a_relay_ring_is_smaller_than_a_tap_queue_pair() {
        assert!(RELAY_SLOTS as usize + MAX_BURST <= 512 + 512);
        assert!(RELAY_SLOTS.is_power_of_two());
    }
}
