//! A start's first health verdicts taken from the process before it
//! (the conntrack hand-off): a restart does not forget which backends
//! were unhealthy, which pool was in force or what weights the backends
//! reported, so the connections handed over meet the state they left.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::health::{probe_key, ProbeStatus};

use super::rebuild::{ProbeStates, Rules};
use super::Controller;

/// One backend's health as the previous process last saw it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HealthSeed {
    pub healthy: bool,
    /// HC-7's reported weight.
    pub weight: u16,
}

impl Controller {
    /// Gives every probe of a backend `seeds` names (by service name and
    /// address) that state until its own first verdict, and publishes
    /// the snapshot built on it. Returns how many probes were seeded.
    pub fn seed_health(&mut self, seeds: &HashMap<(&str, IpAddr), HealthSeed>) -> usize {
        let Some(checker) = &self.checker else {
            return 0;
        };
        let mut seeded = 0;
        {
            let mut status = checker.status.lock().unwrap_or_else(|p| p.into_inner());
            for svc in &self.cfg.backend_services {
                let Some(hc) = svc.health_check.map(|i| &self.cfg.health_checks[i]) else {
                    continue;
                };
                for b in &svc.backends {
                    let Some(seed) = seeds.get(&(svc.name.as_str(), b.address)) else {
                        continue;
                    };
                    let key = probe_key(hc, b.address);
                    let st = status
                        .entry(key.clone())
                        .or_insert_with(|| ProbeStatus::new(key.initial));
                    // A probe that has a verdict of its own keeps it.
                    if st.probes == 0 {
                        st.state.healthy = seed.healthy;
                        st.state.weight = seed.weight;
                        seeded += 1;
                    }
                }
            }
        }
        if seeded > 0 {
            self.rebuild(ProbeStates::Copy, Rules::Published);
        }
        seeded
    }
}
