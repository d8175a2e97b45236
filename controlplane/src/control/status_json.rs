//! `sluice status --json`: the running appliance for scripts — what runs
//! (version, commit, DPDK, uptime, configuration file), the reloads and the
//! latest one's error, and per service its pool and per backend its state
//! and traffic.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use serde_json::{json, Value};
use sluice_core::backend::Pool;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

use crate::metrics_process::{uptime_seconds, GIT_COMMIT, VERSION};

use super::View;

/// The status document.
pub fn render(
    snap: &ForwardingState,
    view: &View,
    stats: &[Arc<CachePadded<WorkerStats>>],
    config_path: Option<String>,
) -> Value {
    let packets = |index: usize| -> u64 {
        stats
            .iter()
            .map(|w| w.backend_packets.get(index))
            .fold(0, u64::wrapping_add)
    };
    let bytes = |index: usize| -> u64 {
        stats
            .iter()
            .map(|w| w.backend_packets.bytes(index))
            .fold(0, u64::wrapping_add)
    };
    let connections = |index: usize| -> u64 {
        stats
            .iter()
            .map(|w| w.backend_packets.connections(index))
            .fold(0, u64::wrapping_add)
    };
    let services: Vec<Value> = snap
        .services
        .iter()
        .zip(view.reports.iter())
        .map(|(svc, report)| {
            let backends: Vec<Value> = svc
                .backends
                .iter()
                .filter_map(|&id| snap.backend(id))
                .map(|b| {
                    json!({
                        "address": b.address.to_string(),
                        "id": b.id.index(),
                        "healthy": b.healthy,
                        "draining": b.draining_until.is_some(),
                        "weight": b.weight,
                        "pool": pool_name(b.pool),
                        "next_hop_resolved": b.egress.next_hop_mac.is_some(),
                        "packets": packets(b.id.index()),
                        "bytes": bytes(b.id.index()),
                        "new_connections": connections(b.id.index()),
                    })
                })
                .collect();
            json!({
                "name": svc.name,
                "active_pool": report.active_pool.map(pool_name),
                "pool_flips": svc.pool_epoch,
                "eligible": report.eligible,
                "backends": backends,
            })
        })
        .collect();
    let last = view.last_reload.as_ref().map(|r| {
        json!({
            "successful": r.ok,
            "unix_seconds": r.unix_seconds,
            "error": r.error,
        })
    });
    json!({
        "version": VERSION,
        "git": GIT_COMMIT,
        "dpdk": dataplane::dpdk::DPDK_VERSION,
        "uptime_seconds": uptime_seconds(),
        "config_path": config_path,
        "generation": snap.generation,
        "reloads": {
            "successful": view.reloads_ok,
            "failed": view.reloads_failed,
            "last": last,
        },
        "services": services,
    })
}

fn pool_name(p: Pool) -> &'static str {
    match p {
        Pool::Primary => "primary",
        Pool::Failover => "failover",
    }
}
