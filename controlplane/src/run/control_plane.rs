//! The control plane of a run, started once the ports are up: the
//! controller (health, policy, publishing), neighbour resolution, the
//! workers' counters, the metrics sources and the control socket.

use controlplane::probe_routes::{ProbeRoutes, ProbeTap};
use std::sync::Arc;

use controlplane::config::Config;
use controlplane::control::Controller;
use controlplane::control_socket::{self, Access, BindError, ControlSocket};
use controlplane::metrics::MetricsSources;
use controlplane::neighbours::NeighbourResolver;
use crossbeam_utils::CachePadded;
use dataplane::dpdk::{af_packet, Port};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;
use sluice_core::time::Millis;

use super::error::RunError;
use super::options::RunOptions;
use super::runtime::Runtime;

/// What the control loop and the metrics work with. Holds the ports open
/// (through `sources`): dropped before the runtime.
pub struct ControlPlane {
    pub controller: Controller,
    pub snapshots: Arc<SnapshotCell>,
    /// One block per worker.
    pub stats: Vec<Arc<CachePadded<WorkerStats>>>,
    pub sources: Arc<MetricsSources>,
    /// The control socket, where `sluice reload` / `sluice status`
    /// requests come from (None: none).
    pub requests: Option<ControlSocket>,
}

pub fn start(
    cfg: &Config,
    opts: &mut RunOptions,
    runtime: &Runtime,
) -> Result<ControlPlane, RunError> {
    let workers = usize::from(cfg.dataplane.workers);
    let port_macs: Vec<[u8; 6]> = runtime.ports().iter().map(Port::mac).collect();
    // One clock for the control thread and the workers: draining deadlines
    // (CT-10) are compared against the workers' `now`.
    let clock = runtime.clock();
    let mut controller = Controller::new(
        cfg.clone(),
        opts.config_path.clone(),
        port_macs,
        Box::new(move || Millis(clock.now_ms())),
    )
    .map_err(RunError::ControlThreads)?;
    controller.keep_loader(std::mem::take(&mut opts.config_loader));
    if runtime.has_taps() {
        let names = cfg.dataplane.ports.iter().map(|p| p.tap.clone()).collect();
        let resolver = NeighbourResolver::spawn(names).map_err(RunError::ControlThreads)?;
        controller.attach_neighbours(resolver);
    } else {
        warn_unresolvable_backends(cfg);
    }
    let snapshots = controller.snapshots();
    let stats: Vec<_> = (0..workers).map(|_| Arc::new(WorkerStats::new())).collect();
    controller.count_backends_in(stats.clone());
    let sources = Arc::new(MetricsSources {
        workers: stats.clone(),
        snapshot: Arc::clone(&snapshots),
        port_names: cfg.dataplane.ports.iter().map(|p| p.name.clone()).collect(),
        control: Some(Arc::clone(&controller.shared)),
        ports: runtime.ports().iter().map(Port::monitor).collect(),
        kernel_drops: cfg
            .dataplane
            .ports
            .iter()
            .map(|p| af_packet::iface_of(&p.device).and_then(af_packet::KernelDrops::for_iface))
            .collect(),
        pool: runtime.pool().map(|p| (p.clone(), p.size())),
    });
    let requests = serve_control_socket(opts)?;
    Ok(ControlPlane {
        controller,
        snapshots,
        stats,
        sources,
        requests,
    })
}

/// The kernel's routes for data-path probes into each port's TAP
/// (`controlplane::probe_routes`); None without TAPs, or when the kernel
/// refuses them (warned: data-path probes then fail as `not_routed`).
pub fn probe_routes(cfg: &Config, runtime: &Runtime) -> Option<ProbeRoutes> {
    if !runtime.has_taps() {
        return None;
    }
    let taps: Vec<ProbeTap<'_>> = cfg
        .dataplane
        .ports
        .iter()
        .zip(runtime.ports())
        .enumerate()
        .filter_map(|(i, (p, port))| {
            Some(ProbeTap {
                port: u32::try_from(i).ok()?,
                iface: p.tap.as_deref()?,
                mac: p.mac.unwrap_or_else(|| port.mac()),
                ipv4: p.ipv4.is_some(),
                ipv6: p.ipv6.is_some(),
            })
        })
        .collect();
    match ProbeRoutes::install(&taps) {
        Ok(routes) => Some(routes),
        Err(e) => {
            controlplane::warn!(
                "sluice: routes for data-path health checks: {e}; checks with path = \"data\" \
                 fail as not_routed"
            );
            None
        }
    }
}

/// The control socket (AP-5). Another sluice answering at its path is
/// warned about and this one runs without (reload with SIGHUP); anything
/// else there that is not a socket, or a socket that cannot be made,
/// stops the start.
fn serve_control_socket(opts: &RunOptions) -> Result<Option<ControlSocket>, RunError> {
    let Some(path) = opts.control_socket.as_deref() else {
        return Ok(None);
    };
    match control_socket::serve(path, Access::new(opts.control_socket_group.clone())) {
        Ok(socket) => Ok(Some(socket)),
        Err(e @ BindError::Live { .. }) => {
            controlplane::warn!("sluice: control socket: {e}; reload with SIGHUP instead");
            Ok(None)
        }
        Err(e) => Err(RunError::ControlThreads(std::io::Error::other(format!(
            "control socket: {e}"
        )))),
    }
}

/// Without a TAP nothing resolves a backend's next hop: one without a
/// static `mac` gets no traffic.
fn warn_unresolvable_backends(cfg: &Config) {
    for b in cfg.backend_services.iter().flat_map(|s| &s.backends) {
        if b.mac.is_none() {
            controlplane::warn!(
                "sluice: backend {} has no `mac` and no port has a `tap` to resolve it \
                 through the kernel: its packets are dropped as next_hop_unresolved",
                b.address
            );
        }
    }
}
