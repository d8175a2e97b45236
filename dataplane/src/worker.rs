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
use crate::dpdk::{MbufBurst, PortId, RingConsumer, RingProducer, RxQueue, TscClock, TxQueue};
use sluice_core::drop_reason::DropReason;
use sluice_core::pipeline::{PipelineCtx, Verdict};
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::stats::WorkerStats;
use sluice_core::time::Millis;
use sluice_core::vlan;

mod fragments;
pub mod handover;
#[cfg(feature = "test-hooks")]
mod test_pause;
#[cfg(feature = "test-hooks")]
pub use test_pause::TestPause;

use sluice_core::burst::{BurstStages, Outcome, SteerFor};

/// Everything a worker owns. Built on the main lcore, moved to the worker.
pub struct Worker {
    pub index: usize,
    /// DPDK port id of each config port (steered packets carry the id).
    pub port_ids: Vec<PortId>,
    /// Software steering between workers (None: one worker, or every port
    /// keeps a tracking key on one queue by itself).
    pub steering: Option<Steering>,
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
    /// TEST HOOK, only with the `test-hooks` feature: see [`TestPause`].
    #[cfg(feature = "test-hooks")]
    pub test_pause: TestPause,
}

/// This worker's rings to and from every other worker (see
/// [`sluice_core::steering`]).
#[derive(Debug)]
pub struct Steering {
    /// Indexed by worker; None at this worker's own index.
    pub to: Vec<Option<RingProducer>>,
    pub from: Vec<RingConsumer>,
    /// Per config port: whether its RX needs steering.
    pub ports: Vec<bool>,
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
            tx,
            exception,
            port_ids,
            steering,
            stats,
            snapshots,
            stop,
            clock,
            burst_size,
            conntrack_capacity,
            #[cfg(feature = "test-hooks")]
            mut test_pause,
        } = self;
        // Allocated once, before the loop.
        let mut rx_burst = MbufBurst::default();
        let mut version = snapshots.version();
        let state = snapshots.load();
        stats.snapshot_generation.set(state.generation);
        let mut lanes = Lanes {
            index,
            tx_bursts: tx.iter().map(|_| MbufBurst::default()).collect(),
            punt_bursts: exception.iter().map(|_| MbufBurst::default()).collect(),
            steer_bursts: steering.as_ref().map_or_else(Vec::new, |s| {
                s.to.iter().map(|_| MbufBurst::default()).collect()
            }),
            tx,
            exception,
            port_ids,
            steering,
            // The shard is allocated and touched here, on the worker's own
            // lcore (NUMA-local), before the first packet.
            ctx: PipelineCtx::new(conntrack_capacity),
            stages: BurstStages::default(),
            dropped: MbufBurst::default(),
            state,
            stats,
        };
        lanes.ctx.fragment_ids = sluice_core::fragment::FragmentIds::for_worker(index);
        lanes.stats.conntrack.publish(&lanes.ctx.conntrack);
        let mut last_sweep = Millis(0);

        while !stop.load(Ordering::Relaxed) {
            lanes.stats.polls.add(1);
            let v = snapshots.version();
            if v != version {
                version = v;
                lanes.state = snapshots.load();
                lanes.stats.snapshot_generation.set(lanes.state.generation);
            }
            lanes.ctx.now = Millis(clock.now_ms());
            #[cfg(feature = "test-hooks")]
            if test_pause.holds(version) {
                continue;
            }

            for (port_idx, rxq) in rx.iter_mut().enumerate() {
                let steer = lanes
                    .steering
                    .as_ref()
                    .is_some_and(|s| s.ports.get(port_idx).copied().unwrap_or(false));
                // AP-1 backpressure: while a peer's ring cannot take what
                // is held for it, this port's packets wait in its RX queue.
                if steer && !lanes.hand_over_steered() {
                    lanes.stats.steering_backpressure.add(1);
                    continue;
                }
                let n = rxq.rx_burst(&mut rx_burst, burst_size);
                if n == 0 {
                    continue;
                }
                let Some(pc) = lanes.stats.ports.get(port_idx) else {
                    rx_burst.clear();
                    continue;
                };
                pc.rx_packets.add(n as u64);
                pc.rx_bytes.add(rx_burst.total_len());
                #[cfg(feature = "test-hooks")]
                test_pause.received(n);
                lanes.handle_burst(&mut rx_burst, Some(port_idx), steer);
            }
            // Tracked packets other workers received for this one's shard.
            let inbound = lanes.steering.as_ref().map_or(0, |s| s.from.len());
            for i in 0..inbound {
                let n = match lanes.steering.as_mut().and_then(|s| s.from.get_mut(i)) {
                    Some(ring) => ring.dequeue(&mut rx_burst),
                    None => 0,
                };
                if n > 0 {
                    lanes.stats.steered_in.add(n as u64);
                    lanes.handle_burst(&mut rx_burst, None, false);
                }
            }
            lanes.flush_all(&mut rx_burst);
            let now = lanes.ctx.now;
            if now > last_sweep {
                // After a stall, catch up a little, not all at once.
                let ms = (now.0 - last_sweep.0).min(8) as usize;
                lanes.ctx.conntrack.sweep(now, SWEEP_SLOTS_PER_MS * ms);
                last_sweep = now;
                lanes.stats.conntrack.publish(&lanes.ctx.conntrack);
            }
        }
        // Packets still held for a peer at stop are freed, and counted.
        for burst in &mut lanes.steer_bursts {
            let n = burst.clear() as u64;
            lanes.stats.count_drop(DropReason::Shutdown, n);
        }
        // The last millisecond's conntrack counters, for the final scrape.
        lanes.stats.conntrack.publish(&lanes.ctx.conntrack);
        0
    }
}

