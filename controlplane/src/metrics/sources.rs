//! What a scrape reads: the workers' counters, the published snapshot,
//! the control thread's view, the ports and the packet pool.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;

/// What the metrics endpoint reads.
pub struct MetricsSources {
    /// One block per worker, in worker order.
    pub workers: Vec<Arc<CachePadded<WorkerStats>>>,
    /// The current snapshot names the backends (service, address).
    pub snapshot: Arc<SnapshotCell>,
    /// Label for port index i.
    pub port_names: Vec<String>,
    /// The control thread's view (health, policy, reloads); None in tests
    /// that only look at worker counters.
    pub control: Option<Arc<crate::control::Shared>>,
    /// Per port index: the DPDK port, for its link and hardware counters
    /// (empty: none exported). Holds the ports open.
    pub ports: Vec<dataplane::dpdk::PortMonitor>,
    /// Per port index: the kernel's socket drops of a `net_af_packet`
    /// port (None: another driver).
    pub kernel_drops: Vec<Option<dataplane::dpdk::af_packet::KernelDrops>>,
    /// The packet pool and its size in mbufs (None: not exported).
    pub pool: Option<(dataplane::dpdk::Mempool, usize)>,
}
