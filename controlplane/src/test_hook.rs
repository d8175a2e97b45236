//! TEST HOOK — not a product feature. `sluice run
//! --test-mark-unhealthy-after-packets N:ADDR` lets a golden test mark a
//! backend unhealthy at an exact point of a pcap replay (there is no other
//! way to put a health change between two packets of a capture that is
//! replayed in microseconds):
//!
//! 1. the worker pauses RX after N packets (`Worker::test_pause_after_rx`);
//! 2. this thread sees N packets counted, republishes the current snapshot
//!    with every backend at ADDR unhealthy and its services' tables rebuilt
//!    over the remaining healthy backends (EL-1 only: no weights, zones or
//!    failover — test configurations do not use them);
//! 3. the worker sees the new version and resumes.
//!
//! The controller knows nothing of the change; with health checks
//! configured it would overwrite it, hence "no health checks" in the help.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use controlplane::config::Config;
use controlplane::maglev::{build_table, MaglevBackend};
use crossbeam_utils::CachePadded;
use dataplane::snapshot::SnapshotCell;
use dataplane::stats::WorkerStats;

#[derive(Clone, Debug)]
pub struct MarkUnhealthy {
    pub after_packets: u64,
    pub address: IpAddr,
}

impl FromStr for MarkUnhealthy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (n, a) = s.split_once(':').ok_or("expected N:ADDR")?;
        Ok(Self {
            after_packets: n.parse().map_err(|e| format!("N: {e}"))?,
            address: a.parse().map_err(|e| format!("ADDR: {e}"))?,
        })
    }
}

pub fn spawn(
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
        let rx = || -> u64 {
            stats
                .iter()
                .flat_map(|s| s.ports.iter())
                .map(|p| p.rx_packets.get())
                .sum()
        };
        while rx() < hook.after_packets {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
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
                svc.tables = vec![build_table(&eligible, size)];
            }
        }
        eprintln!(
            "sluice: TEST HOOK: {} marked unhealthy after {} packets",
            hook.address, hook.after_packets
        );
        let old = snapshots.publish(next);
        // Freed here once the worker let go (the control thread's rule).
        while Arc::strong_count(&old) > 1 && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}
