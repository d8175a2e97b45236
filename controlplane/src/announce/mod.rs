//! Announcing the VIPs (AP-6): per VIP, whether the appliance can serve
//! it (`decision`), kept as routes in a kernel table (`routes`,
//! `netlink`) that BIRD learns and exports over BGP (`bird` renders its
//! configuration from `[bgp]`).
//!
//! The control loop calls [`Announcer::update`] once per iteration (it
//! decides again only when a new snapshot or configuration was
//! published) and [`Announcer::stop`] on SIGTERM: every VIP is withdrawn
//! first, then the workers keep forwarding for `bgp.drain_time` while
//! routers move the traffic away. Nothing is announced before the
//! dataplane is ready (`/ready`), so a restarted appliance rejoins only
//! once it can serve.

pub mod bird;
pub mod decision;
pub mod netlink;
mod routes;

use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::admin::AdminState;
use crate::control::Controller;
use crate::fleet::Fleet;
use decision::TableMembers;
use routes::{Command, RouteKeeper, Wanted};

/// How often the decision is made again while health settles.
const SETTLE_CHECK: Duration = Duration::from_millis(100);

/// What the control loop does after a stop signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Stop now.
    Now,
    /// The VIPs are withdrawn; keep running until [`Announcer::drain_over`],
    /// this long from now.
    Draining(Duration),
}

/// The control loop's side of the announcement.
pub struct Announcer {
    admin: Arc<AdminState>,
    fleet: Arc<Fleet>,
    members: TableMembers,
    /// The snapshot generation last decided for (a reload publishes a
    /// new one too).
    decided: Option<u64>,
    /// While a service's health has not settled, decide again every
    /// [`SETTLE_CHECK`] whatever is published: probes count without a
    /// publish.
    settling_since: Option<Instant>,
    keeper: Option<(Sender<Command>, JoinHandle<()>)>,
    /// The last thing sent to the route thread (None: no `[bgp]`).
    wanted: Option<Wanted>,
    drain_until: Option<Instant>,
}

impl Announcer {
    /// An announcer reporting into `controller`'s shared view.
    pub fn new(admin: &Arc<AdminState>, controller: &Controller) -> Self {
        Self {
            admin: Arc::clone(admin),
            fleet: controller.shared.view().fleet,
            members: TableMembers::default(),
            decided: None,
            settling_since: None,
            keeper: None,
            wanted: None,
            drain_until: None,
        }
    }

    /// Decides again when `controller` published a new snapshot or
    /// configuration, and hands the result to the route thread.
    pub fn update(&mut self, controller: &Controller) {
        let snap = controller.snapshots().load();
        let settling = self
            .settling_since
            .is_some_and(|t| t.elapsed() >= SETTLE_CHECK);
        if self.decided == Some(snap.generation) && !settling {
            return;
        }
        let view = controller.shared.view();
        let Some(cfg) = view.config else {
            return;
        };
        let Some(bgp) = &cfg.bgp else {
            self.wanted = None;
            self.stop_keeper();
            self.fleet.announce.clear();
            self.decided = Some(snap.generation);
            return;
        };
        let health = (!view.health.is_empty()).then_some(view.health.as_ref());
        let verdicts = decision::decide(&cfg, &snap, health, &mut self.members);
        let unsettled = verdicts
            .iter()
            .any(|(_, v)| matches!(v, decision::Verdict::HealthNotSettled { .. }));
        self.settling_since = unsettled.then(Instant::now);
        let vips = verdicts
            .into_iter()
            .map(|(vip, verdict)| {
                let tap = bgp
                    .peers
                    .iter()
                    .find(|p| p.address.is_ipv4() == vip.is_ipv4())
                    .map(|p| p.tap.clone());
                (vip, verdict, tap)
            })
            .collect();
        let wanted = Wanted {
            table: bgp.kernel_table,
            stall_timeout: bgp.stall_timeout,
            drain_time: bgp.drain_time,
            draining: self.drain_until.is_some(),
            vips,
        };
        self.send(wanted);
        self.decided = Some(snap.generation);
    }

    fn send(&mut self, wanted: Wanted) {
        self.wanted = Some(wanted.clone());
        if self.keeper.is_none() {
            let (tx, rx) = mpsc::channel();
            let keeper = RouteKeeper::new(Arc::clone(&self.admin), Arc::clone(&self.fleet));
            match std::thread::Builder::new()
                .name("sluice-announce".into())
                .spawn(move || keeper.run(rx))
            {
                Ok(handle) => self.keeper = Some((tx, handle)),
                Err(e) => {
                    crate::error!("sluice: bgp: cannot start the announce thread: {e}");
                    return;
                }
            }
        }
        if let Some((tx, _)) = &self.keeper {
            let _ = tx.send(Command::Want(wanted));
        }
    }

    /// A stop signal: withdraws every VIP and says whether to stop now or
    /// drain first (`bgp.drain_time`; a second signal stops at once).
    pub fn stop(&mut self) -> Stop {
        if self.drain_until.is_some() {
            return Stop::Now;
        }
        let Some(mut wanted) = self.wanted.clone() else {
            return Stop::Now;
        };
        let drain = wanted.drain_time;
        self.drain_until = Some(Instant::now() + drain);
        // The route thread withdraws at once.
        wanted.draining = true;
        self.send(wanted);
        if drain.is_zero() {
            return Stop::Now;
        }
        crate::info!(
            "sluice: signal received: VIPs withdrawn, forwarding for {:.1} s more \
             (bgp.drain_time) before stopping; signal again to stop now",
            drain.as_secs_f64()
        );
        Stop::Draining(drain)
    }

    /// Whether a drain begun by [`stop`](Self::stop) is over.
    pub fn drain_over(&self) -> bool {
        self.drain_until.is_some_and(|t| Instant::now() >= t)
    }

    fn stop_keeper(&mut self) {
        if let Some((tx, handle)) = self.keeper.take() {
            let _ = tx.send(Command::Stop);
            let _ = handle.join();
        }
    }
}

/// Withdraws every VIP before the ports and their TAPs close.
impl Drop for Announcer {
    fn drop(&mut self) {
        self.stop_keeper();
    }
}
