//! The control thread's state (AP-2): configuration, health checker,
//! policy memory, snapshot publication with a retire list, reload (AP-5)
//! and the status the control socket and the metrics report.
//!
//! Everything here runs on the EAL main lcore (`run::supervise`), except
//! [`Shared`], which the metrics and control-socket threads read, and the
//! status renderer, which runs on its own thread. One supervision step is
//! [`Controller::tick`]; each kind of event it handles has its module:
//!
//! - `health_events`: probe results, published per touched service;
//! - `neighbour_events`: the kernel's next hops (AP-4);
//! - `publish_latency`: how long a health flip takes to be published;
//! - `readers`: what the control socket answers from on its own threads;
//! - `rebuild`: the full rebuild that neighbour changes, draining
//!   deadlines (CT-10) and reloads end in;
//! - `reload`: re-reading the file, what may change while running;
//! - `retire`: freeing replaced snapshots and the backend ids they name;
//! - `status`: `sluice status`, rendered off the control thread.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::stats::WorkerStats;
use sluice_core::time::Millis;

use crate::config::Config;
use crate::health::data_socket::DataPathContext;
use crate::health::{self, HealthChecker};
use crate::neighbours::NeighbourResolver;
use crate::publish::{BackendIds, PolicyMemory};

mod changes;
mod conntrack_watch;
mod handed_over;
mod health_events;
mod neighbour_events;
pub mod publish_latency;
mod readers;
mod rebuild;
mod reload;
mod retire;
mod shared;
mod status;
mod status_json;

pub use handed_over::{DrainingBackend, HandedOver, HealthSeed};
pub use health_events::{health_changes, probe_services, ProbeServices};
pub use readers::Readers;
pub use reload::{fixed_at_start_changes, ReloadError};
pub use shared::{Shared, View};
pub use status::{render_status, render_status_counting};

pub struct Controller {
    cfg: Arc<Config>,
    path: Option<PathBuf>,
    port_macs: Vec<[u8; 6]>,
    ids: BackendIds,
    memory: PolicyMemory,
    generation: u64,
    cell: Arc<SnapshotCell>,
    /// Snapshots replaced by a publish; freed here once no worker holds one.
    retired: Vec<Arc<ForwardingState>>,
    checker: Option<HealthChecker>,
    /// AP-4: egress per backend from the kernel (ports with a TAP only).
    neighbours: Option<NeighbourResolver>,
    clock: Box<dyn Fn() -> Millis + Send>,
    view_refreshed: Instant,
    pub shared: Arc<Shared>,
    /// Data-path health probes' sockets: registered by the health
    /// checker, read by the workers.
    pub probes: Arc<sluice_core::probe_path::ProbeTable>,
    /// The workers' counters: per-backend ones cover every index before a
    /// snapshot naming it is published, and restart at zero on reuse.
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    /// Per worker: its conntrack shard was last reported near full.
    conntrack_near_full: Vec<bool>,
    /// How long an index at its last generation waits before generation 0
    /// comes round again: longer than any idle timeout configured since
    /// start (conntrack entries keep the timeout they were written with).
    id_hold_ms: u64,
    /// The backends each probe of the running configuration checks, as
    /// (service index, position in its `backend` list).
    probe_services: health_events::ProbeServices,
    /// Each worker's mailbox, for `sluice explain`'s conntrack lookups.
    mailboxes: Arc<Vec<std::sync::mpsc::Sender<dataplane::worker::mailbox::ConntrackQuery>>>,
    /// Reads the file on reload, keeping its parsed tables between loads.
    loader: crate::config::Loader,
    /// A snapshot or configuration was published whose digests are not
    /// computed yet ([`Controller::warm_digests`]).
    digests_due: bool,
}

/// How often probe counters are copied for the metrics between rebuilds.
const VIEW_REFRESH: Duration = Duration::from_millis(500);

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("generation", &self.generation)
            .finish()
    }
}

impl Controller {
    /// What the health checker's data-path probes share with the workers.
    fn data_path(&self) -> DataPathContext {
        DataPathContext {
            probes: Arc::clone(&self.probes),
            snapshots: Arc::clone(&self.cell),
        }
    }

    /// Builds and publishes the first snapshot and starts the health
    /// checker (when any service has a health check).
    pub fn new(
        cfg: Config,
        path: Option<PathBuf>,
        port_macs: Vec<[u8; 6]>,
        clock: Box<dyn Fn() -> Millis + Send>,
    ) -> std::io::Result<Self> {
        let cfg = Arc::new(cfg);
        let probes = Arc::default();
        let cell = Arc::new(SnapshotCell::new(ForwardingState::default()));
        let keys = health::probe_keys(&cfg);
        let checker = if keys.is_empty() {
            None
        } else {
            let c = HealthChecker::spawn_with(Some(DataPathContext {
                probes: Arc::clone(&probes),
                snapshots: Arc::clone(&cell),
            }))?;
            c.set_targets(keys);
            Some(c)
        };
        let mut c = Self {
            probes,
            cell,
            id_hold_ms: retire::id_hold_ms(&cfg, 0),
            probe_services: probe_services(&cfg),
            cfg,
            path,
            port_macs,
            ids: BackendIds::new(),
            memory: PolicyMemory::default(),
            generation: 0,
            retired: Vec::new(),
            checker,
            neighbours: None,
            clock,
            view_refreshed: Instant::now(),
            shared: Arc::default(),
            stats: Vec::new(),
            mailboxes: Arc::default(),
            loader: crate::config::Loader::new(),
            digests_due: false,
            conntrack_near_full: Vec::new(),
        };
        c.rebuild(rebuild::ProbeStates::Copy, rebuild::Rules::Build);
        // The first snapshot's digests before anything can ask: the start
        // is not ready until they are (a reload's come after its reply).
        c.warm_digests();
        Ok(c)
    }

