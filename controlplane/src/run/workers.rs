//! The workers of a run, built on the main lcore before they are launched:
//! each gets its queue pair on every port, its queue pair on every TAP or
//! a relay ring to a worker that owns one (AP-4), its steering rings,
//! its counters, the snapshot cell and the runtime's clock.

use sluice_core::probe_path::ProbeTable;
use std::sync::Arc;

use controlplane::config::Config;
use crossbeam_utils::CachePadded;
use dataplane::dpdk::{mbuf_ring, Mempool, Port};
use dataplane::dpdk::{RingConsumer, RingProducer};
use dataplane::worker::mailbox::{ConntrackQuery, Mailbox};
use dataplane::worker::{
    tap_owner, ConntrackHandoff, ExceptionPath, ExceptionQueues, Steering, Worker,
};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;
use sluice_core::steering::RxPlacement;
use std::sync::mpsc::Sender;

use super::error::RunError;
use super::runtime::Runtime;

/// What every worker shares, or has one of per worker.
pub struct Shared<'a> {
    pub cfg: &'a Config,
    /// One block per worker.
    pub stats: &'a [Arc<CachePadded<WorkerStats>>],
    pub snapshots: &'a Arc<SnapshotCell>,
    /// Data-path health probes' sockets, shared with the health checker.
    pub probes: &'a Arc<ProbeTable>,
    /// TEST HOOK: the worker pauses RX after this many packets.
    #[cfg(feature = "test-hooks")]
    pub pause_after_rx: Option<u64>,
}

/// One [`Worker`] per configured worker, owning the runtime's queues, and
/// the sending end of each one's mailbox.
/// `handoffs`: per worker, what it restores and where its entries go at
/// its stop (missing ones: nothing either way).
pub fn build(
    runtime: &mut Runtime,
    shared: &Shared<'_>,
    handoffs: Vec<ConntrackHandoff>,
) -> Result<(Vec<Worker>, Vec<Sender<ConntrackQuery>>), RunError> {
    let cfg = shared.cfg;
    let workers = usize::from(cfg.dataplane.workers);
    let burst_size = usize::from(cfg.dataplane.burst_size);
    let mut steering = match runtime.pool() {
        Some(pool) => steering_rings(pool, runtime, workers, burst_size)?,
        None => Vec::new(),
    };
    let mut relays = match runtime.pool() {
        Some(pool) => tap_relays(pool, &runtime.tap_queue_pairs(), workers)?,
        None => Vec::new(),
    };
    let port_ids: Vec<_> = runtime.ports().iter().map(Port::id).collect();
    let stop = runtime.stop_flag();
    let clock = runtime.clock();
    let queues = runtime.take_worker_queues(workers);
    let mut senders = Vec::with_capacity(workers);
    let mut handoffs = handoffs.into_iter();
    let built = queues
        .into_iter()
        .zip(shared.stats)
        .enumerate()
        .map(|(index, (q, stats))| Worker {
            index,
            port_ids: port_ids.clone(),
            steering: steering.get_mut(index).and_then(Option::take),
            rx: q.rx,
            tx: q.tx,
            exception: exception_paths(q.exception, relays.get_mut(index)),
            stats: Arc::clone(stats),
            snapshots: Arc::clone(shared.snapshots),
            probes: Arc::clone(shared.probes),
            stop: Arc::clone(&stop),
            clock,
            burst_size,
            conntrack_capacity: cfg.dataplane.conntrack_capacity as usize,
            idle: cfg.dataplane.idle,
            mailbox: {
                let (tx, rx) = std::sync::mpsc::channel();
                senders.push(tx);
                Some(Mailbox::new(rx))
            },
            handoff: handoffs.next().unwrap_or_default(),
            #[cfg(feature = "test-hooks")]
            test_pause: dataplane::worker::TestPause::after_rx(shared.pause_after_rx),
        })
        .collect();
    Ok((built, senders))
}

