//! The poll loop of one worker lcore: RX burst → pipeline → TX burst.
//!
//! A worker owns one RX and one TX queue on every port, its counters and
//! its conntrack shard. Per poll it reads the clock once, checks the
//! snapshot version once and sweeps a bounded slice of the shard (CT-5);
//! nothing shared is written but its own stats block.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::dpdk::MAX_BURST;
use crate::dpdk::{MbufBurst, RxQueue, TscClock, TxQueue};
use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::pipeline::{self, PipelineCtx, Stage, Verdict};
use crate::snapshot::{Millis, SnapshotCell};
use crate::stats::WorkerStats;

mod fragments;

/// Everything a worker owns. Built on the main lcore, moved to the worker.
pub struct Worker {
    pub index: usize,
    /// RX queue per port, indexed by config port index.
    pub rx: Vec<RxQueue>,
    /// TX queue per port, indexed by config port index.
    pub tx: Vec<TxQueue>,
    /// AP-4: this worker's queue pair on each port's TAP (None: the port
    /// has no exception path), indexed by config port index.
    pub exception: Vec<Option<ExceptionQueues>>,
    pub stats: Arc<CachePadded<WorkerStats>>,
    pub snapshots: Arc<SnapshotCell>,
    pub stop: Arc<AtomicBool>,
    pub clock: TscClock,
    /// Packets per RX poll (1..=MAX_BURST).
    pub burst_size: usize,
    /// Entries in this worker's conntrack shard (reserved at start).
    pub conntrack_capacity: usize,
    /// TEST HOOK (`sluice run --test-mark-unhealthy-after-packets`): after
    /// receiving this many packets, stop polling RX until the next snapshot
    /// is published, so a test knows exactly which packets saw which
    /// snapshot. None in production.
    pub test_pause_after_rx: Option<u64>,
}

/// One worker's queue pair on a port's exception-path TAP (AP-4).
#[derive(Debug)]
pub struct ExceptionQueues {
    /// What the kernel sends on the TAP: transmitted on the data port.
    pub rx: RxQueue,
    /// Packets for the appliance itself: handed to the kernel.
    pub tx: TxQueue,
}

/// Conntrack slots examined for expiry per millisecond of clock (CT-5):
/// 1024 slots/ms walks a default 1,048,576-slot shard about once a second,
/// far finer than idle timeouts (seconds), while touching a few dozen
/// cache lines per millisecond. Sweeping per poll instead (32 slots every
/// burst) cost two uncached signature lines per burst, ~7 % of the worker
/// at 10 Mpps (perf), and walked the table ten times a second for nothing.
pub const SWEEP_SLOTS_PER_MS: usize = 1024;

