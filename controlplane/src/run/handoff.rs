//! The conntrack hand-off in a run: the file taken at start (after the
//! first snapshot, before the workers start: its health seeds the
//! probes, its connections go to the shards of their owners) and written
//! at a stop by SIGTERM or SIGINT, once the workers stopped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Instant;

use controlplane::config::Config;
use controlplane::control::{Controller, DrainingBackend, HandedOver, HealthSeed};
use controlplane::handoff::place::{self, Owners, Placed};
use controlplane::handoff::store::{self, Taken};
use controlplane::handoff::StartReport;
use dataplane::dpdk::Port;
use dataplane::worker::{ConntrackHandoff, Restored, ShardOut};
use sluice_core::handoff::HandOff;
use sluice_core::snapshot::SnapshotCell;
use sluice_core::time::Millis;

/// The hand-off of one run: where its file is, and the workers' entries
/// when they stop.
pub struct Handoff {
    path: PathBuf,
    /// The configuration file, as the file names it.
    config: String,
    out: Receiver<ShardOut>,
    /// Set before the workers stop when their entries are wanted.
    wanted: Arc<AtomicBool>,
    /// The workers' restores, when there was something to restore.
    restored: Option<Receiver<Restored>>,
    /// Every connection went to every worker (owners unknown).
    copies: bool,
}

/// The configuration file as a hand-off file names it: absolute, so that
/// a start from another directory still matches.
pub fn config_identity(config_path: Option<&Path>) -> String {
    config_path
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Which shard an entry goes to on these ports with `workers` workers.
pub fn owners(ports: &[Port], workers: usize) -> Owners {
    let ownership = super::ownership::of(ports, workers);
    if ownership.nic_chooses_unmodelled() {
        Owners::Every { workers }
    } else {
        Owners::ByKey(ownership.owners)
    }
}

/// Takes the file at `path` (None: hand-off off): seeds the probes,
/// places the connections. Per worker, what it restores and where its
/// entries go at the stop.
pub fn start(
    path: Option<PathBuf>,
    cfg: &Config,
    config: String,
    controller: &mut Controller,
    owners: Owners,
    now: Millis,
) -> (Option<Handoff>, Vec<ConntrackHandoff>) {
    let workers = usize::from(cfg.dataplane.workers);
    let Some(path) = path else {
        return (
            None,
            (0..workers).map(|_| ConntrackHandoff::default()).collect(),
        );
    };
    let started = Instant::now();
    let copies = matches!(owners, Owners::Every { .. }) && workers > 1;
    let limit = store::size_limit(u64::from(cfg.dataplane.conntrack_capacity) * workers as u64);
    let mut restore = vec![Vec::new(); workers];
    match store::take(&path, &config, store::unix_ms(), limit) {
        Taken::Nothing => {}
        Taken::Refused(why) => {
            controlplane::warn!(
                "sluice: conntrack hand-off {} refused: {why}; starting with empty conntrack",
                path.display()
            );
            controller.record_handoff(StartReport::Refused);
        }
        Taken::File { handoff, gap_ms } => {
            let placement = placement_text(&owners);
            let placed = take(&handoff, gap_ms, controller, owners, now);
            log_taken(
                &path,
                &handoff,
                gap_ms,
                &placed,
                placement,
                started.elapsed(),
            );
            controller.record_handoff(StartReport::Taken {
                taken: placed.taken,
                dropped: placed.dropped,
                gap_ms,
            });
            restore = placed.per_worker;
        }
    }
    let (tx, out) = channel();
    let wanted = Arc::new(AtomicBool::new(false));
    let any = restore.iter().any(|r| !r.is_empty());
    let (restored_tx, restored) = channel();
    let handoffs = restore
        .into_iter()
        .map(|restore| ConntrackHandoff {
            restore,
            out: Some(tx.clone()),
            wanted: Arc::clone(&wanted),
            restored: any.then(|| restored_tx.clone()),
        })
        .collect();
    let handoff = Handoff {
        path,
        config,
        out,
        wanted,
        restored: any.then_some(restored),
        copies,
    };
    (Some(handoff), handoffs)
}

/// The file's backends seed the probes and the draining set; then its
/// connections are placed on the snapshot built on them.
fn take(
    handoff: &HandOff,
    gap_ms: u64,
    controller: &mut Controller,
    owners: Owners,
    now: Millis,
) -> Placed {
    let mut over = HandedOver {
        gap_ms,
        ..HandedOver::default()
    };
    for b in &handoff.backends {
        let Some(service) = handoff.services.get(b.service as usize) else {
            continue;
        };
        let seed = HealthSeed {
            healthy: b.healthy,
            weight: b.weight,
        };
        over.health.insert((service.as_str(), b.address), seed);
        if let Some(mac) = b.mac {
            let egress = sluice_core::backend::Egress {
                port: b.port,
                next_hop_mac: Some(mac),
            };
            over.next_hops.insert(b.address, egress);
        }
        if let Some(left) = b.draining_ms {
            over.draining.push(DrainingBackend {
                service: service.clone(),
                address: b.address,
                healthy: b.healthy,
                weight: b.weight,
                left_ms: u64::from(left),
                port: b.port,
                mac: b.mac,
            });
        }
    }
    let (_, draining) = controller.take_over(&over);
    if draining > 0 {
        controlplane::info!(
            "sluice: conntrack hand-off: {draining} removed backend(s) drain on (CT-10)"
        );
    }
    let state = controller.snapshots().load();
    place::place(handoff, &state, now, gap_ms, owners)
}

/// How the start placed the connections, for its log line.
fn placement_text(owners: &Owners) -> &'static str {
    use sluice_core::steering::Owners as By;
    match owners {
        Owners::ByKey(By::Rss(_)) => "each in the shard the NIC's RSS sends it to",
        Owners::ByKey(By::Hash { workers: 1 }) => "in the only shard",
        Owners::ByKey(By::Hash { .. }) => "each in the shard software steering sends it to",
        Owners::Every { .. } => "a copy in every shard (RSS on addresses, not modelled)",
    }
}