/// Where a worker's packets go, and the per-burst scratch it reuses.
struct Lanes {
    index: usize,
    tx: Vec<TxQueue>,
    tx_bursts: Vec<MbufBurst>,
    exception: Vec<Option<ExceptionQueues>>,
    punt_bursts: Vec<MbufBurst>,
    port_ids: Vec<PortId>,
    steering: Option<Steering>,
    steer_bursts: Vec<MbufBurst>,
    ctx: PipelineCtx,
    /// The staged pipeline's per-burst state.
    stages: BurstStages,
    /// This burst's dropped packets, freed in bulk at its end.
    dropped: MbufBurst,
    state: Arc<ForwardingState>,
    stats: Arc<CachePadded<WorkerStats>>,
}

impl Lanes {
    /// Runs the pipeline over one burst and queues every packet where its
    /// verdict sends it. `rx_port`: the config port the whole burst came
    /// from (None: steered packets, each carrying its own). `steer`: hand
    /// tracked packets owned by another worker to it (see [`sluice_core::steering`]).
    #[inline]
    fn handle_burst(&mut self, burst: &mut MbufBurst, rx_port: Option<usize>, steer: bool) {
        let state = &*self.state;
        let steer = steer.then_some(SteerFor {
            index: self.index,
            workers: self.steer_bursts.len(),
        });
        // Trunk port: frames without its tag are dropped in stage 1.
        // Steered packets (no `rx_port`) passed that check where received.
        let vlan = rx_port.and_then(|p| state.ports.get(p)?.vlan);
        self.stages
            .prepare(burst.iter(), state, &self.ctx, steer, vlan);
        for (i, mut m) in burst.drain().enumerate() {
            let verdict = match self.stages.deliver(i, &mut m, state, &mut self.ctx) {
                Outcome::Steer(to) => {
                    steer_packet(
                        &mut self.steer_bursts,
                        &mut self.steering,
                        &self.stats,
                        to,
                        m,
                    );
                    continue;
                }
                Outcome::Verdict(v) => v,
            };
            let out = match verdict {
                Verdict::Forward { port, backend } => {
                    self.stats.backend(backend, 1, u64::from(m.pkt_len()));
                    usize::from(port)
                }
                // AP-3: oversize IPv4 without DF, sent as fragments.
                Verdict::Fragment { port, backend } => {
                    self.stats.backend(backend, 1, u64::from(m.pkt_len()));
                    fragments::send(
                        m,
                        usize::from(port),
                        state,
                        &mut self.tx_bursts,
                        &mut self.tx,
                        &self.stats,
                    );
                    continue;
                }
                // AP-3: an ICMP answer leaves by the receive port.
                Verdict::Reply => {
                    self.stats.icmp_replies.add(1);
                    rx_port.unwrap_or_else(|| self.port_index(&m))
                }
                Verdict::Punt => {
                    let port = rx_port.unwrap_or_else(|| self.port_index(&m));
                    // The kernel sees a trunk port's traffic untagged (its
                    // TAP carries the port's addresses); stage 1 made sure
                    // the tag is there.
                    if state.ports.get(port).is_some_and(|p| p.vlan.is_some()) {
                        vlan::pop_tag(&mut m);
                    }
                    punt(
                        &mut self.exception,
                        &mut self.punt_bursts,
                        &self.stats,
                        port,
                        m,
                    );
                    continue;
                }
                Verdict::Drop(reason) => {
                    self.stats.count_drop(reason, 1);
                    // Freed together at the end of the burst: a flood of
                    // unwanted packets costs one mempool put per burst.
                    let _ = self.dropped.push_or_flush(m, |b| {
                        b.clear();
                    });
                    continue;
                }
            };
            let (Some(burst), Some(txq)) = (self.tx_bursts.get_mut(out), self.tx.get_mut(out))
            else {
                self.stats.count_drop(DropReason::TxQueueFull, 1);
                continue;
            };
            let stats = &self.stats;
            if burst
                .push_or_flush(m, |b| flush(txq, b, stats, out))
                .is_err()
            {
                stats.count_drop(DropReason::TxQueueFull, 1);
            }
        }
        self.dropped.clear();
        self.stages.finish();
    }

