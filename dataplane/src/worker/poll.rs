//! The poll loop: per poll, the snapshot and the clock once, a burst from
//! every port and every peer's steering ring through the burst path, the
//! lanes flushed, a slice of the conntrack shard swept (CT-5), and after
//! a poll that found nothing the idle step (busy, or backing off).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::burst_path::BurstPath;
use super::idle::Backoff;
use super::lanes::Lanes;
use super::mailbox::Mailbox;
#[cfg(feature = "test-hooks")]
use super::TestPause;
use super::{ConntrackHandoff, Steering, Worker};
use crate::dpdk::{MbufBurst, RingConsumer, RxQueue, TscClock};
use sluice_core::pipeline::PipelineCtx;
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::stats::WorkerStats;
use sluice_core::steering::{Owners, RxPlacement};
use sluice_core::time::Millis;

/// Conntrack slots examined for expiry per millisecond of clock (CT-5):
/// 1024 slots/ms walks a default 1,048,576-slot shard about once a second,
/// far finer than idle timeouts (seconds), while touching a few dozen
/// cache lines per millisecond. Sweeping per poll instead (32 slots every
/// burst) cost two uncached signature lines per burst, ~7 % of the worker
/// at 10 Mpps (perf), and walked the table ten times a second for nothing.
const SWEEP_SLOTS_PER_MS: usize = 1024;

/// What a worker reads each poll besides its TAPs: the ports' RX queues
/// and the rings from its steering peers.
struct Inputs {
    /// Per config port.
    rx: Vec<RxQueue>,
    /// Per config port: which of its tracked packets are already at their
    /// owner (the others may belong to another worker).
    placement: Vec<RxPlacement>,
    /// One per peer.
    inbound: Vec<RingConsumer>,
    /// Packets per RX poll.
    burst_size: usize,
    /// The burst being read and processed (allocated once).
    burst: MbufBurst,
}

impl Worker {
    /// Polls until `stop` is set. Returns 0 (the lcore's exit code).
    pub fn run(self) -> i32 {
        let stop = Arc::clone(&self.stop);
        let mut polling = Polling::start(self);
        while !stop.load(Ordering::Relaxed) {
            polling.poll();
        }
        polling.stop();
        0
    }
}

/// A running worker between two polls.
struct Polling {
    inputs: Inputs,
    path: BurstPath,
    snapshots: Arc<SnapshotCell>,
    /// The snapshot version `state` was loaded at.
    version: u64,
    state: Arc<ForwardingState>,
    clock: TscClock,
    stats: Arc<CachePadded<WorkerStats>>,
    last_sweep: Millis,
    backoff: Backoff,
    index: usize,
    mailbox: Option<Mailbox>,
    handoff: ConntrackHandoff,
    #[cfg(feature = "test-hooks")]
    test_pause: TestPause,
}

impl Polling {
    /// Takes the worker apart into what the loop reads and writes; the
    /// conntrack shard is allocated and touched here, on the worker's own
    /// lcore (NUMA-local), before the first packet.
    fn start(worker: Worker) -> Self {
        let Worker {
            index,
            rx,
            tx,
            exception,
            port_ids,
            steering,
            stats,
            snapshots,
            probes,
            stop: _,
            clock,
            burst_size,
            conntrack_capacity,
            idle,
            mailbox,
            mut handoff,
            #[cfg(feature = "test-hooks")]
            test_pause,
        } = worker;
        let Steering {
            to,
            from,
            ports,
            owners,
        } = steering.unwrap_or(Steering {
            to: Vec::new(),
            from: Vec::new(),
            ports: Vec::new(),
            owners: Owners::Hash { workers: 1 },
        });
        let mut ctx = PipelineCtx::new(conntrack_capacity);
        ctx.fragment_ids = sluice_core::fragment::FragmentIds::for_worker(index);
        handoff.restore_into(index, &mut ctx.conntrack, Millis(clock.now_ms()));
        stats.conntrack.publish(&ctx.conntrack);
        let lanes = Lanes::new(tx, exception, to, probes, Arc::clone(&stats));
        let version = snapshots.version();
        let state = snapshots.load();
        stats.snapshot_generation.set(state.generation);
        Self {
            inputs: Inputs {
                rx,
                placement: ports,
                inbound: from,
                burst_size,
                burst: MbufBurst::default(),
            },
            path: BurstPath::new(index, port_ids, ctx, lanes, owners),
            snapshots,
            version,
            state,
            clock,
            stats,
            last_sweep: Millis(0),
            backoff: Backoff::new(idle),
            index,
            mailbox,
            handoff,
            #[cfg(feature = "test-hooks")]
            test_pause,
        }
    }