impl Worker {
    /// Polls until `stop` is set. Returns 0 (the lcore's exit code).
    pub fn run(self) -> i32 {
        let Worker {
            index,
            mut rx,
            mut tx,
            mut exception,
            stats,
            snapshots,
            stop,
            clock,
            burst_size,
            conntrack_capacity,
            mut test_pause_after_rx,
        } = self;
        let mut rx_seen = 0u64;
        let mut paused_at_version = None;
        // Allocated once, before the loop.
        let mut rx_burst = MbufBurst::default();
        let mut tx_bursts: Vec<MbufBurst> = tx.iter().map(|_| MbufBurst::default()).collect();
        let mut punt_bursts: Vec<MbufBurst> =
            exception.iter().map(|_| MbufBurst::default()).collect();
        let mut version = snapshots.version();
        let mut state = snapshots.load();
        stats.snapshot_generation.set(state.generation);
        // The shard is allocated and touched here, on the worker's own lcore
        // (NUMA-local), before the first packet.
        let mut ctx = PipelineCtx::new(conntrack_capacity);
        ctx.fragment_ids = crate::fragment::FragmentIds::for_worker(index);
        stats.conntrack.publish(&ctx.conntrack);
        let mut stages = [Stage::default(); MAX_BURST];
        let mut last_sweep = Millis(0);

        while !stop.load(Ordering::Relaxed) {
            stats.polls.add(1);
            let v = snapshots.version();
            if v != version {
                version = v;
                state = snapshots.load();
                stats.snapshot_generation.set(state.generation);
            }
            ctx.now = Millis(clock.now_ms());
            if test_pause_after_rx.is_some_and(|n| rx_seen >= n) {
                test_pause_after_rx = None;
                paused_at_version = Some(version);
            }
            if paused_at_version.is_some() {
                if paused_at_version == Some(version) {
                    continue;
                }
                paused_at_version = None;
            }

            for (port_idx, rxq) in rx.iter_mut().enumerate() {
                let n = rxq.rx_burst(&mut rx_burst, burst_size);
                if n == 0 {
                    continue;
                }
                let Some(pc) = stats.ports.get(port_idx) else {
                    rx_burst.clear();
                    continue;
                };
                pc.rx_packets.add(n as u64);
                rx_seen += n as u64;
                // Stage 1 over the whole burst, then stage 2: the Maglev
                // slot misses of different packets overlap. (Prefetching
                // packet and headroom lines too measured slower on net_pcap,
                // whose copies leave them hot; revisit on real NICs.)
                let mut rx_bytes = 0u64;
                for (m, stage) in rx_burst.iter().zip(stages.iter_mut()) {
                    rx_bytes += u64::from(m.pkt_len());
                    *stage = if m.is_contiguous() {
                        pipeline::classify(m.data(), &state)
                    } else {
                        Stage::Done(Verdict::Drop(DropReason::MultiSegment))
                    };
                }
                pc.rx_bytes.add(rx_bytes);
                // Conntrack lines of the whole burst, in two passes, before
                // any packet is delivered: the shard's misses overlap.
                for pass in 0..2 {
                    for (m, stage) in rx_burst.iter().zip(stages.iter_mut()) {
                        if let Stage::Balance(b) = stage {
                            pipeline::prefetch_conntrack(m.data(), b, &state, &ctx, pass);
                        }
                    }
                }
                for (mut m, stage) in rx_burst.drain().zip(stages.iter()) {
                    let verdict = match stage {
                        Stage::Done(v) => *v,
                        Stage::Balance(b) => pipeline::deliver(&mut m, b, &state, &mut ctx),
                    };
                    let out = match verdict {
                        Verdict::Forward { port, backend } => {
                            stats.backend(backend, 1);
                            usize::from(port)
                        }
                        // AP-3: oversize IPv4 without DF, sent as fragments.
                        Verdict::Fragment { port, backend } => {
                            stats.backend(backend, 1);
                            let out = usize::from(port);
                            fragments::send(m, out, &state, &mut tx_bursts, &mut tx, &stats);
                            continue;
                        }
                        // AP-3: an ICMP answer leaves by the receive port.
                        Verdict::Reply => port_idx,
                        Verdict::Punt => {
                            punt(&mut exception, &mut punt_bursts, &stats, port_idx, m);
                            continue;
                        }
                        Verdict::Drop(reason) => {
                            stats.count_drop(reason, 1);
                            continue;
                        }
                    };
                    let (Some(burst), Some(txq)) = (tx_bursts.get_mut(out), tx.get_mut(out)) else {
                        stats.count_drop(DropReason::TxQueueFull, 1);
                        continue;
                    };
                    if let Err(m) = burst.push(m) {
                        flush(txq, burst, &stats, out);
                        if burst.push(m).is_err() {
                            stats.count_drop(DropReason::TxQueueFull, 1);
                        }
                    }
                }
            }
            for (port_idx, (txq, burst)) in tx.iter_mut().zip(tx_bursts.iter_mut()).enumerate() {
                if !burst.is_empty() {
                    flush(txq, burst, &stats, port_idx);
                }
            }
            for (port_idx, (queues, burst)) in
                exception.iter_mut().zip(punt_bursts.iter_mut()).enumerate()
            {
                if let Some(q) = queues {
                    if !burst.is_empty() {
                        flush_punted(&mut q.tx, burst, &stats, port_idx);
                    }
                    if let Some(txq) = tx.get_mut(port_idx) {
                        inject(q, txq, &mut rx_burst, &stats, port_idx);
                    }
                }
            }
            if ctx.now > last_sweep {
                // After a stall, catch up a little, not all at once.
                let ms = (ctx.now.0 - last_sweep.0).min(8) as usize;
                ctx.conntrack.sweep(ctx.now, SWEEP_SLOTS_PER_MS * ms);
                last_sweep = ctx.now;
                stats.conntrack.publish(&ctx.conntrack);
            }
        }
        // The last millisecond's conntrack counters, for the final scrape.
        stats.conntrack.publish(&ctx.conntrack);
        0
    }
}