/// One flow, one shard: when a port does not put every tracked packet on
/// its owner's queue (RSS on 5-tuples, which leaves 2/3-tuple keys, ICMP
/// errors and fragments; net_af_packet and RSS-less devices, which leave
/// everything) and there are several workers, a ring from every worker to
/// every other carries tracked packets to the worker that owns their key
/// (`sluice_core::steering`). Per worker, its rings (none for any when no
/// port needs them).
fn steering_rings(
    pool: &Mempool,
    runtime: &Runtime,
    workers: usize,
    burst_size: usize,
) -> Result<Vec<Option<Steering>>, RunError> {
    let ports = runtime.ports();
    let ownership = super::ownership::of(ports, workers);
    for (port, why) in &ownership.fallbacks {
        controlplane::warn!(
            "sluice: port {port}: no RSS on 5-tuples ({why}): its workers steer every tracked packet"
        );
    }
    let names = |which: RxPlacement| -> Vec<&str> {
        ports
            .iter()
            .zip(&ownership.placement)
            .filter(|(_, &p)| p == which)
            .map(|(p, _)| p.name())
            .collect()
    };
    let (five_tuples, software) = (
        names(RxPlacement::FiveTuplesKept),
        names(RxPlacement::Software),
    );
    if workers < 2 || (five_tuples.is_empty() && software.is_empty()) {
        return Ok(Vec::new());
    }
    let mut per_worker: Vec<Steering> = (0..workers)
        .map(|_| Steering {
            to: (0..workers).map(|_| None).collect(),
            from: Vec::new(),
            ports: ownership.placement.clone(),
            owners: ownership.owners.clone(),
        })
        .collect();
    // The size the pool was made for (a port that fell back to software
    // steering at its start keeps the smaller rings: it pauses sooner).
    let slots = match runtime.steering().ring_slots(burst_size, workers) {
        0 => sluice_core::steering::rare_ring_slots(burst_size, workers),
        n => n,
    };
    for from in 0..workers {
        for to in (0..workers).filter(|&t| t != from) {
            let (p, c) = mbuf_ring(pool, &format!("sluice_steer_{from}_{to}"), slots)
                .map_err(RunError::SteeringRing)?;
            per_worker[from].to[to] = Some(p);
            per_worker[to].from.push(c);
        }
    }
    if !five_tuples.is_empty() {
        controlplane::info!(
            "sluice: RSS on 5-tuples for port(s) {five_tuples:?}: each TCP and UDP flow reaches \
             its owner among {workers} workers; {slots}-slot rings steer the rest (other \
             protocols, fragments, ICMP errors, per-session affinities)"
        );
    }
    if !software.is_empty() {
        controlplane::info!(
            "sluice: software steering between {workers} workers ({slots}-slot rings) for port(s) \
             {software:?} (their RSS places no tracked packet)"
        );
    }
    Ok(per_worker.into_iter().map(Some).collect())
}

/// One worker's end of a port's TAP relay (AP-4).
enum RelayEnd {
    /// A worker without a TAP queue pair: the ring to its owner.
    To(RingProducer),
    /// A TAP queue pair's owner: the rings from the workers relaying to it.
    From(Vec<RingConsumer>),
}

/// AP-4: a port's TAP may have fewer queue pairs than there are workers
/// (`tap_queue_pairs`, per config port; 0: no TAP). Each worker past the
/// last pair gets a single-producer single-consumer ring to the worker
/// that owns pair [`tap_owner`] and writes its punted packets to the TAP.
/// Per worker, per config port, its end (none where every worker owns a
/// pair).
fn tap_relays(
    pool: &Mempool,
    tap_queue_pairs: &[usize],
    workers: usize,
) -> Result<Vec<Vec<Option<RelayEnd>>>, RunError> {
    let mut ends: Vec<Vec<Option<RelayEnd>>> = (0..workers)
        .map(|_| tap_queue_pairs.iter().map(|_| None).collect())
        .collect();
    for (port, &pairs) in tap_queue_pairs.iter().enumerate() {
        if pairs == 0 || pairs >= workers {
            continue;
        }
        for w in pairs..workers {
            let owner = tap_owner(w, pairs);
            let (p, c) = mbuf_ring(
                pool,
                &format!("sluice_tap_{port}_{w}"),
                dataplane::worker::RELAY_SLOTS,
            )
            .map_err(RunError::TapRelayRing)?;
            ends[w][port] = Some(RelayEnd::To(p));
            match &mut ends[owner][port] {
                Some(RelayEnd::From(rings)) => rings.push(c),
                end => *end = Some(RelayEnd::From(vec![c])),
            }
        }
    }
    Ok(ends)
}

/// A worker's path to each port's TAP: its own queue pair (with the relay
/// rings into it), or the relay ring to the pair's owner.
fn exception_paths(
    queues: Vec<Option<ExceptionQueues>>,
    relays: Option<&mut Vec<Option<RelayEnd>>>,
) -> Vec<Option<ExceptionPath>> {
    let mut relays = relays.map(std::mem::take).unwrap_or_default().into_iter();
    queues
        .into_iter()
        .map(|q| match (q, relays.next().flatten()) {
            (Some(queues), Some(RelayEnd::From(relayed))) => {
                Some(ExceptionPath::Tap { queues, relayed })
            }
            (Some(queues), _) => Some(ExceptionPath::Tap {
                queues,
                relayed: Vec::new(),
            }),
            (None, Some(RelayEnd::To(ring))) => Some(ExceptionPath::Relay(ring)),
            (None, _) => None,
        })
        .collect()
}
