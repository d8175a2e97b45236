//! What `sluice run` checks and starts before EAL: refusals that take a
//! second and name the fix, instead of a failure part-way through DPDK's
//! start-up.

use std::sync::Arc;

use controlplane::admin::{self, AdminServer, AdminState};
use controlplane::config::Config;
use controlplane::exception;
use controlplane::memory_budget;

use super::error::RunError;
use super::options::RunOptions;

/// net_tap must create each TAP, not attach to an interface that is
/// already there; the open files limit is raised for the admin endpoint.
pub fn check_host(cfg: &Config) -> Result<(), RunError> {
    if let Some(tap) = exception::existing_taps(&cfg.dataplane.ports)
        .into_iter()
        .next()
    {
        return Err(RunError::TapExists(tap));
    }
    if let Err(e) = admin::raise_open_files_limit() {
        controlplane::warn!("sluice: cannot raise the open files limit to its hard limit: {e}");
    }
    Ok(())
}

/// The conntrack shards, reserved and written at start, must fit this
/// machine's memory.
pub fn check_conntrack(cfg: &Config) -> Result<(), RunError> {
    let workers = usize::from(cfg.dataplane.workers);
    let capacity = cfg.dataplane.conntrack_capacity as usize;
    memory_budget::check_conntrack(workers, capacity, memory_budget::available_bytes())?;
    controlplane::info!(
        "sluice: conntrack: {capacity} connections per worker in {} slots, {} MiB per worker",
        sluice_core::conntrack::Shard::slots_for(capacity),
        memory_budget::conntrack_bytes(1, capacity) >> 20
    );
    Ok(())
}

/// Binds the admin HTTP endpoint at `metrics.listen` (None with
/// `--no-metrics-server`); a refusal names the field, the file and the
/// way out.
pub fn start_admin(
    cfg: &Config,
    opts: &RunOptions,
    admin: &Arc<AdminState>,
) -> Result<Option<AdminServer>, RunError> {
    if !opts.metrics_server {
        return Ok(None);
    }
    let listen = cfg.metrics.listen;
    let server = AdminServer::start(listen, Arc::clone(admin)).map_err(|source| {
        let file = opts
            .config_path
            .as_ref()
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default();
        let fix = if source.kind() == std::io::ErrorKind::AddrInUse {
            "another process listens there: set [metrics] listen to a free address"
        } else {
            "set [metrics] listen to an address of this host"
        };
        RunError::AdminListen {
            listen,
            file,
            source,
            fix,
        }
    })?;
    controlplane::info!(
        "sluice: metrics on http://{0}/metrics (also /healthz, /ready)",
        server.local_addr()
    );
    Ok(Some(server))
}
