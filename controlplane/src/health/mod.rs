//! Health checking (SPEC §7), sans-IO at the core:
//! - [`state`]: one probe's health state machine (HC-3 … HC-5, HC-7);
//! - [`driver`]: the probe interface; one driver per [`ProbeKind`]
//!   ([`tcp`], [`http`], [`udp`]; [`drivers`] lists them) turns network
//!   events into a verdict ([`failure`] names why a probe failed);
//! - [`scheduler`]: every probe's timers and runs on injected time;
//! - [`checker`]: the I/O shell, one thread owning every socket
//!   ([`syn_socket`] for HC-1's half-open SYNs, coded by [`halfopen`]).

pub mod checker;
pub mod data_path;
pub mod data_socket;
pub mod driver;
pub mod drivers;
pub mod failure;
pub mod halfopen;
pub mod http;
pub mod route;
pub mod scheduler;
#[cfg(test)]
pub mod sim;
pub mod state;
pub mod syn_socket;
pub mod tcp;
pub mod udp;

use std::net::{IpAddr, SocketAddr};

pub use crate::config::ProbeKind;
pub use checker::HealthChecker;
pub use failure::FailureReason;
pub use route::{backend_probe_keys, backend_status, Route};
pub use scheduler::{Event, ProbeKey, ProbeStatus, ProbeStatuses, StatusMap};
pub use state::{HealthState, InitialState, ProbeResult, Thresholds, WeightReport};

use crate::config::HealthCheckConfig;

/// The shared-probe key of `backend` under a direct `check` (a data-path
/// check has one per VIP: [`backend_probe_keys`]).
pub fn probe_key(check: &HealthCheckConfig, backend: IpAddr) -> ProbeKey {
    probe_key_via(check, backend, Route::Direct)
}

/// The key of the probe of `backend` under `check` that travels `route`.
pub fn probe_key_via(check: &HealthCheckConfig, backend: IpAddr, route: Route) -> ProbeKey {
    ProbeKey {
        addr: SocketAddr::new(backend, check.port),
        route,
        kind: check.kind.clone(),
        interval: check.check_interval,
        timeout: check.timeout,
        healthy_threshold: check.healthy_threshold,
        unhealthy_threshold: check.unhealthy_threshold,
        initial: if check.initially_healthy {
            InitialState::Healthy
        } else {
            InitialState::Unhealthy
        },
    }
}

/// Every distinct probe `cfg` needs (shared across services).
pub fn probe_keys(cfg: &crate::config::Config) -> Vec<ProbeKey> {
    let mut keys: Vec<ProbeKey> = cfg
        .backend_services
        .iter()
        .enumerate()
        .filter_map(|(si, s)| Some((si, s, &cfg.health_checks[s.health_check?])))
        .flat_map(|(si, s, hc)| {
            s.backends
                .iter()
                .flat_map(move |b| backend_probe_keys(cfg, si, hc, b.address))
        })
        .collect();
    let mut seen = ahash::AHashSet::with_capacity(keys.len());
    keys.retain(|k| seen.insert(k.clone()));
    keys
}
