//! Health checking (SPEC §7): a sans-IO state machine per probe
//! ([`state`]), non-blocking probe drivers ([`probe`]) and one scheduler
//! thread ([`scheduler`]).

pub mod halfopen;
pub mod probe;
pub mod scheduler;
pub mod state;

use std::net::{IpAddr, SocketAddr};

pub use probe::ProbeKind;
pub use scheduler::{Event, HealthChecker, ProbeKey, ProbeStatus, StatusMap};
pub use state::{HealthState, InitialState, ProbeResult, Thresholds, WeightReport};

use crate::config::{HealthCheckConfig, HealthCheckKind};

/// The shared-probe key of `backend` under `check`.
pub fn probe_key(check: &HealthCheckConfig, backend: IpAddr) -> ProbeKey {
    ProbeKey {
        addr: SocketAddr::new(backend, check.port),
        kind: match &check.kind {
            HealthCheckKind::Tcp => ProbeKind::Tcp,
            HealthCheckKind::Http {
                request_path,
                host,
                response_codes,
            } => ProbeKind::Http {
                request_path: request_path.clone(),
                host: host.clone(),
                response_codes: response_codes.clone(),
            },
        },
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
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    keys
}
