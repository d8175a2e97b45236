//! Where a run lets the test hooks act (`test-hooks` feature only).
//!
//! The hooks (`test_hook.rs`) implement [`RunHooks`] and `sluice run`
//! receives them as a value in its options: the run calls them at these
//! points and knows nothing else of them, so the dependency goes one way
//! (test hooks → run), and without the feature neither the points nor the
//! hooks are compiled.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use controlplane::config::Config;
use controlplane::control::Shared;
use crossbeam_utils::CachePadded;
use dataplane::dpdk::{LcoreId, Port};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;

use super::error::RunError;

/// What the test hooks may do to a run.
pub trait RunHooks {
    /// The workers pause RX after this many packets (`TestPause`).
    fn pause_after_rx(&self) -> Option<u64>;

    /// Each TAP opens with at most this many queue pairs.
    fn tap_queue_pairs(&self) -> Option<u16>;

    /// Before worker `worker` is launched on `lcore`: an error fails that
    /// launch as if DPDK had refused it.
    fn before_launch(&self, worker: usize, lcore: LcoreId, ports: &[Port]) -> Result<(), RunError>;

    /// Once every worker runs and the first snapshot is published: starts
    /// the hooks' threads, which end when `running.stop` is set.
    fn start(&mut self, running: &Running<'_>);

    /// Waits for the hooks' threads (after the stop flag is set).
    fn join(&mut self);
}

/// What a running `sluice run` offers the hooks.
pub struct Running<'a> {
    pub cfg: &'a Config,
    /// The file `--config` names: the control thread reloads from it.
    pub config_path: Option<&'a Path>,
    pub snapshots: &'a Arc<SnapshotCell>,
    /// One block per worker.
    pub stats: &'a [Arc<CachePadded<WorkerStats>>],
    /// The control thread's view (reload counts).
    pub shared: &'a Arc<Shared>,
    /// Set when the run stops.
    pub stop: &'a Arc<AtomicBool>,
}
