//! `sluice run`: the checks before EAL, the [`Runtime`] (EAL, pool, ports,
//! TAPs, workers), the control plane around it, the supervision loop, and
//! an orderly stop — on every path out, the runtime's drop stops and joins
//! the workers before the ports close.

use std::path::Path;
use std::sync::Arc;

use controlplane::admin::AdminState;
use controlplane::config::Config;
use controlplane::service_manager::ServiceManager;
use dataplane::dpdk::LcoreId;

mod before_eal;
pub mod control_plane;
mod eal_args;
mod error;
mod handoff;
#[cfg(feature = "test-hooks")]
pub mod hooks;
mod idle_watch;
mod options;
mod ownership;
pub mod runtime;
mod runtime_dir;
mod supervise;
mod workers;

pub use eal_args::eal_args;
pub use error::RunError;
pub use options::RunOptions;
use runtime::Runtime;
use supervise::{Control, Ended, Signals, Until};

#[cfg_attr(not(feature = "test-hooks"), allow(unused_mut))]
pub fn run(cfg: Config, mut opts: RunOptions) -> Result<(), RunError> {
    let mut service = ServiceManager::from_env();
    let signals = Signals::register().map_err(RunError::Signals)?;
    before_eal::check_host(&cfg)?;
    // Before EAL: a taken address fails here, in a second, by name.
    let admin = AdminState::new();
    let admin_server = before_eal::start_admin(&cfg, &opts, &admin)?;
    before_eal::check_conntrack(&cfg)?;

    let args = eal_args(&cfg, opts.file_prefix.as_deref());
    // From here on every `?` drops the runtime: workers stopped and
    // joined, then ports, pool and EAL, in that order.
    #[cfg(feature = "test-hooks")]
    let tap_queue_limit = opts.hooks.as_ref().and_then(|h| h.tap_queue_pairs());
    #[cfg(not(feature = "test-hooks"))]
    let tap_queue_limit = None;
    let mut runtime = Runtime::start(&cfg, &args, &admin, tap_queue_limit)?;
    #[cfg(feature = "test-hooks")]
    runtime.attach_hooks(opts.hooks.take());
    if let Some(server) = &admin_server {
        if let Err(e) = server.share_cpus_of_current_thread() {
            controlplane::warn!("sluice: admin http thread keeps its CPUs: {e}");
        }
    }
    admin.beat();
    let mut control = control_plane::start(&cfg, &mut opts, &runtime)?;
    // Data-path probes' way into the TAPs, for as long as sluice runs.
    let _probe_routes = control_plane::probe_routes(&cfg, &runtime);
    #[cfg(feature = "test-hooks")]
    let pause_after_rx = runtime.hooks().and_then(|h| h.pause_after_rx());
    // Before the workers start: the connections the previous process
    // handed over go into their shards ahead of the first packet.
    let (mut handoff, handoffs) = handoff::start(
        opts.handoff.take(),
        &cfg,
        handoff::config_identity(opts.config_path.as_deref()),
        &mut control.controller,
        handoff::owners(runtime.ports(), usize::from(cfg.dataplane.workers)),
        sluice_core::time::Millis(runtime.clock().now_ms()),
    );
    let (workers, mailboxes) = workers::build(
        &mut runtime,
        &workers::Shared {
            cfg: &cfg,
            stats: &control.stats,
            snapshots: &control.snapshots,
            probes: &control.controller.probes,
            #[cfg(feature = "test-hooks")]
            pause_after_rx,
        },
        handoffs,
    )?;
    control.controller.ask_workers_through(mailboxes);
    let mut lcores: Vec<LcoreId> = Vec::with_capacity(workers.len());
    for worker in workers {
        lcores.push(runtime.launch(worker)?);
    }
    if let Some(h) = &mut handoff {
        h.wait_restored(lcores.len(), std::time::Duration::from_secs(30));
    }
    log_started(&cfg, &runtime, &lcores);
    // /metrics and /ready answer from here on, until the runtime stops.
    runtime.publish(Arc::clone(&control.sources));
    // Ports and TAPs are up, workers poll, the first snapshot is published.
    service.ready(&format!(
        "{} worker(s), {} port(s), {} service(s)",
        lcores.len(),
        cfg.dataplane.ports.len(),
        cfg.backend_services.len()
    ));
    #[cfg(feature = "test-hooks")]
    {
        let stop = runtime.stop_flag();
        if let Some(hooks) = runtime.hooks() {
            hooks.start(&hooks::Running {
                cfg: &cfg,
                config_path: opts.config_path.as_deref(),
                snapshots: &control.snapshots,
                stats: &control.stats,
                shared: &control.controller.shared,
                stop: &stop,
            });
        }
    }

    // Announces the VIPs once /ready holds; withdraws them before the
    // ports close (its drop, below).
    let mut announce = controlplane::announce::Announcer::new(&admin, &control.controller);
    let ended = supervise::supervise(
        &Until {
            duration: opts.duration,
            exit_on_idle: opts.exit_on_idle,
        },
        &signals,
        &control.stats,
        Control {
            controller: &mut control.controller,
            requests: control.requests.as_ref(),
            admin: &admin,
            service: &mut service,
            announce: &mut announce,
        },
    );
    drop(announce);
    // A planned stop hands the connections to the next start.
    let handoff = handoff.filter(|_| ended == Ended::Signal);
    if let Some(h) = &handoff {
        h.want_entries();
    }
    stop(runtime, control, handoff, opts.metrics_dump.as_deref())
}

/// The orderly stop: workers stopped and joined, their connections
/// handed over (`handoff`, at a planned stop), the final metrics read
/// while the ports are open, everything else taken down (the runtime's
/// drop), then the metrics written to `dump` ("-": standard output).
fn stop(
    mut runtime: Runtime,
    control: control_plane::ControlPlane,
    handoff: Option<handoff::Handoff>,
    dump: Option<&Path>,
) -> Result<(), RunError> {
    runtime.stop_workers();
    if let Some(h) = handoff {
        h.write(&control.snapshots);
    }
    let final_metrics = dump.and_then(|_| runtime.final_metrics());
    // The metrics sources hold the ports open: gone before the runtime.
    drop(control);
    drop(runtime);
    let (Some(path), Some(text)) = (dump, final_metrics) else {
        return Ok(());
    };
    if path.as_os_str() == "-" {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(path, text).map_err(|source| RunError::MetricsDump {
        path: path.to_path_buf(),
        source,
    })
}

/// The line that says the appliance runs: workers, lcores, each port's
/// DPDK device and link.
fn log_started(cfg: &Config, runtime: &Runtime, lcores: &[LcoreId]) {
    let ports = cfg
        .dataplane
        .ports
        .iter()
        .zip(runtime.ports())
        .map(|(p, port)| {
            let link = port.link();
            let speed = link
                .speed_mbps
                .map_or_else(|| "speed unknown".to_string(), |s| format!("{s} Mb/s"));
            format!(
                "{}={}(dpdk {}, link {} {speed})",
                p.name,
                port.name(),
                port.id(),
                if link.up { "up" } else { "down" },
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    controlplane::info!(
        "sluice: {} worker(s) on lcores {:?}, {} port(s): {ports}",
        lcores.len(),
        lcores.iter().map(|l| l.get()).collect::<Vec<_>>(),
        cfg.dataplane.ports.len(),
    );
}
