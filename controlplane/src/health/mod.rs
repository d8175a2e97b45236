//! Health checking (SPEC §7), sans-IO at the core:
//! - [`state`]: one probe's health state machine (HC-3 … HC-5, HC-7);
//! - [`driver`]: the probe interface; one driver per [`ProbeKind`]
//!   ([`tcp`], [`http`], [`udp`]; [`drivers`] lists them) turns network
//!   events into a verdict ([`failure`] names why a probe failed);
//! - [`scheduler`]: every probe's timers and runs on injected time;
//! - [`checker`]: the I/O shell, one thread owning every socket
//!   ([`syn_socket`] for HC-1's half-open SYNs, coded by [`halfopen`]).

pub mod checker;
pub mod driver;
pub mod drivers;
pub mod failure;
pub mod halfopen;
pub mod http;
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
pub use scheduler::{Event, ProbeKey, ProbeStatus, ProbeStatuses, StatusMap};
pub use state::{HealthState, InitialState, ProbeResult, Thresholds, WeightReport};

use crate::config::HealthCheckConfig;

/// The shared-probe key of `backend` under `check`.
pub fn probe_key(check: &HealthCheckConfig, backend: IpAddr) -> ProbeKey {
    ProbeKey {
        addr: SocketAddr::new(backend, check.port),
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
        .filter_map(|s| Some((s, &cfg.health_checks[s.health_check?])))
        .flat_map(|(s, hc)| s.backends.iter().map(|b| probe_key(hc, b.address)))
        .collect();
    let mut seen = ahash::AHashSet::with_capacity(keys.len());
    keys.retain(|k| seen.insert(k.clone()));
    keys
}
