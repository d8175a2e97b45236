//! `sluice status --json`: the running appliance for scripts — what runs
//! (version, commit, DPDK, uptime, configuration file), the reloads and the
//! latest one's error, and per service its pool and per backend its state
//! and traffic.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use serde::{Serialize, Serializer};
use sluice_core::backend::Pool;
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

use crate::proc_self::{uptime_seconds, GIT_COMMIT, VERSION};

use super::View;

/// The status document: serialized straight from the snapshot (no
/// intermediate JSON tree), fields in name order.
#[derive(Serialize)]
pub(super) struct Document<'a> {
    config_path: Option<String>,
    dpdk: &'static str,
    generation: u64,
    git: &'static str,
    reloads: Reloads<'a>,
    services: Services<'a>,
    uptime_seconds: Option<f64>,
    version: &'static str,
}

#[derive(Serialize)]
struct Reloads<'a> {
    failed: u64,
    last: Option<Last<'a>>,
    successful: u64,
}

#[derive(Serialize)]
struct Last<'a> {
    error: Option<&'a str>,
    successful: bool,
    unix_seconds: f64,
}

/// The services, each written as it is serialized.
struct Services<'a> {
    snap: &'a ForwardingState,
    view: &'a View,
    stats: &'a [Arc<CachePadded<WorkerStats>>],
}

#[derive(Serialize)]
struct ServiceDoc<'a> {
    active_pool: Option<&'static str>,
    backends: Backends<'a>,
    eligible: &'a [usize],
    name: &'a str,
    pool_flips: u32,
}

struct Backends<'a> {
    snap: &'a ForwardingState,
    svc: &'a ServiceState,
    stats: &'a [Arc<CachePadded<WorkerStats>>],
}

#[derive(Serialize)]
struct BackendDoc {
    address: std::net::IpAddr,
    bytes: u64,
    draining: bool,
    healthy: bool,
    id: usize,
    new_connections: u64,
    next_hop_resolved: bool,
    packets: u64,
    pool: &'static str,
    weight: u16,
}

impl Serialize for Services<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Self { snap, view, stats } = *self;
        s.collect_seq(
            snap.services
                .iter()
                .zip(view.reports.iter())
                .map(|(svc, report)| ServiceDoc {
                    active_pool: report.active_pool.map(pool_name),
                    backends: Backends { snap, svc, stats },
                    eligible: &report.eligible,
                    name: &svc.name,
                    pool_flips: svc.pool_epoch,
                }),
        )
    }
}

impl Serialize for Backends<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let total = |f: &dyn Fn(&WorkerStats) -> u64| -> u64 {
            self.stats.iter().map(|w| f(w)).fold(0, u64::wrapping_add)
        };
        s.collect_seq(
            self.svc
                .backends
                .iter()
                .filter_map(|&id| self.snap.backend(id))
                .map(|b| {
                    let i = b.id.index();
                    BackendDoc {
                        address: b.address,
                        bytes: total(&|w| w.backend_packets.bytes(i)),
                        draining: b.draining_until.is_some(),
                        healthy: b.healthy,
                        id: i,
                        new_connections: total(&|w| w.backend_packets.connections(i)),
                        next_hop_resolved: b.egress.next_hop_mac.is_some(),
                        packets: total(&|w| w.backend_packets.get(i)),
                        pool: pool_name(b.pool),
                        weight: b.weight,
                    }
                }),
        )
    }
}

/// The status document of `snap` and `view`.
pub(super) fn render<'a>(
    snap: &'a ForwardingState,
    view: &'a View,
    stats: &'a [Arc<CachePadded<WorkerStats>>],
    config_path: Option<String>,
) -> Document<'a> {
    Document {
        config_path,
        dpdk: dataplane::dpdk::DPDK_VERSION,
        generation: snap.generation,
        git: GIT_COMMIT,
        reloads: Reloads {
            failed: view.reloads_failed,
            last: view.last_reload.as_ref().map(|r| Last {
                error: r.error.as_deref(),
                successful: r.ok,
                unix_seconds: r.unix_seconds,
            }),
            successful: view.reloads_ok,
        },
        services: Services { snap, view, stats },
        uptime_seconds: uptime_seconds(),
        version: VERSION,
    }
}

fn pool_name(p: Pool) -> &'static str {
    match p {
        Pool::Primary => "primary",
        Pool::Failover => "failover",
    }
}