/// AP-4: hands a packet for the appliance to the receive port's TAP, or
/// drops it (counted) when the port has no exception path.
#[inline]
fn punt(
    exception: &mut [Option<ExceptionQueues>],
    bursts: &mut [MbufBurst],
    stats: &WorkerStats,
    port_idx: usize,
    m: crate::dpdk::Mbuf,
) {
    let (Some(Some(q)), Some(burst)) = (exception.get_mut(port_idx), bursts.get_mut(port_idx))
    else {
        stats.count_drop(DropReason::NoExceptionPath, 1);
        return;
    };
    if let Err(m) = burst.push(m) {
        flush_punted(&mut q.tx, burst, stats, port_idx);
        if burst.push(m).is_err() {
            stats.count_drop(DropReason::ExceptionQueueFull, 1);
        }
    }
}

/// Writes punted packets to the TAP; what the kernel side refuses is a drop.
fn flush_punted(txq: &mut TxQueue, burst: &mut MbufBurst, stats: &WorkerStats, port_idx: usize) {
    let sent = txq.tx_burst(burst) as u64;
    let unsent = burst.clear() as u64;
    stats.punted.add(sent);
    if let Some(pc) = stats.ports.get(port_idx) {
        pc.punted.add(sent);
    }
    if unsent > 0 {
        stats.count_drop(DropReason::ExceptionQueueFull, unsent);
    }
}

/// AP-4: transmits on the data port what the kernel sent on its TAP (ARP
/// and ND answers, ICMP, health-check probes, BGP, management). One burst
/// per poll: the kernel's traffic is light, and the data path comes first.
fn inject(
    q: &mut ExceptionQueues,
    txq: &mut TxQueue,
    burst: &mut MbufBurst,
    stats: &WorkerStats,
    port_idx: usize,
) {
    if q.rx.rx_burst(burst, MAX_BURST) == 0 {
        return;
    }
    let sent = txq.tx_burst(burst) as u64;
    let unsent = burst.clear() as u64;
    if let Some(pc) = stats.ports.get(port_idx) {
        pc.injected.add(sent);
        pc.inject_failed.add(unsent);
    }
}

/// Sends a TX burst; whatever the driver refuses is freed and counted.
#[inline]
fn flush(txq: &mut TxQueue, burst: &mut MbufBurst, stats: &WorkerStats, port_idx: usize) {
    let bytes = burst.total_len();
    let n = burst.len();
    let sent = txq.tx_burst(burst);
    let unsent_bytes = burst.total_len();
    let unsent = burst.clear();
    debug_assert_eq!(sent + unsent, n);
    if let Some(pc) = stats.ports.get(port_idx) {
        pc.tx_packets.add(sent as u64);
        pc.tx_bytes.add(bytes - unsent_bytes);
    }
    if unsent > 0 {
        stats.count_drop(DropReason::TxQueueFull, unsent as u64);
    }
}
