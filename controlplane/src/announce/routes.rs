//! The `sluice-announce` thread: keeps the kernel table BIRD learns equal
//! to what should be announced, and withdraws everything while the
//! appliance cannot serve — not ready, a port's link down, the control
//! loop or a worker stalled.
//!
//! It runs beside the control loop rather than in it so that a stalled
//! loop is noticed at all: the loop stamps `AdminState::beat` every
//! iteration, and this thread withdraws once the stamp is older than
//! `bgp.stall_timeout`. Route changes never wait on the control thread,
//! and netlink never delays a publish.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::decision::Verdict;
use super::netlink::{Op, Route, RouteSocket};
use crate::admin::AdminState;
use crate::fleet::announced::VipStatus;
use crate::fleet::Fleet;

/// How often the gates are checked when nothing arrives.
const TICK: Duration = Duration::from_millis(100);
/// How often the wanted routes are added again, repairing a table
/// someone flushed (adding an existing route changes nothing).
const REASSERT: Duration = Duration::from_secs(5);

/// What the control thread wants announced.
#[derive(Clone, Debug)]
pub(super) struct Wanted {
    pub table: u32,
    pub stall_timeout: Duration,
    pub drain_time: Duration,
    /// Stopping: everything is withdrawn while the workers drain.
    pub draining: bool,
    /// Every VIP with its verdict and the TAP its route goes through
    /// (that of the first peer of its family).
    pub vips: Vec<(IpAddr, Verdict, Option<String>)>,
}

pub(super) enum Command {
    Want(Wanted),
    /// Withdraw everything and end the thread.
    Stop,
}

pub(super) struct RouteKeeper {
    admin: Arc<AdminState>,
    fleet: Arc<Fleet>,
    socket: Option<RouteSocket>,
    wanted: Option<Wanted>,
    installed: BTreeSet<Route>,
    workers: WorkerWatch,
    last_gate: Result<(), Withheld>,
    last_error: Option<String>,
    reasserted: Instant,
}

/// Why the appliance announces nothing at the moment, whatever its
/// services' health: shown per VIP in `sluice status` and logged once per
/// change.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
enum Withheld {
    #[error("starting")]
    Starting,
    #[error("stopped")]
    Stopped,
    #[error("stopping (SIGTERM): draining before exit")]
    Draining,
    #[error("the control loop has not run for {since:.1} s (stall_timeout {limit:.1} s)")]
    ControlLoopStalled { since: f64, limit: f64 },
    #[error("not ready: the dataplane is starting or stopping")]
    DataplaneNotUp,
    #[error("not ready: the link of port {0:?} is down")]
    LinkDown(String),
    #[error("worker {worker} has not polled for {limit:.1} s")]
    WorkerStalled { worker: usize, limit: f64 },
}

impl RouteKeeper {
    pub(super) fn new(admin: Arc<AdminState>, fleet: Arc<Fleet>) -> Self {
        Self {
            admin,
            fleet,
            socket: None,
            wanted: None,
            installed: BTreeSet::new(),
            workers: WorkerWatch::default(),
            last_gate: Err(Withheld::Starting),
            last_error: None,
            reasserted: Instant::now(),
        }
    }

