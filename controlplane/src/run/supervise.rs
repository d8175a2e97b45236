//! The main lcore once the workers run: signals, reloads, status
//! requests, `--duration` and `--exit-on-idle`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane::admin_http::AdminState;
use controlplane::announce::{Announcer, Stop};
use controlplane::control::{Controller, ReloadError};
use controlplane::control_socket::{Pending, Request};
use controlplane::service_manager::ServiceManager;
use crossbeam_utils::CachePadded;
use sluice_core::stats::WorkerStats;

use super::idle_watch::IdleWatch;

/// SIGINT/SIGTERM (stop) and SIGHUP (reload), raised since the last check.
pub struct Signals {
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    pub fn register() -> std::io::Result<Self> {
        let term = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&term))?;
        }
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
        Ok(Self { term, hup })
    }
}

/// When the run ends by itself (`--duration`, `--exit-on-idle`).
pub struct Until {
    pub duration: Option<Duration>,
    pub exit_on_idle: Option<Duration>,
}

/// What the control loop drives.
pub struct Control<'a> {
    pub controller: &'a mut Controller,
    pub requests: Option<&'a Receiver<Pending>>,
    pub admin: &'a AdminState,
    pub service: &'a mut ServiceManager,
    pub announce: &'a mut Announcer,
}

/// Waits on the main lcore until a signal, the duration, or idleness says stop.
///
/// Between checks it is the control thread (AP-2): health results, draining
/// deadlines, reloads (SIGHUP or the control socket) and status requests.
pub fn supervise(
    until: &Until,
    signals: &Signals,
    stats: &[Arc<CachePadded<WorkerStats>>],
    ctl: Control<'_>,
) {
    let started = Instant::now();
    let mut idle = until
        .exit_on_idle
        .map(|limit| IdleWatch::new(limit, stats, started));
    loop {
        // One liveness for /healthz and systemd's watchdog: this loop ran.
        ctl.admin.beat();
        ctl.service.alive();
        std::thread::sleep(Duration::from_millis(10));
        if signals.term.swap(false, Ordering::Relaxed) {
            ctl.service.stopping();
            if ctl.announce.stop() == Stop::Now {
                controlplane::info!("sluice: signal received, stopping");
                return;
            }
        }
        if ctl.announce.drain_over() {
            controlplane::info!("sluice: drained, stopping");
            return;
        }
        ctl.controller.tick();
        ctl.announce.update(ctl.controller);
        if signals.hup.swap(false, Ordering::Relaxed) {
            let _ = reload(ctl.controller, ctl.service);
        }
        for p in ctl.requests.into_iter().flat_map(|r| r.try_iter()) {
            answer(p, ctl.controller, ctl.service);
        }
        if until.duration.is_some_and(|d| started.elapsed() >= d) {
            return;
        }
        if idle.as_mut().is_some_and(|w| w.idle(stats, Instant::now())) {
            return;
        }
    }
}

/// Reloads the configuration file. systemd sees RELOADING=1 ... READY=1
/// around every reload, refused or not: a refused one leaves the running
/// configuration serving.
fn reload(controller: &mut Controller, service: &ServiceManager) -> Result<String, ReloadError> {
    service.reloading();
    let result = controller.reload();
    match &result {
        Ok(m) => {
            controlplane::info!("sluice: {m}");
            service.ready(m.trim_end());
        }
        Err(e) => {
            controlplane::error!("sluice: reload failed:\n{e}");
            service.ready("reload refused; the running configuration is unchanged");
        }
    }
    result
}

/// Answers one control-socket request.
fn answer(p: Pending, controller: &mut Controller, service: &ServiceManager) {
    let Pending { request, reply } = p;
    match request {
        Request::Reload => {
            let _ = reply.send(reload(controller, service).map_err(|e| e.to_string()));
        }
        // Rendered on its own thread from the published state: a status
        // over a big configuration never delays a publish.
        Request::Status => {
            let render = controller.status_renderer();
            on_thread(reply, "status", move || Ok(render()))
        }
        Request::StatusJson => {
            let render = controller.status_json_renderer();
            on_thread(reply, "status", move || Ok(render()))
        }
        // Like status: from the published state, on its own thread; a
        // request it cannot answer is an `error` reply (the client exits
        // non-zero), never an answer.
        Request::Explain(args) => {
            let render = controller.explain_renderer();
            on_thread(reply, "explain", move || {
                render(&args).map_err(|e| format!("sluice explain: {e}\n"))
            })
        }
    }
}

type Reply = std::sync::mpsc::Sender<Result<String, String>>;

/// Answers a request from its own thread (`sluice-{what}`): rendering over
/// a big configuration never delays the control loop.
fn on_thread(
    reply: Reply,
    what: &str,
    render: impl FnOnce() -> Result<String, String> + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("sluice-{what}"))
        .spawn(move || {
            let _ = reply.send(render());
        });
    if let Err(e) = spawned {
        controlplane::error!("sluice: {what}: cannot start a thread: {e}");
    }
}
