//! Generated inputs for the control-plane benchmarks and unit tests: big
//! configurations and probe results, so that a benchmark measures the very
//! configuration a test checks.

use crate::config::Config;
use crate::health::{probe_key, HealthState, InitialState, ProbeStatus, ProbeStatuses};

/// `services` services of `per` backends each, TCP-checked, with static
/// MACs and Maglev tables of `table` slots, on one `net_null` port;
/// backend j of service i is 10.0.1.0 + i × per + j.
pub fn big_config(services: usize, per: usize, table: u32) -> String {
    let mut t = String::from(
        "[dataplane]\n[[dataplane.port]]\nname = \"a\"\ndevice = \"net_null0\"\n\
         address = \"10.0.0.1/8\"\n\n[[health_check]]\nname = \"tcp\"\ntype = \"TCP\"\n\
         port = 80\n",
    );
    for i in 0..services {
        t += &format!(
            "[[backend_service]]\nname = \"s{i}\"\nmaglev_table_size = {table}\n\
             health_check = \"tcp\"\nbackend = [\n"
        );
        for j in 0..per {
            let k = 256 + i * per + j;
            t += &format!(
                "  {{ address = \"10.{}.{}.{}\", mac = \"02:00:00:00:00:01\" }},\n",
                (k >> 16) & 255,
                (k >> 8) & 255,
                k & 255
            );
        }
        t += "]\n";
    }
    t
}

/// A probe's status after one probe that left it `healthy` (or not).
pub fn probe_status(healthy: bool) -> ProbeStatus {
    let mut state = HealthState::new(InitialState::Healthy);
    state.healthy = healthy;
    ProbeStatus {
        state,
        probes: 1,
        ..ProbeStatus::new(InitialState::Healthy)
    }
}

/// Every probe of `cfg` (each backend under its service's health check)
/// after one probe that found it healthy.
pub fn all_healthy(cfg: &Config) -> ProbeStatuses {
    cfg.backend_services
        .iter()
        .filter_map(|s| Some((&cfg.health_checks[s.health_check?], s)))
        .flat_map(|(hc, s)| s.backends.iter().map(move |b| probe_key(hc, b.address)))
        .map(|key| (key, probe_status(true)))
        .collect()
}
