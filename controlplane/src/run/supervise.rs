//! The main lcore once the workers run: signals, reloads, `--duration`
//! and `--exit-on-idle`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane::admin::AdminState;
use controlplane::announce::{Announcer, Stop};
use controlplane::control::{Controller, ReloadError};
use controlplane::control_socket::{ControlSocket, Reload};
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
    /// The control socket: status and explain are answered there, from
    /// the published state; reloads come here.
    pub requests: Option<&'a ControlSocket>,
    pub admin: &'a AdminState,
    pub service: &'a mut ServiceManager,
    pub announce: &'a mut Announcer,
}

/// Why the supervision ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// SIGTERM or SIGINT (after the drain, if any): a planned stop.
    Signal,
    /// `--duration` or `--exit-on-idle`.
    Limit,
}

/// Waits on the main lcore until a signal, the duration, or idleness says stop.
///
/// Between checks it is the control thread (AP-2): health results, draining
/// deadlines, reloads (SIGHUP or the control socket).
pub fn supervise(
    until: &Until,
    signals: &Signals,
    stats: &[Arc<CachePadded<WorkerStats>>],
    ctl: Control<'_>,
) -> Ended {
    let started = Instant::now();
    if let Some(socket) = ctl.requests {
        // The workers' mailboxes are attached by now: explain can ask them.
        socket.answer_from(ctl.controller.readers());
    }
    let mut idle = until
        .exit_on_idle
        .map(|limit| IdleWatch::new(limit, stats, started));
    loop {
        // One liveness for /healthz and systemd's watchdog: this loop ran.
        ctl.admin.beat();
        ctl.service.alive();
        std::thread::sleep(Duration::from_millis(10));
        if signals.term.swap(false, Ordering::Relaxed) {
            match ctl.announce.stop() {
                Stop::Now => {
                    ctl.service.stopping();
                    controlplane::info!("sluice: signal received, stopping");
                    return Ended::Signal;
                }
                // systemd's stop timeout must not end the drain.
                Stop::Draining(drain) => ctl.service.draining(drain),
            }
        }
        if ctl.announce.drain_over() {
            controlplane::info!("sluice: drained, stopping");
            return Ended::Signal;
        }
        ctl.controller.tick();
        ctl.announce.update(ctl.controller);
        if signals.hup.swap(false, Ordering::Relaxed) {
            let _ = reload(ctl.controller, ctl.service);
        }
        for r in ctl.requests.into_iter().flat_map(ControlSocket::reloads) {
            answer(r, ctl.controller, ctl.service);
        }
        // After the replies: a reload is answered once it is published.
        ctl.controller.warm_digests();
        if until.duration.is_some_and(|d| started.elapsed() >= d) {
            return Ended::Limit;
        }
        if idle.as_mut().is_some_and(|w| w.idle(stats, Instant::now())) {
            return Ended::Limit;
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

/// Answers a `sluice reload` from the control socket.
fn answer(r: Reload, controller: &mut Controller, service: &ServiceManager) {
    let _ = r
        .reply
        .send(reload(controller, service).map_err(|e| e.to_string()));
}
