//! AP-4: the kernel's next hops for backends without a static `mac`. A
//! change rebuilds every service's state; tables come from the cache.

use std::net::IpAddr;

use crate::config::Config;
use crate::neighbours::NeighbourResolver;

use super::rebuild::{ProbeStates, Rules};
use super::Controller;

impl Controller {
    /// Takes backends' egress from the kernel from now on (AP-4); backends
    /// without a static `mac` are unresolved until the resolver says.
    pub fn attach_neighbours(&mut self, resolver: NeighbourResolver) {
        resolver.set_targets(neighbour_targets(&self.cfg));
        self.neighbours = Some(resolver);
        self.rebuild(ProbeStates::Copy, Rules::Published);
    }

    /// Whether the resolver's table changed since the last step.
    pub(super) fn neighbours_changed(&self) -> bool {
        self.neighbours
            .as_ref()
            .is_some_and(|n| n.events.try_iter().count() > 0)
    }

    /// The resolver follows `cfg`'s backends from now on.
    pub(super) fn resolve_neighbours_of(&self, cfg: &Config) {
        if let Some(n) = &self.neighbours {
            n.set_targets(neighbour_targets(cfg));
        }
    }
}

/// Backends whose next hop the kernel must resolve (no static `mac`).
fn neighbour_targets(cfg: &Config) -> Vec<IpAddr> {
    cfg.backend_services
        .iter()
        .flat_map(|s| &s.backends)
        .filter(|b| b.mac.is_none())
        .map(|b| b.address)
        .collect()
}
