//! A worker lcore: RX burst → staged pipeline → output lanes → TX burst.
//!
//! A worker owns one RX and one TX queue on every port, its counters and
//! its conntrack shard. Per poll ([`poll`]) it reads the clock once,
//! checks the snapshot version once, receives a burst from each port and
//! each peer's steering ring, runs every burst through the pipeline's
//! stages ([`burst_path`]) onto its output lanes ([`lanes`]: a TX burst
//! per port, the exception path to each port's TAP, a held burst per
//! steering peer, the burst's free list), sends what the lanes hold,
//! sweeps a bounded slice of the shard (CT-5), and, after a poll that
//! found nothing, polls again at once or backs off ([`idle`]). Nothing
//! shared is written but its own stats block.

// The worker is safe code over the DPDK layer's safe types: what needs
// `unsafe` lives in `crate::dpdk`.
#![forbid(unsafe_code)]

use sluice_core::probe_path::ProbeTable;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::dpdk::{PortId, RxQueue, TscClock, TxQueue};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;

mod burst_path;
pub mod conntrack_handoff;
mod exception;
mod fragments;
pub mod handover;
mod held;
mod idle;
mod lanes;
pub mod mailbox;
mod poll;
mod probes;
mod steering;
#[cfg(feature = "test-hooks")]
mod test_pause;
mod transmit;

pub use conntrack_handoff::{ConntrackHandoff, Restored, ShardOut};
#[cfg(test)]
pub(crate) use exception::a_full_relay_ring_is_a_counted_drop_and_the_owner_drains_it;
pub use exception::{tap_owner, ExceptionPath, ExceptionQueues, RELAY_SLOTS};
pub use idle::IdlePolling;
pub use steering::Steering;
#[cfg(feature = "test-hooks")]
pub use test_pause::TestPause;

/// Everything a worker owns. Built on the main lcore, moved to the worker,
/// which runs it with [`Worker::run`].
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
    /// AP-4: this worker's way to each port's TAP — its queue pair, or a
    /// relay ring to the worker that owns one (None: the port has no
    /// exception path), indexed by config port index.
    pub exception: Vec<Option<ExceptionPath>>,
    pub stats: Arc<CachePadded<WorkerStats>>,
    pub snapshots: Arc<SnapshotCell>,
    /// Data-path health probes' sockets (`sluice_core::probe_path`).
    pub probes: Arc<ProbeTable>,
    pub stop: Arc<AtomicBool>,
    pub clock: TscClock,
    /// Packets per RX poll (1..=MAX_BURST).
    pub burst_size: usize,
    /// Entries in this worker's conntrack shard (reserved at start).
    pub conntrack_capacity: usize,
    /// Busy polling, or adaptive idle for a core shared with others.
    pub idle: IdlePolling,
    /// Questions about this worker's conntrack shard (None: none asked).
    pub mailbox: Option<mailbox::Mailbox>,
    /// Entries handed over by the previous process, and where this one's
    /// go when it stops.
    pub handoff: ConntrackHandoff,
    /// TEST HOOK, only with the `test-hooks` feature: see [`TestPause`].
    #[cfg(feature = "test-hooks")]
    pub test_pause: TestPause,
}
