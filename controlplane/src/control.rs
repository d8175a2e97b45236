//! The control thread's state (AP-2): configuration, health checker,
//! policy memory, snapshot publication with a retire list, reload (AP-5)
//! and the status the control socket and the metrics report.
//!
//! Everything here runs on the EAL main lcore (run.rs `supervise`), except
//! [`Shared`], which the metrics and control-socket threads read.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::stats::WorkerStats;
use sluice_core::time::Millis;

use crate::config::{self, Config};
use crate::health::{self, HealthChecker, ProbeKey, ProbeStatus};
use crate::neighbours::NeighbourResolver;
use crate::publish::{
    build_forwarding_state_with, rebuild_services, BackendIds, BuildInputs, HealthChange,
    PolicyMemory, ServiceReport,
};

/// What other threads may read (metrics, `sluice status`).
#[derive(Debug, Default)]
pub struct Shared {
    pub view: Mutex<View>,
}

/// Cheap to clone: the large parts are shared, so a reader (metrics,
/// `sluice status`) holds the lock only for a few reference counts.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub reports: Arc<Vec<ServiceReport>>,
    pub health: Arc<HashMap<ProbeKey, ProbeStatus>>,
    pub config: Option<Arc<Config>>,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub last_build_seconds: f64,
}

impl Shared {
    pub fn view(&self) -> View {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

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
    /// The workers' counters: per-backend ones cover every index before a
    /// snapshot naming it is published, and restart at zero on reuse.
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    /// How long an index at its last generation waits before generation 0
    /// comes round again: longer than any idle timeout configured since
    /// start (conntrack entries keep the timeout they were written with).
    id_hold_ms: u64,
    /// The backends each probe of the running configuration checks, as
    /// (service index, position in its `backend` list).
    probe_services: HashMap<ProbeKey, Vec<(usize, usize)>>,
}

/// How often probe counters are copied for the metrics between rebuilds.
const VIEW_REFRESH: std::time::Duration = std::time::Duration::from_millis(500);

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("generation", &self.generation)
            .finish()
    }
}

impl Controller {
    /// Builds and publishes the first snapshot and starts the health
    /// checker (when any service has a health check).
    pub fn new(
        cfg: Config,
        path: Option<PathBuf>,
        port_macs: Vec<[u8; 6]>,
        clock: Box<dyn Fn() -> Millis + Send>,
    ) -> std::io::Result<Self> {
        let cfg = Arc::new(cfg);
        let keys = health::probe_keys(&cfg);
        let checker = if keys.is_empty() {
            None
        } else {
            let c = HealthChecker::spawn()?;
            c.set_targets(keys);
            Some(c)
        };
        let mut c = Self {
            cell: Arc::new(SnapshotCell::new(ForwardingState::default())),
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
            id_hold_ms: 0,
            probe_services: HashMap::new(),
        };
        c.id_hold_ms = id_hold_ms(&c.cfg, 0);
        c.probe_services = probe_services(&c.cfg);
        c.rebuild();
        Ok(c)
    }

