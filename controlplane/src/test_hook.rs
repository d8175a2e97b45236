//! TEST HOOKS — not product features, compiled only with the `test-hooks`
//! feature (which the controlplane's tests turn on through a
//! dev-dependency on the package itself; `cargo build` and the Debian
//! package leave it out). A pcap is replayed in microseconds, so nothing
//! can be timed between two of its packets from outside; the first two
//! hooks let a golden test put a control-plane event at an exact point of
//! the replay. Both use the worker's `TestPause` (the worker stops polling
//! RX after N packets until a new snapshot version is published) and are
//! meant for one worker with `burst_size = 1`.
//!
//! `sluice run --test-mark-unhealthy-after-packets N:ADDR` (golden
//! conntrack tests, CT-8):
//!
//! 1. the worker pauses RX after N packets;
//! 2. this thread sees it paused, republishes the current snapshot with
//!    every backend at ADDR unhealthy and its services' tables rebuilt
//!    over the remaining healthy backends (EL-1 only: no weights, zones or
//!    failover — test configurations do not use them);
//! 3. the worker sees the new version and resumes.
//!
//! The controller knows nothing of the change; with health checks
//! configured it would overwrite it, hence "no health checks" in the help.
//!
//! `sluice run --test-reload-after-packets N:PATH` (golden reload tests,
//! CT-7, CT-10, AP-5):
//!
//! 1. the worker pauses RX after N packets;
//! 2. this thread sees it paused, copies PATH over the file given to
//!    `--config` and raises SIGHUP: the control thread reloads exactly as
//!    for an operator's SIGHUP (`Controller::reload`, validation, backend
//!    ids, draining — nothing is built here);
//! 3. an accepted reload publishes a new snapshot and the worker resumes.
//!    A rejected one publishes nothing (that is the point), so once the
//!    failure is counted this thread republishes the running snapshot
//!    unchanged — same content, same generation — only to let the worker
//!    resume.
//!
//! The file given to `--config` is overwritten: use a scratch copy.
//!
//! `sluice run --test-fail-launch-of-worker W` (`tests/launch_failure.rs`):
//! once the workers before W are running and the ports have received
//! traffic, the launch of worker W fails as if `rte_eal_remote_launch` had
//! refused it. The run must stop and join the running workers before it
//! closes the ports, and exit with the error.
//!
//! `sluice run --test-tap-queue-pairs N` (`tests/tap_relay.rs`, AP-4):
//! each TAP opens with at most N queue pairs, so workers past N relay
//! their exception path to an owner. `net_tap`'s real limit (16) cannot be
//! passed on `net_pcap`, which has at most 16 queues too.

use std::net::{AddrParseError, IpAddr};
use std::num::ParseIntError;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use controlplane::config::Config;
use controlplane::control::Shared;
use controlplane::maglev::{build_table, MaglevBackend};
use crossbeam_utils::CachePadded;
use dataplane::dpdk::{DpdkError, LcoreId, Port};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;

use crate::run::hooks::{RunHooks, Running};
use crate::run::RunError;

/// The hooks' `sluice run` arguments (hidden from `--help`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct HookArgs {
    /// TEST HOOK, not a product feature: after the worker has received
    /// N packets it pauses, the backend ADDR is republished unhealthy,
    /// and the worker resumes (golden conntrack tests, CT-8). Only for
    /// one worker and configurations without health checks.
    #[arg(
        long = "test-mark-unhealthy-after-packets",
        value_name = "N:ADDR",
        hide = true
    )]
    pub mark_unhealthy: Option<MarkUnhealthy>,
    /// TEST HOOK, not a product feature: after the worker has received
    /// N packets it pauses, PATH is copied over the --config file and
    /// reloaded as on SIGHUP, and the worker resumes (golden reload
    /// tests, CT-7, CT-10). Overwrites the --config file; one worker.
    #[arg(
        long = "test-reload-after-packets",
        value_name = "N:PATH",
        hide = true,
        conflicts_with = "mark_unhealthy"
    )]
    pub reload: Option<ReloadAfter>,
    /// TEST HOOK, not a product feature: the launch of worker W fails once
    /// the workers before it run and the ports have received traffic.
    #[arg(long = "test-fail-launch-of-worker", value_name = "W", hide = true)]
    pub fail_launch_of_worker: Option<usize>,
    /// TEST HOOK, not a product feature: each TAP opens with at most N
    /// queue pairs, as if net_tap had no more (its real limit, 16, needs
    /// more workers than any net_pcap port has queues), so that the
    /// workers past N relay their exception path (AP-4).
    #[arg(long = "test-tap-queue-pairs", value_name = "N", hide = true)]
    pub tap_queue_pairs: Option<u16>,
}

