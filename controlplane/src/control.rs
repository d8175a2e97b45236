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

use dataplane::snapshot::{ForwardingState, Millis, SnapshotCell};

use crate::config::{self, Config};
use crate::health::{self, HealthChecker, ProbeKey, ProbeStatus};
use crate::neighbours::NeighbourResolver;
use crate::publish::{
    build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory, ServiceReport,
};

/// What other threads may read (metrics, `sluice status`).
#[derive(Debug, Default)]
pub struct Shared {
    pub view: Mutex<View>,
}

#[derive(Clone, Debug, Default)]
pub struct View {
    pub reports: Vec<ServiceReport>,
    pub health: HashMap<ProbeKey, ProbeStatus>,
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
        };
        c.rebuild();
        Ok(c)
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
        let changed = self
            .checker
            .as_ref()
            .is_some_and(|c| c.events.try_iter().count() > 0)
            | self
                .neighbours
                .as_ref()
                .is_some_and(|n| n.events.try_iter().count() > 0);
        let deadline = self
            .memory
            .next_deadline()
            .is_some_and(|d| d <= (self.clock)());
        if changed || deadline {
            self.rebuild();
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
                .health = health;
        }
        self.retired.retain(|old| Arc::strong_count(old) > 1);
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
        self.retired.push(self.cell.publish(state));
        let mut v = self.shared.view.lock().unwrap_or_else(|p| p.into_inner());
        v.reports = reports;
        v.health = health.unwrap_or_default();
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
                self.shared
                    .view
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .reloads_ok += 1;
                Ok(format!(
                    "reloaded {} (generation {})\n",
                    path.display(),
                    self.generation
                ))
            }
            Err(diags) => {
                self.shared
                    .view
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .reloads_failed += 1;
                Err(format!(
                    "{diags}\n{} error(s) in {}; the running configuration is unchanged\n",
                    diags.len(),
                    path.display()
                ))
            }
        }
    }

    /// Swaps in a validated configuration. What a running process cannot
    /// change ([`fixed_at_start_changes`]) must stay the same.
    pub fn apply(&mut self, cfg: Config) -> Result<(), String> {
        let fixed = fixed_at_start_changes(&self.cfg.dataplane, &cfg.dataplane);
        if !fixed.is_empty() {
            self.shared
                .view
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .reloads_failed += 1;
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
        if let Some(n) = &self.neighbours {
            n.set_targets(neighbour_targets(&cfg));
        }
        self.cfg = Arc::new(cfg);
        self.rebuild();
        Ok(())
    }

    /// `sluice status`: services and their backends from the running state.
    pub fn status_text(&self) -> String {
        render_status(&self.cell.load(), &self.shared.view())
    }
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
    let mut out = String::new();
    let _ = writeln!(out, "generation {}", snap.generation);
    for (svc, report) in snap.services.iter().zip(&view.reports) {
        let pool = report
            .active_pool
            .map_or("none (dropping new connections)".to_string(), |p| {
                format!("{p:?}").to_lowercase()
            });
        let _ = writeln!(
            out,
            "service {}: active pool {pool}, pool epoch {}, eligible {:?}",
            svc.name, svc.pool_epoch, report.eligible
        );
        let table = svc.tables.first();
        let slots = table.map_or(0, |t| t.slots.len()).max(1);
        let zone_of = |addr| {
            view.config.as_ref().and_then(|c| {
                let s = c.service(&svc.name)?;
                let b = s.backends.iter().find(|b| b.address == addr)?;
                Some(c.zones[b.zone?].name.clone())
            })
        };
        for &id in &svc.backends {
            let Some(b) = snap.backend(id) else { continue };
            let owned = table.map_or(0, |t| t.slots.iter().filter(|&&s| s == id).count());
            let state = match (b.draining_until, b.healthy) {
                (Some(_), _) => "draining",
                (None, true) => "healthy",
                (None, false) => "unhealthy",
            };
            let port = snap
                .ports
                .get(usize::from(b.egress.port))
                .map_or("?", |p| p.name.as_str());
            let next_hop = b.egress.next_hop_mac.map_or_else(
                || "unresolved".to_string(),
                |m| {
                    format!(
                        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} via {port}",
                        m[0], m[1], m[2], m[3], m[4], m[5]
                    )
                },
            );
            let _ = writeln!(
                out,
                "  backend {} id {} {state} weight {} zone {} pool {} share {:.2}% next-hop {next_hop}",
                b.address,
                id.0,
                b.weight,
                zone_of(b.address).unwrap_or_else(|| "-".into()),
                format!("{:?}", b.pool).to_lowercase(),
                100.0 * owned as f64 / slots as f64
            );
        }
    }
    let _ = writeln!(
        out,
        "reloads ok {} failed {}",
        view.reloads_ok, view.reloads_failed
    );
    out
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