    pub(super) fn run(mut self, commands: Receiver<Command>) {
        loop {
            match commands.recv_timeout(TICK) {
                Ok(Command::Want(w)) => self.wanted = Some(w),
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.step();
        }
        self.wanted = None;
        self.sync(&BTreeSet::new());
        self.publish_status(&Err(Withheld::Stopped));
    }

    fn step(&mut self) {
        let Some(wanted) = self.wanted.clone() else {
            return;
        };
        let gate = self.gate(&wanted);
        if gate != self.last_gate {
            match &gate {
                Ok(()) => crate::info!("sluice: bgp: the appliance can serve: announcing"),
                Err(why) => crate::warn!("sluice: bgp: withdrawing every VIP: {why}"),
            }
            self.last_gate = gate.clone();
        }
        let mut routes = BTreeSet::new();
        if gate.is_ok() {
            for (vip, verdict, tap) in &wanted.vips {
                let (Verdict::Servable, Some(tap)) = (verdict, tap) else {
                    continue;
                };
                match self.ifindex(tap) {
                    Ok(oif) => {
                        routes.insert(Route {
                            dst: *vip,
                            oif,
                            table: wanted.table,
                        });
                    }
                    Err(e) => self.error(format!("interface {tap}: {e}")),
                }
            }
        }
        self.sync(&routes);
        if self.reasserted.elapsed() >= REASSERT {
            self.reasserted = Instant::now();
            self.reassert();
        }
        self.publish_status(&gate);
    }

    /// Whether the appliance may announce anything now.
    fn gate(&mut self, wanted: &Wanted) -> Result<(), Withheld> {
        if wanted.draining {
            return Err(Withheld::Draining);
        }
        let since = self.admin.since_beat();
        if since > wanted.stall_timeout {
            return Err(Withheld::ControlLoopStalled {
                since: since.as_secs_f64(),
                limit: wanted.stall_timeout.as_secs_f64(),
            });
        }
        let sources = self.admin.lock().clone();
        let Some(src) = sources else {
            self.workers = WorkerWatch::default();
            return Err(Withheld::DataplaneNotUp);
        };
        for (name, port) in src.port_names.iter().zip(&src.ports) {
            if !port.link().up {
                return Err(Withheld::LinkDown(name.clone()));
            }
        }
        let polls: Vec<u64> = src.workers.iter().map(|w| w.polls.get()).collect();
        if let Some(worker) = self.workers.stalled(&polls, wanted.stall_timeout) {
            return Err(Withheld::WorkerStalled {
                worker,
                limit: wanted.stall_timeout.as_secs_f64(),
            });
        }
        Ok(())
    }

    fn ifindex(&mut self, tap: &str) -> std::io::Result<u32> {
        self.socket()?.ifindex(tap)
    }

    fn socket(&mut self) -> std::io::Result<&mut RouteSocket> {
        if self.socket.is_none() {
            self.socket = Some(RouteSocket::open()?);
        }
        Ok(self.socket.as_mut().expect("opened above"))
    }

    /// Deletes what is installed but not wanted, adds what is wanted but
    /// not installed. A failed change stays pending for the next step.
    fn sync(&mut self, routes: &BTreeSet<Route>) {
        let stale: Vec<Route> = self.installed.difference(routes).copied().collect();
        for r in stale {
            match self.socket().and_then(|s| s.apply(Op::Delete, &r)) {
                Ok(()) => {
                    self.installed.remove(&r);
                    crate::info!("sluice: bgp: withdrew {} (table {})", r.dst, r.table);
                }
                Err(e) => self.error(format!("deleting the route of {}: {e}", r.dst)),
            }
        }
        let missing: Vec<Route> = routes.difference(&self.installed).copied().collect();
        for r in missing {
            match self.socket().and_then(|s| s.apply(Op::Add, &r)) {
                Ok(()) => {
                    self.installed.insert(r);
                    crate::info!("sluice: bgp: announced {} (table {})", r.dst, r.table);
                }
                Err(e) => self.error(format!("adding the route of {}: {e}", r.dst)),
            }
        }
    }

    /// Adds every installed route again: one removed behind sluice's back
    /// comes back, an existing one is left as it is.
    fn reassert(&mut self) {
        let installed: Vec<Route> = self.installed.iter().copied().collect();
        for r in installed {
            if let Err(e) = self.socket().and_then(|s| s.apply(Op::Add, &r)) {
                self.error(format!("adding the route of {} again: {e}", r.dst));
            }
        }
    }

    fn error(&mut self, e: String) {
        if self.last_error.as_ref() != Some(&e) {
            crate::error!("sluice: bgp: {e}");
            self.last_error = Some(e);
        }
    }

    fn publish_status(&mut self, gate: &Result<(), Withheld>) {
        let vips = self
            .wanted
            .iter()
            .flat_map(|w| &w.vips)
            .map(|(vip, verdict, _)| {
                let announced = self.installed.iter().any(|r| r.dst == *vip);
                let reason = match (verdict, gate) {
                    _ if announced => String::new(),
                    (Verdict::Servable, Err(why)) => why.to_string(),
                    (Verdict::Servable, Ok(())) => "route not installed (see the log)".into(),
                    (v, _) => v.to_string(),
                };
                VipStatus {
                    vip: *vip,
                    announced,
                    servable: *verdict == Verdict::Servable,
                    reason,
                }
            })
            .collect();
        self.fleet.announce.set(vips);
    }
}

/// When each worker's poll counter last moved.
#[derive(Debug, Default)]
struct WorkerWatch {
    seen: Vec<(u64, Instant)>,
}

impl WorkerWatch {
    /// The first worker whose counter has not moved for `limit`.
    fn stalled(&mut self, polls: &[u64], limit: Duration) -> Option<usize> {
        let now = Instant::now();
        if self.seen.len() != polls.len() {
            self.seen = polls.iter().map(|&p| (p, now)).collect();
        }
        let mut stalled = None;
        for (i, (&p, seen)) in polls.iter().zip(&mut self.seen).enumerate() {
            if p != seen.0 {
                *seen = (p, now);
            } else if stalled.is_none() && now.duration_since(seen.1) > limit {
                stalled = Some(i);
            }
        }
        stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(stall_ms: u64, draining: bool) -> Wanted {
        Wanted {
            table: 100,
            stall_timeout: Duration::from_millis(stall_ms),
            drain_time: Duration::ZERO,
            draining,
            vips: Vec::new(),
        }
    }

    /// A control loop that stops beating withdraws everything, whatever
    /// else holds; so does a drain, and a dataplane not (or no longer)
    /// published.
    #[test]
    fn ap_6_a_stalled_control_loop_withdraws() {
        let admin = AdminState::new();
        let mut k = RouteKeeper::new(Arc::clone(&admin), Arc::default());
        admin.beat();
        assert_eq!(k.gate(&wanted(60, false)), Err(Withheld::DataplaneNotUp));
        assert_eq!(k.gate(&wanted(60, true)), Err(Withheld::Draining));
        std::thread::sleep(Duration::from_millis(100));
        let stalled = k.gate(&wanted(60, false)).unwrap_err();
        assert!(
            matches!(stalled, Withheld::ControlLoopStalled { .. }),
            "{stalled}"
        );
        assert!(
            stalled
                .to_string()
                .starts_with("the control loop has not run for"),
            "{stalled}"
        );
        admin.beat();
        assert_eq!(k.gate(&wanted(60, false)), Err(Withheld::DataplaneNotUp));
    }

    #[test]
    fn a_worker_whose_polls_stop_is_stalled() {
        let mut w = WorkerWatch::default();
        let limit = Duration::from_millis(30);
        assert_eq!(w.stalled(&[1, 1], limit), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(w.stalled(&[2, 1], limit), Some(1));
        assert_eq!(w.stalled(&[3, 2], limit), None);
    }
}