fn log_taken(
    path: &Path,
    handoff: &HandOff,
    gap_ms: u64,
    placed: &Placed,
    placement: &str,
    took: std::time::Duration,
) {
    let dropped = placed
        .dropped
        .by_reason()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect::<Vec<_>>();
    controlplane::info!(
        "sluice: conntrack hand-off {}: {} of {} connection(s) taken from sluice {} ({} ms \
         before this start; read and placed in {} ms, {placement}){}",
        path.display(),
        placed.taken,
        handoff.connections.len(),
        handoff.writer,
        gap_ms,
        took.as_millis(),
        if dropped.is_empty() {
            String::new()
        } else {
            format!("; not taken: {}", dropped.join(", "))
        }
    );
}

impl Handoff {
    /// Waits (up to `limit`) until the `workers` workers restored what
    /// they were given, before the start says it is ready: a connection
    /// handed over is in its shard before the appliance reports ready.
    pub fn wait_restored(&mut self, workers: usize, limit: std::time::Duration) {
        let Some(rx) = self.restored.take() else {
            return;
        };
        let deadline = Instant::now() + limit;
        let (mut entries, mut full, mut slowest) = (0, 0, std::time::Duration::ZERO);
        for _ in 0..workers {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(r) = rx.recv_timeout(left) else {
                controlplane::warn!(
                    "sluice: conntrack hand-off: not every worker restored its connections \
                     within {limit:?}; starting anyway"
                );
                return;
            };
            entries += r.entries;
            full += r.full;
            slowest = slowest.max(r.took);
        }
        controlplane::info!(
            "sluice: conntrack hand-off: {entries} connection(s) restored into {workers} \
             shard(s){} in {} ms{}",
            if self.copies {
                " (a copy in each: the NIC chooses the worker)"
            } else {
                ""
            },
            slowest.as_millis(),
            if full > 0 {
                format!("; {full} found no room (counted as insert_failed)")
            } else {
                String::new()
            }
        );
    }

    /// The workers are about to stop for a planned stop: they hand their
    /// entries over.
    pub fn want_entries(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// Once the workers stopped: writes what they handed over (nothing
    /// unless [`Handoff::want_entries`] was called).
    pub fn write(self, snapshots: &SnapshotCell) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        let started = Instant::now();
        let shards: Vec<place::ShardOut> = self
            .out
            .try_iter()
            .map(|s| place::ShardOut {
                now: s.now,
                entries: s.entries,
            })
            .collect();
        let stamp = place::Stamp {
            written_unix_ms: store::unix_ms(),
            writer: env!("CARGO_PKG_VERSION").to_string(),
            config: self.config,
        };
        let handoff = place::collect(&shards, &snapshots.load(), stamp);
        match store::write(&self.path, &handoff) {
            Ok(bytes) => controlplane::info!(
                "sluice: conntrack hand-off {}: {} connection(s) written for the next start \
                 ({bytes} bytes, {} ms)",
                self.path.display(),
                handoff.connections.len(),
                started.elapsed().as_millis()
            ),
            Err(e) => controlplane::warn!(
                "sluice: conntrack hand-off {}: not written ({e}); the next start begins with \
                 empty conntrack",
                self.path.display()
            ),
        }
    }
}
