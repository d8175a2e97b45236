//! Control-plane costs on big configurations measured
//! on the control thread's own code paths:
//!
//! ```sh
//! cargo run --release -p sluice-benches --example control_plane -- 10000 10 1021
//! cargo run --release -p sluice-benches --example control_plane -- 1 100000 655373
//! ```
//!
//! Arguments: services, backends per service, Maglev table size. Prints,
//! in milliseconds:
//!
//! * `start`: parse + validate + first build (every table);
//! * `health flip -> published`: one backend's probe turns unhealthy (or
//!   healthy again); as `Controller::publish_health` does, the probes are
//!   compared with the last published ones, the touched service is
//!   rebuilt (`rebuild_services`) and the snapshot published;
//! * `reload`: the same file parsed, validated, built and published again
//!   (unchanged services keep their tables);
//! * `status`: `sluice status` rendered from the published snapshot (on
//!   its own thread in `sluice run`, never on the control thread);
//! * `longest control step`: the most the control thread is busy at once,
//!   hence what SIGTERM may wait for (it is checked between steps, every
//!   10 ms).

use std::sync::Arc;
use std::time::Instant;

use controlplane::config::load_str;
use controlplane::control::{health_changes, probe_services, render_status, View};
use controlplane::health::{probe_key, ProbeKey};
use controlplane::publish::{
    build_forwarding_state_with, rebuild_services, BackendIds, BuildInputs, PolicyMemory,
    ServiceReport,
};
use controlplane::synthetic::{all_healthy, big_config, probe_status};
use sluice_core::snapshot::{ForwardingState, SnapshotCell};

/// A stopwatch of wall time and of this thread's CPU time: on a shared
/// machine the CPU time is what the work costs, the wall time what it
/// cost here under the other load.
#[derive(Copy, Clone)]
struct Watch {
    wall: Instant,
    cpu_ns: u64,
}

/// Nanoseconds this thread has run (`/proc/thread-self/schedstat`).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Watch {
    fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu_ns: cpu_ns(),
        }
    }
    /// (wall ms, cpu ms) since start.
    fn ms(self) -> (f64, f64) {
        (
            self.wall.elapsed().as_secs_f64() * 1e3,
            (cpu_ns() - self.cpu_ns) as f64 / 1e6,
        )
    }
}

struct Plane {
    reports: Vec<ServiceReport>,
    probe_services: controlplane::control::ProbeServices,
    ids: BackendIds,
    memory: PolicyMemory,
    cell: SnapshotCell,
    retired: Vec<Arc<ForwardingState>>,
    generation: u64,
}

impl Plane {
    /// What `Controller::rebuild` does: copy the probe states, build,
    /// publish, retire.
    fn publish(
        &mut self,
        cfg: &controlplane::config::Config,
        health: &controlplane::health::ProbeStatuses,
    ) {
        let health = health.clone();
        let inputs = BuildInputs::with_health(&health);
        self.generation += 1;
        let (state, reports) = build_forwarding_state_with(
            cfg,
            &[],
            &mut self.ids,
            &mut self.memory,
            &inputs,
            self.generation,
        );
        self.reports = reports;
        self.retired.push(self.cell.publish(state));
        self.retired.retain(|s| Arc::strong_count(s) > 1);
    }

    /// What `Controller::publish_health` does for the events of `keys`:
    /// look their probes up, rebuild the services they check, publish,
    /// retire.
    fn publish_health(
        &mut self,
        cfg: &controlplane::config::Config,
        health: &controlplane::health::ProbeStatuses,
        keys: &[ProbeKey],
    ) {
        let changes = health_changes(&self.probe_services, health, keys);
        self.generation += 1;
        let prev = self.cell.load();
        let (state, reports) = rebuild_services(
            &prev,
            &self.reports,
            cfg,
            &mut self.memory,
            &changes,
            self.generation,
        );
        drop(prev);
        self.reports = reports;
        self.retired.push(self.cell.publish(state));
        self.retired.retain(|s| Arc::strong_count(s) > 1);
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let (services, per, table) = (args[0], args[1], args[2] as u32);
    let text = big_config(services, per, table);

    let t = Watch::start();
    let cfg = load_str(&text, "bench.toml").unwrap_or_else(|d| panic!("{d}"));
    let hc = cfg.health_checks[0].clone();
    let mut health = all_healthy(&cfg);
    let mut plane = Plane {
        reports: Vec::new(),
        probe_services: probe_services(&cfg),
        ids: BackendIds::new(),
        memory: PolicyMemory::default(),
        cell: SnapshotCell::new(ForwardingState::default()),
        retired: Vec::new(),
        generation: 0,
    };
    plane.publish(&cfg, &health);
    let start = t.ms();
    let built_at_start = plane.memory.tables_built();

    let mut flips = Vec::new();
    for round in 0..5 {
        let svc = &cfg.backend_services[(round * 7919) % services];
        let b = &svc.backends[(round * 31) % per];
        let key = probe_key(&hc, b.address);
        health.insert(key.clone(), probe_status(round % 2 == 1));
        let t = Watch::start();
        plane.publish_health(&cfg, &health, &[key]);
        flips.push(t.ms());
    }
    let built_by_flips = plane.memory.tables_built() - built_at_start;

    let mut reloads = Vec::new();
    let mut parses = Vec::new();
    for _ in 0..3 {
        let t = Watch::start();
        let cfg = load_str(&text, "bench.toml").unwrap_or_else(|d| panic!("{d}"));
        parses.push(t.ms());
        plane.publish(&cfg, &health);
        reloads.push(t.ms());
    }

    let snap = plane.cell.load();
    let view = View {
        reports: Arc::new(plane.reports.clone()),
        config: Some(Arc::new(cfg)),
        ..View::default()
    };
    let mut statuses = Vec::new();
    let mut lines = 0;
    for _ in 0..3 {
        let t = Watch::start();
        lines = render_status(&snap, &view).lines().count();
        statuses.push(t.ms());
    }

    // The slowest of the rounds, wall and CPU.
    let max = |v: &[(f64, f64)]| {
        v.iter()
            .fold((0.0f64, 0.0f64), |(w, c), &(a, b)| (w.max(a), c.max(b)))
    };
    let show = |(w, c): (f64, f64)| format!("{w:.1} ms wall, {c:.1} ms CPU");
    println!(
        "{services} services x {per} backends, M = {table} ({} backends)",
        services * per
    );
    println!(
        "start (parse, validate, first build): {}, {built_at_start} tables",
        show(start)
    );
    println!(
        "health flip -> published: max {} over {} flips ({built_by_flips} tables built)",
        show(max(&flips)),
        flips.len()
    );
    println!(
        "reload (parse, validate, build, publish): max {}; parse + validate max {}",
        show(max(&reloads)),
        show(max(&parses))
    );
    println!("status: max {} ({lines} lines)", show(max(&statuses)));
    let (fw, fc) = max(&flips);
    let (rw, rc) = max(&reloads);
    println!(
        "longest control step (bounds the SIGTERM wait): {}",
        show((fw.max(rw), fc.max(rc)))
    );
}
