//! The full rebuild: every service's state from the configuration, the
//! probe states, the next hops and the draining deadlines (CT-10).
//! Tables come from the cache unless a service's eligibility changed.

use std::sync::Arc;
use std::time::Instant;

use crate::publish::{build_forwarding_state_with, rebuild_changed_services, BuildInputs};

use super::Controller;

/// Where a rebuild takes the rule table from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rules {
    /// The published snapshot's: the forwarding rules did not change.
    Published,
    /// Built from the configuration.
    Build,
}

/// Where a rebuild takes the probe states from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProbeStates {
    /// A fresh copy of the checker's (the probes changed, or events were
    /// taken that no publish has applied).
    Copy,
    /// The copy the last publish used (`View::health`).
    Published,
}

impl Controller {
    /// Builds and publishes a snapshot of the running configuration;
    /// returns when it was published. `probes`: whether the probe states
    /// are copied from the checker first, or the copy the last publish
    /// used serves (it holds every health event taken so far, the ones
    /// still queued are published by the next tick): a reload that leaves
    /// the probes as they were does not copy 100,000 of them.
    /// `rules`: whether the configuration's forwarding rules are the
    /// published snapshot's (its rule table is kept) or not.
    pub(super) fn rebuild(&mut self, probes: ProbeStates, rules: Rules) -> Instant {
        self.rebuild_services_of(probes, rules, None).published
    }

    /// [`Self::rebuild`] after a reload that changed only the services
    /// `changed` (`publish::changed_in_place`), when known: those are built
    /// again on the published snapshot, unless the build's memory says a
    /// full build is due.
    pub(super) fn rebuild_services_of(
        &mut self,
        probes: ProbeStates,
        rules: Rules,
        changed: Option<Vec<usize>>,
    ) -> Rebuilt {
        let started = Instant::now();
        let health = match probes {
            ProbeStates::Copy => {
                // A whole copy, counters included: the tick's periodic
                // refresh need not copy them again.
                self.view_refreshed = started;
                self.probe_status().map(Arc::new)
            }
            ProbeStates::Published => self
                .checker
                .as_ref()
                .map(|_| Arc::clone(&self.shared.view().health)),
        };
        let neighbours = self
            .neighbours
            .as_ref()
            .map(|n| n.table.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let inputs = BuildInputs {
            health: health.as_deref(),
            now: (self.clock)(),
            neighbours: neighbours.as_ref(),
            rules: (rules == Rules::Published).then(|| Arc::clone(&self.cell.load().rules)),
        };
        self.generation += 1;
        let mut services_built = self.cfg.backend_services.len();
        let patched = changed.and_then(|changed| {
            let built = rebuild_changed_services(
                &self.cell.load(),
                &self.shared.view().reports,
                &self.cfg,
                &changed,
                &mut self.ids,
                &mut self.memory,
                &inputs,
                self.generation,
            );
            if built.is_some() {
                services_built = changed.len();
            }
            built
        });
        let (state, reports) = patched.unwrap_or_else(|| {
            build_forwarding_state_with(
                &self.cfg,
                &self.port_macs,
                &mut self.ids,
                &mut self.memory,
                &inputs,
                self.generation,
            )
        });
        self.retired.push(self.cell.publish(state));
        let published = Instant::now();
        self.retire();
        let health = health.unwrap_or_default();
        let prev_reports = Arc::clone(&self.shared.view().reports);
        super::log_pool_changes(&prev_reports, &reports);
        let mut v = self.shared.lock();
        v.reports = Arc::new(reports);
        v.health = health;
        v.config = Some(Arc::clone(&self.cfg));
        v.last_build_seconds = started.elapsed().as_secs_f64();
        drop(v);
        self.digests_due = true;
        Rebuilt {
            published,
            services_built,
        }
    }
}

/// What a rebuild did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rebuilt {
    /// When its snapshot was published.
    pub published: Instant,
    /// How many services it built (the others are the published
    /// snapshot's).
    pub services_built: usize,
}
