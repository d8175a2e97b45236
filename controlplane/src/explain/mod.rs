//! `sluice explain`: the whole decision for a packet — rule, service,
//! hashed fields and flow hash, table (zone, active pool), Maglev slot,
//! every backend's eligibility, the chosen backend, next hop,
//! encapsulation and MTU outcome.
//!
//! The snapshot is built by [`crate::publish`] exactly as `sluice run`
//! builds it, under assumed health (every backend healthy except those
//! named unhealthy); the decision itself is `sluice_core::explain`, which
//! runs the packet path's own functions. [`packet`] turns a flow written
//! on the command line, or a pcap file, into frames; [`render`] prints.

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
use crate::publish::{build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory};

/// A snapshot with what the build decided per service, to explain from.
pub struct Explainer<'a> {
    pub cfg: &'a Config,
    pub state: ForwardingState,
    pub reports: Vec<ServiceReport>,
    /// The backends assumed unhealthy.
    pub unhealthy: HashSet<IpAddr>,
}

impl<'a> Explainer<'a> {
    /// The snapshot `sluice run` would publish for `cfg` once its health
    /// checks said: every checked backend healthy except `unhealthy`'s.
    /// Ports have their configured MACs (or none: an offline explanation
    /// has no NIC to ask).
    pub fn offline(cfg: &'a Config, unhealthy: &[IpAddr]) -> Self {
        let unhealthy: HashSet<IpAddr> = unhealthy.iter().copied().collect();
        let health: HashMap<_, _> = probe_keys(cfg)
            .into_iter()
            .map(|k| {
                let mut s = ProbeStatus::new(k.initial);
                s.state.healthy = !unhealthy.contains(&k.addr.ip());
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
        Self {
            cfg,
            state,
            reports,
            unhealthy,
        }
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
