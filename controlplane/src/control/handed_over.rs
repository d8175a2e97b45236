//! What a start takes over from the process before it (the conntrack
//! hand-off), before its workers start: the backends' last health
//! verdicts, so a restart does not forget which backends were unhealthy,
//! which pool was in force or what weights the backends reported; and the
//! backends it was draining (CT-10), so their connections keep their
//! backend until the deadline. The connections handed over then meet the
//! state they left.

use std::collections::HashMap;
use std::net::IpAddr;

use sluice_core::backend::{BackendState, Egress, Pool};
use sluice_core::ids::ServiceId;
use sluice_core::time::Millis;

use crate::health::{backend_probe_keys, ProbeStatus};

use super::rebuild::{ProbeStates, Rules};
use super::Controller;

/// One backend's health as the previous process last saw it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HealthSeed {
    pub healthy: bool,
    /// HC-7's reported weight.
    pub weight: u16,
}

/// A backend the previous process was draining at its stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainingBackend {
    pub service: String,
    pub address: IpAddr,
    pub healthy: bool,
    pub weight: u16,
    /// Milliseconds of draining it had left at the stop.
    pub left_ms: u64,
    pub port: u16,
    pub mac: Option<[u8; 6]>,
}

/// Everything taken over, by service name and backend address.
#[derive(Debug, Default)]
pub struct HandedOver<'a> {
    pub health: HashMap<(&'a str, IpAddr), HealthSeed>,
    pub draining: Vec<DrainingBackend>,
    /// Each backend's resolved egress at the stop, for the next hops
    /// the kernel must resolve again through the new TAP.
    pub next_hops: HashMap<IpAddr, Egress>,
    /// Milliseconds between the stop and this start.
    pub gap_ms: u64,
}

impl Controller {
    /// Records what the start did with the hand-off file (the metrics).
    pub fn record_handoff(&self, report: crate::handoff::StartReport) {
        self.shared.lock().handoff = report;
    }

    /// Seeds the probes and the next hops, adds the draining backends of
    /// `over`, then publishes the snapshot built on them. Returns (probes
    /// seeded, draining backends added).
    pub fn take_over(&mut self, over: &HandedOver<'_>) -> (usize, usize) {
        let seeded = self.seed_health(&over.health);
        let draining = self.add_draining(&over.draining, over.gap_ms);
        let ports = self.cfg.dataplane.ports.len();
        let next_hops: HashMap<IpAddr, Egress> = over
            .next_hops
            .iter()
            .filter(|(_, e)| usize::from(e.port) < ports)
            .map(|(a, e)| (*a, *e))
            .collect();
        let hops = self.neighbours.as_ref().map_or(0, |n| n.seed(&next_hops));
        if seeded + draining + hops > 0 {
            self.rebuild(ProbeStates::Copy, Rules::Published);
        }
        (seeded, draining)
    }

    /// Gives every probe of a backend `seeds` names its state until the
    /// probe's own first verdict.
    fn seed_health(&mut self, seeds: &HashMap<(&str, IpAddr), HealthSeed>) -> usize {
        let Some(checker) = &self.checker else {
            return 0;
        };
        let mut seeded = 0;
        let mut status = checker.status.lock().unwrap_or_else(|p| p.into_inner());
        for (si, svc) in self.cfg.backend_services.iter().enumerate() {
            let Some(hc) = svc.health_check.map(|i| &self.cfg.health_checks[i]) else {
                continue;
            };
            for b in &svc.backends {
                let Some(seed) = seeds.get(&(svc.name.as_str(), b.address)) else {
                    continue;
                };
                // Under a data-path check, each VIP's probe starts from
                // the backend's state.
                for key in backend_probe_keys(&self.cfg, si, hc, b.address) {
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
        seeded
    }

    /// CT-10 across a restart: a backend the previous process was
    /// draining drains on here for the time it had left (less the gap),
    /// when its service still exists, does not list it again, still
    /// drains, and its egress port still exists.
    fn add_draining(&mut self, draining: &[DrainingBackend], gap_ms: u64) -> usize {
        let now = (self.clock)();
        let mut added = 0;
        for d in draining {
            let Some(svc) = self
                .cfg
                .backend_services
                .iter()
                .find(|s| s.name == d.service)
            else {
                continue;
            };
            let listed = svc.backends.iter().any(|b| b.address == d.address);
            let left = d.left_ms.saturating_sub(gap_ms);
            let drains = !svc.connection_draining_timeout.is_zero();
            let port_exists = usize::from(d.port) < self.cfg.dataplane.ports.len();
            if listed || left == 0 || !drains || !port_exists {
                continue;
            }
            let Some(id) = self.ids.get_or_assign(&d.service, d.address) else {
                continue;
            };
            let state = BackendState {
                id,
                // Set by the build to the service's id.
                service: ServiceId(0),
                address: d.address,
                healthy: d.healthy,
                weight: d.weight,
                pool: Pool::Primary,
                draining_until: Some(Millis(now.0.saturating_add(left))),
                egress: Egress {
                    port: d.port,
                    next_hop_mac: d.mac,
                },
            };
            self.memory.add_draining(&d.service, state);
            added += 1;
        }
        added
    }
}