    /// One poll: the snapshot and the clock, a burst from every port and
    /// every peer's ring through the burst path, the lanes flushed, the
    /// shard swept, and the idle step.
    #[inline]
    fn poll(&mut self) {
        let stats = &self.stats;
        stats.polls.add(1);
        let v = self.snapshots.version();
        if v != self.version {
            self.version = v;
            self.state = self.snapshots.load();
            stats.snapshot_generation.set(self.state.generation);
        }
        self.path.ctx.now = Millis(self.clock.now_ms());
        #[cfg(feature = "test-hooks")]
        if self.test_pause.holds(self.version) {
            return;
        }
        let (path, state) = (&mut self.path, &self.state);
        let ports = self.inputs.receive_ports(path, state, stats);
        #[cfg(feature = "test-hooks")]
        self.test_pause.received(ports.packets);
        let steered = self.inputs.receive_steered(path, state, stats);
        let injected = path.lanes.flush(state, &mut self.inputs.burst);
        sweep(&mut path.ctx, &mut self.last_sweep, stats);
        path.retry_held(state);
        if let Some(mailbox) = &mut self.mailbox {
            mailbox.serve(self.index, state, &mut path.ctx);
        }
        let found = ports.packets + steered + injected > 0 || ports.held_back;
        self.backoff.after_poll(found, stats);
    }

    /// The worker stops: what is held for peers is freed (counted), and
    /// the last millisecond's conntrack counters are published for the
    /// final scrape.
    fn stop(&mut self) {
        let now = Millis(self.clock.now_ms());
        self.handoff
            .hand_on(self.index, &self.path.ctx.conntrack, now);
        self.path.drop_held();
        self.path.lanes.stop();
        self.stats.conntrack.publish(&self.path.ctx.conntrack);
        self.stats.quic_lb.publish(&self.path.ctx.quic_lb);
    }
}

/// What one poll of the ports found.
struct PortsPolled {
    /// Packets received.
    packets: usize,
    /// A port's RX was not read, its packets held back for a peer's ring
    /// (AP-1 backpressure): there is work, though none was received.
    held_back: bool,
}

impl Inputs {
    /// A burst from each port through the burst path.
    #[inline]
    fn receive_ports(
        &mut self,
        path: &mut BurstPath,
        state: &ForwardingState,
        stats: &WorkerStats,
    ) -> PortsPolled {
        let mut polled = PortsPolled {
            packets: 0,
            held_back: false,
        };
        for (port, rxq) in self.rx.iter_mut().enumerate() {
            let placement = self
                .placement
                .get(port)
                .copied()
                .unwrap_or(RxPlacement::Kept);
            // AP-1 backpressure: while a peer's ring cannot take what is
            // held for it, this port's packets wait in its RX queue.
            if placement != RxPlacement::Kept && !path.lanes.hand_over_steered() {
                stats.steering_backpressure.add(1);
                polled.held_back = true;
                continue;
            }
            let n = rxq.rx_burst(&mut self.burst, self.burst_size);
            if n == 0 {
                continue;
            }
            let Some(pc) = stats.ports.get(port) else {
                self.burst.clear();
                continue;
            };
            pc.rx_packets.add(n as u64);
            pc.rx_bytes.add(self.burst.total_len());
            polled.packets += n;
            path.handle_burst(state, &mut self.burst, Some(port), placement);
        }
        polled
    }

    /// Tracked packets other workers received for this one's shard, through
    /// the burst path (never steered again). Returns how many.
    #[inline]
    fn receive_steered(
        &mut self,
        path: &mut BurstPath,
        state: &ForwardingState,
        stats: &WorkerStats,
    ) -> usize {
        let mut received = 0;
        for ring in &mut self.inbound {
            let n = ring.dequeue(&mut self.burst);
            if n > 0 {
                stats.steered_in.add(n as u64);
                received += n;
                path.handle_burst(state, &mut self.burst, None, RxPlacement::Kept);
            }
        }
        received
    }
}

/// CT-5: sweeps the slots due since the last sweep, once per millisecond
/// of clock, and publishes the shard's counters.
#[inline]
fn sweep(ctx: &mut PipelineCtx, last_sweep: &mut Millis, stats: &WorkerStats) {
    if ctx.now > *last_sweep {
        upkeep(ctx, last_sweep, stats);
    }
}

/// [`sweep`]'s work when a millisecond has passed: out of line, so that
/// it is counted apart (`scripts/bench-instructions.sh`: it follows time,
/// not packets).
#[inline(never)]
fn upkeep(ctx: &mut PipelineCtx, last_sweep: &mut Millis, stats: &WorkerStats) {
    let now = ctx.now;
    // After a stall, catch up a little, not all at once.
    let ms = (now.0 - last_sweep.0).min(8) as usize;
    ctx.conntrack.sweep(now, SWEEP_SLOTS_PER_MS * ms);
    *last_sweep = now;
    stats.conntrack.publish(&ctx.conntrack);
    stats.quic_lb.publish(&ctx.quic_lb);
}