    /// Reloads read the file with `loader` (the one that read it at start,
    /// whose parsed tables the first reload reuses).
    pub fn keep_loader(&mut self, loader: crate::config::Loader) {
        self.loader = loader;
    }

    /// Counts per backend in `stats` (the workers' blocks) from now on.
    pub fn count_backends_in(&mut self, stats: Vec<Arc<CachePadded<WorkerStats>>>) {
        self.stats = stats;
    }

    /// Asks these workers' mailboxes about conntrack from now on.
    pub fn ask_workers_through(
        &mut self,
        mailboxes: Vec<std::sync::mpsc::Sender<dataplane::worker::mailbox::ConntrackQuery>>,
    ) {
        self.mailboxes = Arc::new(mailboxes);
    }

    /// Backend ids and their indexes (tests, benches).
    pub fn backend_ids(&self) -> &BackendIds {
        &self.ids
    }

    /// Maglev tables built since start (tests, benches): a publish that
    /// reuses a service's tables adds nothing.
    pub fn tables_built(&self) -> u64 {
        self.memory.tables_built()
    }

    pub fn snapshots(&self) -> Arc<SnapshotCell> {
        Arc::clone(&self.cell)
    }

    /// One supervision step: picks up health changes, neighbour changes
    /// and draining deadlines, republishes when anything changed, frees
    /// retired snapshots no worker holds any more.
    pub fn tick(&mut self) {
        let (health, flips) = self.take_health_events();
        let neighbours = self.neighbours_changed();
        let deadline = self
            .memory
            .next_deadline()
            .is_some_and(|d| d <= (self.clock)());
        if neighbours || deadline {
            let published = self.rebuild(rebuild::ProbeStates::Copy, rebuild::Rules::Published);
            self.flips_published(&flips, published);
        } else if !health.is_empty() {
            if let Some(published) = self.publish_health(&health) {
                self.flips_published(&flips, published);
            }
        }
        if self.view_refreshed.elapsed() >= VIEW_REFRESH {
            self.refresh_probe_counters();
        }
        // Two relaxed loads per worker.
        self.watch_conntrack();
        self.retire();
    }

    /// Computes the digests of what was last published that `sluice
    /// status` and `/metrics` show (AP-6), here rather than in the first
    /// reader: a status right after a start or reload of 10,000 services
    /// stays a render. Tables kept from the last snapshot hit the cache.
    /// The control loop calls it once a reload has been answered, so the
    /// reply does not wait for it; nothing to do when nothing was
    /// published since.
    pub fn warm_digests(&mut self) {
        if !std::mem::take(&mut self.digests_due) {
            return;
        }
        let view = self.shared.view();
        let snap = self.cell.load();
        if let Some(cfg) = &view.config {
            view.fleet.config_digest(cfg);
        }
        for svc in &snap.services {
            view.fleet.table_digest(&snap, svc);
        }
    }
}

/// One log line per service whose new connections moved between its
/// primary and failover pools since `prev`, with the `service` field.
fn log_pool_changes(
    prev: &[crate::publish::ServiceReport],
    next: &[crate::publish::ServiceReport],
) {
    // By name: services come and go with reloads. One map, not a search
    // per service (10,000 services: 10⁸ comparisons per publish).
    let before_by_name: HashMap<&str, &crate::publish::ServiceReport> =
        prev.iter().map(|p| (p.name.as_str(), p)).collect();
    for r in next {
        let Some(before) = before_by_name.get(r.name.as_str()) else {
            continue;
        };
        if before.active_pool != r.active_pool {
            let name = |p: Option<crate::config::Pool>| match p {
                Some(crate::config::Pool::Primary) => "primary",
                Some(crate::config::Pool::Failover) => "failover",
                None => "none",
            };
            let line = format!(
                "sluice: service {}: new connections move from the {} pool to the {} pool \
                 (eligible backends {:?})",
                r.name,
                name(before.active_pool),
                name(r.active_pool),
                r.eligible
            );
            let service = r.name.as_str();
            if r.active_pool == Some(crate::config::Pool::Failover) {
                crate::warn!(service, "{line}");
            } else {
                crate::info!(service, "{line}");
            }
        }
    }
}