    /// The config index of the port a steered packet arrived on.
    #[cold]
    fn port_index(&self, m: &crate::dpdk::Mbuf) -> usize {
        self.port_ids
            .iter()
            .position(|&id| id == m.port())
            .unwrap_or(0)
    }

    /// Offers what is held for each peer to its ring; true when nothing
    /// is held any more (see [`handover`]).
    #[inline]
    fn hand_over_steered(&mut self) -> bool {
        let (stats, steering) = (&self.stats, &mut self.steering);
        handover::hand_over(&mut self.steer_bursts, |peer, burst| {
            match steering.as_mut().and_then(|s| s.to.get_mut(peer)) {
                Some(Some(ring)) => send_steered(ring, burst, stats),
                // No ring to that peer (cannot happen: steering only
                // picks other workers, each with a ring).
                _ => {
                    let n = burst.clear() as u64;
                    stats.count_drop(DropReason::SteeringRingFull, n);
                }
            }
        })
    }

    /// End of a poll: every queued burst goes out; the TAPs are polled.
    fn flush_all(&mut self, scratch: &mut MbufBurst) {
        self.hand_over_steered();
        for (port_idx, (txq, burst)) in self
            .tx
            .iter_mut()
            .zip(self.tx_bursts.iter_mut())
            .enumerate()
        {
            if !burst.is_empty() {
                flush(txq, burst, &self.stats, port_idx);
            }
        }
        for (port_idx, (queues, burst)) in self
            .exception
            .iter_mut()
            .zip(self.punt_bursts.iter_mut())
            .enumerate()
        {
            if let Some(q) = queues {
                if !burst.is_empty() {
                    flush_punted(&mut q.tx, burst, &self.stats, port_idx);
                }
                if let Some(txq) = self.tx.get_mut(port_idx) {
                    let vlan = self.state.ports.get(port_idx).and_then(|p| p.vlan);
                    inject(q, txq, scratch, &self.stats, port_idx, vlan);
                }
            }
        }
    }
}

/// Queues a packet for the worker that owns its tracking key. The held
/// burst has room: RX that steers is read only when nothing is held
/// ([`handover`]), and an RX burst is at most a held burst's size.
#[inline]
fn steer_packet(
    bursts: &mut [MbufBurst],
    steering: &mut Option<Steering>,
    stats: &WorkerStats,
    owner: usize,
    m: crate::dpdk::Mbuf,
) {
    let ring = steering
        .as_mut()
        .and_then(|s| s.to.get_mut(owner))
        .and_then(Option::as_mut);
    let (Some(burst), Some(ring)) = (bursts.get_mut(owner), ring) else {
        stats.count_drop(DropReason::SteeringRingFull, 1);
        return;
    };
    if burst
        .push_or_flush(m, |b| send_steered(ring, b, stats))
        .is_err()
    {
        stats.count_drop(DropReason::SteeringRingFull, 1);
    }
}

/// Hands a burst to another worker's ring; what does not fit stays in
/// `burst`, in order, for the next poll (backpressure, [`handover`]).
#[inline]
fn send_steered(ring: &mut RingProducer, burst: &mut MbufBurst, stats: &WorkerStats) {
    let sent = ring.enqueue(burst) as u64;
    stats.steered_out.add(sent);
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
    if burst
        .push_or_flush(m, |b| flush_punted(&mut q.tx, b, stats, port_idx))
        .is_err()
    {
        stats.count_drop(DropReason::ExceptionQueueFull, 1);
    }
}

/// Writes punted packets to the TAP; what the kernel side refuses is a drop.
fn flush_punted(txq: &mut TxQueue, burst: &mut MbufBurst, stats: &WorkerStats, port_idx: usize) {
    let sent = txq.tx_burst(burst) as u64;
    let unsent = burst.clear() as u64;
    if let Some(pc) = stats.ports.get(port_idx) {
        pc.punted.add(sent);
    }
    if unsent > 0 {
        stats.count_drop(DropReason::ExceptionQueueFull, unsent);
    }
}

/// AP-4: transmits on the data port what the kernel sent on its TAP (ARP
/// and ND answers, ICMP, health-check probes, BGP, management), with the
/// port's 802.1Q tag pushed on a trunk port. One burst per poll: the
/// kernel's traffic is light, and the data path comes first.
fn inject(
    q: &mut ExceptionQueues,
    txq: &mut TxQueue,
    burst: &mut MbufBurst,
    stats: &WorkerStats,
    port_idx: usize,
    vlan: Option<u16>,
) {
    if q.rx.rx_burst(burst, MAX_BURST) == 0 {
        return;
    }
    if let Some(vid) = vlan {
        // Cannot fail: the TAP's buffers come with the pool's headroom. If
        // one did, the burst is not sent half untagged onto the VLAN.
        let tagged = burst.iter_mut().all(|m| vlan::push_tag(m, vid));
        if !tagged {
            let n = burst.clear() as u64;
            if let Some(pc) = stats.ports.get(port_idx) {
                pc.inject_failed.add(n);
            }
            return;
        }
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
