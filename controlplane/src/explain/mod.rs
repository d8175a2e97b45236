//! `sluice explain`: the whole decision for a packet — rule, service,
//! hashed fields and flow hash, table (zone, active pool), Maglev slot,
//! every backend's eligibility, the chosen backend, next hop,
//! encapsulation and MTU outcome.
//!
//! Offline, the snapshot is built by [`crate::publish`] exactly as `sluice
//! run` builds it, under assumed health (every backend healthy); live, it
//! is a copy of the published one ([`live`]). Backends named unhealthy
//! are then turned unhealthy on that copy by the health-change path
//! ([`crate::publish::assume_unhealthy`]). The decision itself is `sluice_core::explain`, which
//! runs the packet path's own functions. [`packet`] turns a flow written
//! on the command line, or a pcap file, into frames; [`render`] prints.

pub mod client;
pub mod live;
pub mod packet;
pub mod render;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use sluice_core::explain::Explanation;
use sluice_core::snapshot::ForwardingState;

use crate::config::Config;
use crate::health::{probe_keys, ProbeStatus};
use crate::publish::ServiceReport;
use crate::publish::{
    assume_unhealthy, build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory,
};

/// A snapshot with what the build decided per service, to explain from.
pub struct Explainer<'a> {
    pub cfg: &'a Config,
    pub state: ForwardingState,
    pub reports: Vec<ServiceReport>,
    /// The backends assumed unhealthy.
    pub unhealthy: HashSet<IpAddr>,
}

/// An `--unhealthy` address that no configured backend has.
#[derive(Debug, thiserror::Error)]
#[error(
    "--unhealthy {0}: no backend of the configuration has this address\n  \
     hint: give the address of a backend of a [[backend_service]] \
     (`sluice status` lists them)"
)]
pub struct NotABackend(pub IpAddr);

impl<'a> Explainer<'a> {
    /// The snapshot `sluice run` would publish for `cfg` once its health
    /// checks said every backend is healthy, then, on that copy, the
    /// backends at `unhealthy` turned unhealthy ([`assume_unhealthy`]).
    /// Ports have their configured MACs (or none: an offline explanation
    /// has no NIC to ask).
    pub fn offline(cfg: &'a Config, unhealthy: &[IpAddr]) -> Result<Self, NotABackend> {
        let health: HashMap<_, _> = probe_keys(cfg)
            .into_iter()
            .map(|k| {
                let mut s = ProbeStatus::new(k.initial);
                s.state.healthy = true;
                (k, s)
            })
            .collect();
        let mut memory = PolicyMemory::default();
        let (state, reports) = build_forwarding_state_with(
            cfg,
            &[],
            &mut BackendIds::new(),
            &mut memory,
            &BuildInputs::with_health(&health),
            1,
        );
        Self::assuming(cfg, state, reports, unhealthy)
    }

    /// Explains from `state` (built from `cfg`, with `reports`) as it
    /// would be with the backends at `unhealthy` unhealthy: a copy,
    /// rebuilt by the health-change path; nothing is published.
    pub fn assuming(
        cfg: &'a Config,
        state: ForwardingState,
        reports: Vec<ServiceReport>,
        unhealthy: &[IpAddr],
    ) -> Result<Self, NotABackend> {
        let unhealthy: HashSet<IpAddr> = unhealthy.iter().copied().collect();
        let configured: HashSet<IpAddr> = cfg
            .backend_services
            .iter()
            .flat_map(|s| s.backends.iter().map(|b| b.address))
            .collect();
        let mut sorted: Vec<IpAddr> = unhealthy.iter().copied().collect();
        sorted.sort();
        if let Some(a) = sorted.iter().find(|a| !configured.contains(a)) {
            return Err(NotABackend(*a));
        }
        let (state, reports) = if unhealthy.is_empty() {
            (state, reports)
        } else {
            assume_unhealthy(&state, &reports, cfg, &unhealthy)
        };
        Ok(Self {
            cfg,
            state,
            reports,
            unhealthy,
        })
    }

    /// The backends assumed unhealthy, in address order.
    pub fn assumed_unhealthy(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.unhealthy.iter().copied().collect();
        v.sort();
        v
    }

    /// The index of the port named `name` (None: no such port).
    pub fn port_index(&self, name: &str) -> Option<u16> {
        self.cfg
            .dataplane
            .ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
    }

    /// The decision for `frame` received on port `rx_port`.
    pub fn explain(&self, frame: &[u8], rx_port: u16) -> Explanation {
        sluice_core::explain::explain(frame, rx_port, &self.state)
    }
}