    /// Counts per backend in `stats` (the workers' blocks) from now on.
    pub fn count_backends_in(&mut self, stats: Vec<Arc<CachePadded<WorkerStats>>>) {
        let len = self.cell.load().backends.len();
        for s in &stats {
            s.backend_packets.cover(len);
        }
        self.stats = stats;
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

    /// Takes backends' egress from the kernel from now on (AP-4); backends
    /// without a static `mac` are unresolved until the resolver says.
    pub fn attach_neighbours(&mut self, resolver: NeighbourResolver) {
        resolver.set_targets(neighbour_targets(&self.cfg));
        self.neighbours = Some(resolver);
        self.rebuild();
    }

    pub fn snapshots(&self) -> Arc<SnapshotCell> {
        Arc::clone(&self.cell)
    }

    /// One supervision step: picks up health changes and draining
    /// deadlines, republishes when anything changed, frees retired
    /// snapshots no worker holds any more.
    pub fn tick(&mut self) {
        let events: Vec<health::Event> = self
            .checker
            .as_ref()
            .map(|c| c.events.try_iter().collect())
            .unwrap_or_default();
        self.log_health_flips(&events);
        let health: Vec<ProbeKey> = events.into_iter().map(|e| e.key).collect();
        let neighbours = self
            .neighbours
            .as_ref()
            .is_some_and(|n| n.events.try_iter().count() > 0);
        let deadline = self
            .memory
            .next_deadline()
            .is_some_and(|d| d <= (self.clock)());
        if neighbours || deadline {
            self.rebuild();
        } else if !health.is_empty() {
            self.publish_health(&health);
        } else if let Some(c) = self
            .checker
            .as_ref()
            .filter(|_| self.view_refreshed.elapsed() >= VIEW_REFRESH)
        {
            // Counters (probes, latency) move without state changes; copy
            // them for the metrics now and then, not every 10 ms tick.
            self.view_refreshed = Instant::now();
            let health = c.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
            self.shared
                .view
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .health = Arc::new(health);
        }
        self.retired.retain(|old| Arc::strong_count(old) > 1);
        self.release_ids();
    }

    /// One log line per probe whose healthy flag flipped: healthy at info,
    /// unhealthy at warning priority.
    fn log_health_flips(&self, events: &[health::Event]) {
        let Some(checker) = &self.checker else { return };
        if !events.iter().any(|e| e.change.health) {
            return;
        }
        let status = checker.status.lock().unwrap_or_else(|p| p.into_inner());
        for e in events.iter().filter(|e| e.change.health) {
            let Some(s) = status.get(&e.key) else {
                continue;
            };
            if s.state.healthy {
                crate::info!(
                    "sluice: health: backend {} is healthy (weight {})",
                    e.key.addr,
                    s.state.weight
                );
            } else {
                crate::warn!("sluice: health: backend {} is unhealthy", e.key.addr);
            }
        }
    }

    /// Frees the ids no snapshot still in use names (a worker, the metrics
    /// or a status request may hold a retired one), zeroing their counters.
    fn release_ids(&mut self) {
        let oldest = self
            .retired
            .iter()
            .map(|s| s.generation)
            .min()
            .map_or(self.generation, |g| g.min(self.generation));
        let stats = &self.stats;
        self.ids
            .release(oldest, (self.clock)(), self.id_hold_ms, |index| {
                for s in stats {
                    s.backend_packets.reset(index);
                }
            });
    }

    /// Health events for the probes `keys`: rebuilds and publishes only
    /// the services those probes check (nothing when the running
    /// configuration has none of them). Work: the events' backends, then
    /// eligibility and table per touched service.
    fn publish_health(&mut self, keys: &[ProbeKey]) {
        let Some(checker) = &self.checker else { return };
        let started = Instant::now();
        let changes = {
            let status = checker.status.lock().unwrap_or_else(|p| p.into_inner());
            health_changes(&self.probe_services, &status, keys)
        };
        if changes.is_empty() {
            return;
        }
        let prev = self.cell.load();
        let prev_reports = Arc::clone(&self.shared.view().reports);
        self.generation += 1;
        let (state, reports) = rebuild_services(
            &prev,
            &prev_reports,
            &self.cfg,
            &mut self.memory,
            &changes,
            self.generation,
        );
        drop(prev);
        self.retired.push(self.cell.publish(state));
        let published = started.elapsed().as_secs_f64();
        self.retired.retain(|old| Arc::strong_count(old) > 1);
        self.release_ids();
        // After the publish: the metrics' copy of the probe states, which
        // must agree with the snapshot (`sluice_backend_healthy`).
        self.view_refreshed = Instant::now();
        let health = self
            .checker
            .as_ref()
            .map(|c| c.status.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default();
        let mut v = self.shared.view.lock().unwrap_or_else(|p| p.into_inner());
        v.reports = Arc::new(reports);
        v.health = Arc::new(health);
        v.last_build_seconds = published;
    }

    fn rebuild(&mut self) {
        let started = Instant::now();
        let health = self
            .checker
            .as_ref()
            .map(|c| c.status.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let neighbours = self
            .neighbours
            .as_ref()
            .map(|n| n.table.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let inputs = BuildInputs {
            health: health.as_ref(),
            now: (self.clock)(),
            neighbours: neighbours.as_ref(),
        };
        self.generation += 1;
        let (state, reports) = build_forwarding_state_with(
            &self.cfg,
            &self.port_macs,
            &mut self.ids,
            &mut self.memory,
            &inputs,
            self.generation,
        );
        for s in &self.stats {
            s.backend_packets.cover(state.backends.len());
        }
        self.retired.push(self.cell.publish(state));
        self.retired.retain(|old| Arc::strong_count(old) > 1);
        self.release_ids();
        let health = health.unwrap_or_default();
        let mut v = self.shared.view.lock().unwrap_or_else(|p| p.into_inner());
        v.reports = Arc::new(reports);
        v.health = Arc::new(health);
        v.config = Some(Arc::clone(&self.cfg));
        v.last_build_seconds = started.elapsed().as_secs_f64();
    }

    /// AP-5: re-reads the configuration file. On error the running
    /// configuration stays and the diagnostics are returned.
    pub fn reload(&mut self) -> Result<String, String> {
        let Some(path) = self.path.clone() else {
            return Err("sluice runs without a configuration file path".into());
        };
        match config::load_file(&path) {
            Ok(cfg) => {
                self.apply(cfg)?;
                self.count_reload(true);
                Ok(format!(
                    "reloaded {} (generation {})\n",
                    path.display(),
                    self.generation
                ))
            }
            Err(diags) => {
                self.count_reload(false);
                Err(format!(
                    "{diags}\n{} error(s) in {}; the running configuration is unchanged\n",
                    diags.len(),
                    path.display()
                ))
            }
        }
    }

    /// Counts a reload, applied or refused, for `sluice status`.
    fn count_reload(&self, applied: bool) {
        let mut view = self.shared.view.lock().unwrap_or_else(|p| p.into_inner());
        if applied {
            view.reloads_ok += 1;
        } else {
            view.reloads_failed += 1;
        }
    }

    /// Swaps in a validated configuration. What a running process cannot
    /// change ([`fixed_at_start_changes`]) must stay the same.
    pub fn apply(&mut self, cfg: Config) -> Result<(), String> {
        let fixed = fixed_at_start_changes(&self.cfg.dataplane, &cfg.dataplane);
        if !fixed.is_empty() {
            self.count_reload(false);
            return Err(format!(
                "{} cannot change on reload (ports, their TAPs, queues and memory are set up \
                 at start); restart sluice for that. The running configuration is unchanged.\n",
                fixed.join(", ")
            ));
        }
        let keys = health::probe_keys(&cfg);
        match &self.checker {
            Some(c) => c.set_targets(keys),
            None if !keys.is_empty() => {
                let c = HealthChecker::spawn().map_err(|e| e.to_string())?;
                c.set_targets(keys);
                self.checker = Some(c);
            }
            None => {}
        }
        let missing = self.ids.missing(&cfg);
        if missing > self.ids.assignable() {
            self.count_reload(false);
            return Err(format!(
                "the new configuration adds {missing} backends but only {} backend ids are \
                 free: {} are held by configured backends, backends still draining \
                 (connection_draining_timeout) and ids waiting for their conntrack entries \
                 to expire. Reload again once removed backends have drained, or add fewer \
                 backends at once. The running configuration is unchanged.\n",
                self.ids.assignable(),
                self.ids.held()
            ));
        }
        if let Some(n) = &self.neighbours {
            n.set_targets(neighbour_targets(&cfg));
        }
        self.id_hold_ms = id_hold_ms(&cfg, self.id_hold_ms);
        self.probe_services = probe_services(&cfg);
        self.cfg = Arc::new(cfg);
        self.rebuild();
        Ok(())
    }

    /// `sluice status`: services and their backends from the running state.
    pub fn status_text(&self) -> String {
        (self.status_renderer())()
    }

    /// Renders `sluice status` from the published snapshot and view, on
    /// whichever thread calls it: a status request over a big
    /// configuration does not hold up the control thread's publishes.
    pub fn status_renderer(&self) -> impl FnOnce() -> String + Send + 'static {
        let cell = Arc::clone(&self.cell);
        let shared = Arc::clone(&self.shared);
        move || render_status(&cell.load(), &shared.view())
    }
}

fn pool_name(p: sluice_core::backend::Pool) -> &'static str {
    match p {
        sluice_core::backend::Pool::Primary => "primary",
        sluice_core::backend::Pool::Failover => "failover",
    }
}

/// The backends (service index, position) each health probe of `cfg`
/// checks.
pub fn probe_services(cfg: &Config) -> HashMap<ProbeKey, Vec<(usize, usize)>> {
    let mut out: HashMap<ProbeKey, Vec<(usize, usize)>> = HashMap::new();
    for (si, s) in cfg.backend_services.iter().enumerate() {
        let Some(hc) = s.health_check.map(|i| &cfg.health_checks[i]) else {
            continue;
        };
        for (position, b) in s.backends.iter().enumerate() {
            out.entry(health::probe_key(hc, b.address))
                .or_default()
                .push((si, position));
        }
    }
    out
}

/// The backend changes that health events for the probes `keys` make:
/// one per (service, position) in `probe_services` that a probe checks,
/// with the probe's state in `status` (a probe without one is skipped).
pub fn health_changes(
    probe_services: &HashMap<ProbeKey, Vec<(usize, usize)>>,
    status: &HashMap<ProbeKey, ProbeStatus>,
    keys: &[ProbeKey],
) -> Vec<HealthChange> {
    let mut changes = Vec::new();
    for key in keys {
        let Some(s) = status.get(key) else { continue };
        for &(service, position) in probe_services.get(key).into_iter().flatten() {
            changes.push(HealthChange {
                service,
                position,
                healthy: s.state.healthy,
                weight: s.state.weight,
            });
        }
    }
    changes
}

/// Hold before an id's generation wraps (see `backend_ids`): the longest
/// idle timeout of `cfg` or configured before (`previous`), plus a second
/// for bursts in flight.
fn id_hold_ms(cfg: &Config, previous: u64) -> u64 {
    cfg.backend_services
        .iter()
        .map(|s| u64::try_from(s.connection_tracking.idle_timeout.as_millis()).unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0)
        .saturating_add(1_000)
        .max(previous)
}

/// The `[dataplane]` settings that differ between `old` and `new` although
/// only a restart applies them (EAL, lcores, mempool, conntrack shards,
/// ports and their TAPs are set up once); named as in the file.
pub fn fixed_at_start_changes(
    old: &config::DataplaneConfig,
    new: &config::DataplaneConfig,
) -> Vec<String> {
    let mut changed = Vec::new();
    let mut check = |differs: bool, what: String| {
        if differs {
            changed.push(what);
        }
    };
    check(old.eal_args != new.eal_args, "dataplane.eal_args".into());
    check(old.workers != new.workers, "dataplane.workers".into());
    check(
        old.burst_size != new.burst_size,
        "dataplane.burst_size".into(),
    );
    check(old.mbufs != new.mbufs, "dataplane.mbufs".into());
    check(
        old.conntrack_capacity != new.conntrack_capacity,
        "dataplane.conntrack_capacity".into(),
    );
    if old.ports.len() != new.ports.len() {
        check(true, "the number of dataplane ports".into());
        return changed;
    }
    for (o, n) in old.ports.iter().zip(&new.ports) {
        let at = |field: &str| format!("dataplane.port {:?}.{field}", o.name);
        check(o.name != n.name, at("name"));
        check(o.device != n.device, at("device"));
        check(o.mac != n.mac, at("mac"));
        check(o.ipv4 != n.ipv4, at("address"));
        check(o.ipv6 != n.ipv6, at("address6"));
        check(o.mtu != n.mtu, at("mtu"));
        check(o.tap != n.tap, at("tap"));
        check(o.gateways != n.gateways, at("gateway"));
    }
    changed
}

/// Backends whose next hop the kernel must resolve (no static `mac`).
fn neighbour_targets(cfg: &Config) -> Vec<std::net::IpAddr> {
    cfg.backend_services
        .iter()
        .flat_map(|s| &s.backends)
        .filter(|b| b.mac.is_none())
        .map(|b| b.address)
        .collect()
}

/// Renders the status report (also used by tests).
pub fn render_status(snap: &ForwardingState, view: &View) -> String {
    render_status_counting(snap, view, &mut 0)
}

/// [`render_status`], adding to `work` the table slots and backends it
/// visits: one pass over each service's table and one over its backends,
/// O(M + N) per service.
pub fn render_status_counting(snap: &ForwardingState, view: &View, work: &mut u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "generation {}", snap.generation);
    let configured: HashMap<&str, &config::BackendServiceConfig> = view
        .config
        .iter()
        .flat_map(|c| &c.backend_services)
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut owned = vec![0u32; snap.backends.len()];
    for (svc, report) in snap.services.iter().zip(view.reports.iter()) {
        let pool = report
            .active_pool
            .map_or("none (dropping new connections)", pool_name);
        let _ = writeln!(
            out,
            "service {}: active pool {pool}, pool epoch {}, eligible {:?}",
            svc.name, svc.pool_epoch, report.eligible
        );
        let table = svc.tables.first();
        let slots = table.map_or(0, |t| t.slots.len()).max(1);
        // Slots per backend index; a table names only backends of this
        // snapshot, whose indexes are distinct.
        for &id in table.iter().flat_map(|t| t.slots.iter()) {
            if let Some(n) = owned.get_mut(id.index()) {
                *n += 1;
            }
        }
        *work += table.map_or(0, |t| t.slots.len() as u64);
        let zones: HashMap<std::net::IpAddr, &str> = configured
            .get(svc.name.as_str())
            .zip(view.config.as_ref())
            .map(|(s, c)| {
                s.backends
                    .iter()
                    .filter_map(|b| Some((b.address, c.zones.get(b.zone?)?.name.as_str())))
                    .collect()
            })
            .unwrap_or_default();
        let failing = last_failures(view, configured.get(svc.name.as_str()).copied());
        for &id in &svc.backends {
            *work += 1;
            let Some(b) = snap.backend(id) else { continue };
            let owned = owned.get_mut(id.index()).map_or(0, std::mem::take);
            let state = match (b.draining_until, b.healthy) {
                (Some(_), _) => "draining",
                (None, true) => "healthy",
                (None, false) => "unhealthy",
            };
            let port = snap
                .ports
                .get(usize::from(b.egress.port))
                .map_or("?", |p| p.name.as_str());
            let zone = if zones.is_empty() {
                "-"
            } else {
                zones.get(&b.address).copied().unwrap_or("-")
            };
            let _ = write!(
                out,
                "  backend {} id {} {state} weight {} zone {zone} pool {} share {:.2}% next-hop ",
                b.address,
                id.0,
                b.weight,
                pool_name(b.pool),
                100.0 * f64::from(owned) / slots as f64
            );
            let _ = match b.egress.next_hop_mac {
                Some(m) => write!(
                    out,
                    "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} via {port}",
                    m[0], m[1], m[2], m[3], m[4], m[5]
                ),
                None => write!(out, "unresolved"),
            };
            if let Some(reason) = failing.get(&b.address) {
                let _ = write!(out, " last-failure {}", reason.name());
            }
            out.push('\n');
        }
    }
    let _ = writeln!(
        out,
        "reloads ok {} failed {}",
        view.reloads_ok, view.reloads_failed
    );
    out
}

/// Why the latest probe failed, for each backend of `svc` whose latest
/// probe failed (none without a health check).
fn last_failures(
    view: &View,
    svc: Option<&config::BackendServiceConfig>,
) -> HashMap<std::net::IpAddr, health::FailureReason> {
    let (Some(cfg), Some(svc)) = (view.config.as_ref(), svc) else {
        return HashMap::new();
    };
    let Some(hc) = svc.health_check.map(|i| &cfg.health_checks[i]) else {
        return HashMap::new();
    };
    if view.health.is_empty() {
        return HashMap::new();
    }
    svc.backends
        .iter()
        .filter_map(|b| {
            let st = view.health.get(&health::probe_key(hc, b.address))?;
            Some((b.address, st.last_failure?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"
tap = "sl-up"
"#;

    fn dp(text: &str) -> config::DataplaneConfig {
        config::load_str(text, "test.toml").unwrap().dataplane
    }

    /// `sluice status` is one pass over each table and one over each
    /// service's backends: 2,000 backends over 65,537 slots visit
    /// M + N items, not N × M (131 million, as when each backend's share was
    /// counted over the whole table).
    #[test]
    fn status_work_is_linear_in_table_and_backends() {
        let c = config::load_str(&crate::synthetic::big_config(1, 2000, 65537), "t")
            .unwrap_or_else(|d| panic!("{d}"));
        let mut ids = crate::publish::BackendIds::new();
        let snap = crate::publish::build_forwarding_state(&c, &[], &mut ids, 1);
        let view = View {
            reports: Arc::new(vec![ServiceReport::default()]),
            config: Some(Arc::new(c)),
            ..View::default()
        };
        let mut work = 0;
        let text = render_status_counting(&snap, &view, &mut work);
        assert_eq!(work, 65_537 + 2_000);
        let shares: f64 = text
            .lines()
            .filter_map(|l| {
                l.split(" share ")
                    .nth(1)?
                    .split('%')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        assert_eq!(text.matches("  backend ").count(), 2000);
        assert!((shares - 100.0).abs() < 0.5, "shares add up: {shares}");
    }

    /// AP-5: a reload that changes what only a restart applies is refused
    /// and names every such field; backends, rules and the like may change.
    #[test]
    fn ap_5_reload_names_settings_fixed_at_start() {
        let old = dp(BASE);
        assert!(fixed_at_start_changes(&old, &dp(BASE)).is_empty());
        let new = dp(&BASE
            .replace("192.0.2.1/24", "192.0.2.2/24")
            .replace("sl-up", "sl-other")
            .replace("[dataplane]", "[dataplane]\nworkers = 2"));
        assert_eq!(
            fixed_at_start_changes(&old, &new),
            [
                "dataplane.workers",
                "dataplane.port \"uplink\".address",
                "dataplane.port \"uplink\".tap",
            ]
        );
    }
}