/// A hook argument that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum HookArgError {
    #[error("expected {0}")]
    Shape(&'static str),
    #[error("N: {0}")]
    Count(#[from] ParseIntError),
    #[error("ADDR: {0}")]
    Address(#[from] AddrParseError),
    #[error("PATH: empty")]
    EmptyPath,
}

/// The hooks of one run: its arguments and the pausing hooks' threads.
#[derive(Debug)]
pub struct TestHooks {
    args: HookArgs,
    threads: Vec<JoinHandle<()>>,
}

impl TestHooks {
    pub fn new(args: HookArgs) -> Self {
        Self {
            args,
            threads: Vec::new(),
        }
    }
}

impl RunHooks for TestHooks {
    /// Either pausing hook's N.
    fn pause_after_rx(&self) -> Option<u64> {
        let args = &self.args;
        (args.mark_unhealthy.as_ref().map(|h| h.after_packets))
            .or(args.reload.as_ref().map(|h| h.after_packets))
    }

    fn tap_queue_pairs(&self) -> Option<u16> {
        self.args.tap_queue_pairs
    }

    /// The launch failure, if it is this worker's, once the ports have
    /// received traffic (so workers already launched are in the middle of
    /// it; at most 5 s).
    fn before_launch(&self, worker: usize, lcore: LcoreId, ports: &[Port]) -> Result<(), RunError> {
        if self.args.fail_launch_of_worker != Some(worker) {
            return Ok(());
        }
        let monitors: Vec<_> = ports.iter().map(Port::monitor).collect();
        let t0 = Instant::now();
        while monitors.iter().all(|m| m.hw_stats().ipackets == 0)
            && t0.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        eprintln!("sluice: TEST HOOK: failing the launch of worker {worker}");
        Err(RunError::Launch {
            worker,
            lcore,
            source: DpdkError::injected(format!("rte_eal_remote_launch(lcore {lcore})")),
        })
    }

    /// Starts the threads of the pausing hooks.
    fn start(&mut self, run: &Running<'_>) {
        if let Some(h) = self.args.mark_unhealthy.clone() {
            let thread = spawn(
                h,
                run.cfg,
                Arc::clone(run.snapshots),
                run.stats.to_vec(),
                Arc::clone(run.stop),
            );
            self.threads.push(thread);
        }
        if let Some(h) = self.args.reload.clone() {
            let thread = spawn_reload(
                h,
                run.config_path.map(PathBuf::from),
                Arc::clone(run.snapshots),
                run.stats.to_vec(),
                Arc::clone(run.shared),
                Arc::clone(run.stop),
            );
            self.threads.push(thread);
        }
    }

    fn join(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[derive(Clone, Debug)]
pub struct MarkUnhealthy {
    pub after_packets: u64,
    pub address: IpAddr,
}

impl FromStr for MarkUnhealthy {
    type Err = HookArgError;
    fn from_str(s: &str) -> Result<Self, HookArgError> {
        let (n, a) = s.split_once(':').ok_or(HookArgError::Shape("N:ADDR"))?;
        Ok(Self {
            after_packets: n.parse()?,
            address: a.parse()?,
        })
    }
}

fn spawn(
    hook: MarkUnhealthy,
    cfg: &Config,
    snapshots: Arc<SnapshotCell>,
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let sizes: Vec<(String, u32)> = cfg
        .backend_services
        .iter()
        .map(|s| (s.name.clone(), s.maglev_table_size))
        .collect();
    std::thread::spawn(move || {
        if !wait_until_paused(&stats, hook.after_packets, &stop) {
            return;
        }
        let mut next = (*snapshots.load()).clone();
        next.generation += 1;
        for b in next.backends.iter_mut().flatten() {
            if b.address == hook.address {
                b.healthy = false;
            }
        }
        for svc in &mut next.services {
            let Some(size) = sizes.iter().find(|(n, _)| *n == svc.name).map(|s| s.1) else {
                continue;
            };
            let eligible: Vec<MaglevBackend> = svc
                .backends
                .iter()
                .filter_map(|&id| next.backends.get(id.0 as usize)?.as_ref())
                .filter(|b| b.healthy && b.draining_until.is_none())
                .map(|b| MaglevBackend {
                    id: b.id,
                    key: b.address.to_string(),
                    weight: u32::from(b.weight),
                })
                .collect();
            if !eligible.is_empty() {
                svc.tables = vec![Arc::new(build_table(&eligible, size))];
            }
        }
        // As every publication: the lane's records follow the health.
        next.lane_backends = next.build_lane_backends();
        eprintln!(
            "sluice: TEST HOOK: {} marked unhealthy after {} packets",
            hook.address, hook.after_packets
        );
        publish_and_retire(&snapshots, next, &stop);
    })
}

/// Waits until the workers have received `after_packets` packets and have
/// gone through their pause check since (false: stopping first).
///
/// Publishing as soon as RX reaches N would race the worker: if the new
/// version appeared before the worker's next poll, it would pause waiting
/// for a version after that one, for ever. `polls` is counted at the top
/// of every poll, before the pause check, and the worker's counters are
/// stored in program order (x86): once `polls` moved by two after RX
/// reached N, the poll that paused has completed its check.
fn wait_until_paused(
    stats: &[Arc<CachePadded<WorkerStats>>],
    after_packets: u64,
    stop: &AtomicBool,
) -> bool {
    let rx = || -> u64 {
        stats
            .iter()
            .flat_map(|s| s.ports.iter())
            .map(|p| p.rx_packets.get())
            .sum()
    };
    let polls = || -> u64 { stats.iter().map(|s| s.polls.get()).min().unwrap_or(0) };
    while rx() < after_packets {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let seen = polls();
    while polls() < seen + 2 {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Publishes `next` and frees the previous snapshot here once the workers
/// let go of it (the control thread's rule: never freed on a worker).
fn publish_and_retire(
    snapshots: &SnapshotCell,
    next: sluice_core::snapshot::ForwardingState,
    stop: &AtomicBool,
) {
    let old = snapshots.publish(next);
    while Arc::strong_count(&old) > 1 && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[derive(Clone, Debug)]
pub struct ReloadAfter {
    pub after_packets: u64,
    pub path: PathBuf,
}

impl FromStr for ReloadAfter {
    type Err = HookArgError;
    fn from_str(s: &str) -> Result<Self, HookArgError> {
        let (n, p) = s.split_once(':').ok_or(HookArgError::Shape("N:PATH"))?;
        if p.is_empty() {
            return Err(HookArgError::EmptyPath);
        }
        Ok(Self {
            after_packets: n.parse()?,
            path: p.into(),
        })
    }
}

/// The reload hook (see the module documentation). `config_path` is the
/// file the controller reloads from; `shared` tells when the control
/// thread has handled the reload and how it ended.
fn spawn_reload(
    hook: ReloadAfter,
    config_path: Option<PathBuf>,
    snapshots: Arc<SnapshotCell>,
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        if !wait_until_paused(&stats, hook.after_packets, &stop) {
            return;
        }
        let Some(config_path) = config_path else {
            eprintln!("sluice: TEST HOOK: no configuration file to reload");
            return;
        };
        if let Err(e) = std::fs::copy(&hook.path, &config_path) {
            eprintln!(
                "sluice: TEST HOOK: copying {} to {}: {e}",
                hook.path.display(),
                config_path.display()
            );
            return;
        }
        let handled = || {
            let v = shared.view();
            (v.reloads_ok, v.reloads_failed)
        };
        let before = handled();
        eprintln!(
            "sluice: TEST HOOK: reloading from {} after {} packets",
            hook.path.display(),
            hook.after_packets
        );
        if let Err(e) = signal_hook::low_level::raise(signal_hook::consts::SIGHUP) {
            eprintln!("sluice: TEST HOOK: raising SIGHUP: {e}");
            return;
        }
        let after = loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let now = handled();
            if now != before {
                break now;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if after.1 > before.1 {
            // Rejected: nothing was published. Same snapshot, same
            // generation, new version: the worker resumes on it.
            let same = (*snapshots.load()).clone();
            publish_and_retire(&snapshots, same, &stop);
            eprintln!("sluice: TEST HOOK: reload rejected, worker resumed unchanged");
        }
    })
}
