//! The full rebuild: every service's state from the configuration, the
//! probe states, the next hops and the draining deadlines (CT-10).
//! Tables come from the cache unless a service's eligibility changed.

use std::sync::Arc;
use std::time::Instant;

use crate::publish::{build_forwarding_state_with, BuildInputs};

use super::Controller;

impl Controller {
    /// Builds and publishes a snapshot of the running configuration;
    /// returns when it was published.
    pub(super) fn rebuild(&mut self) -> Instant {
        let started = Instant::now();
        let health = self.probe_status();
        let neighbours = self
            .neighbours
            .as_ref()
            .map(|n| n.table.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let inputs = BuildInputs {
            health: health.as_ref(),
            now: (self.clock)(),
            neighbours: neighbours.as_ref(),
        };
        self.generation += 1;
        let (state, reports) = build_forwarding_state_with(
            &self.cfg,
            &self.port_macs,
            &mut self.ids,
            &mut self.memory,
            &inputs,
            self.generation,
        );
        for s in &self.stats {
            s.backend_packets.cover(state.backends.len());
        }
        self.retired.push(self.cell.publish(state));
        let published = Instant::now();
        self.retire();
        let health = health.unwrap_or_default();
        let prev_reports = Arc::clone(&self.shared.view().reports);
        super::log_pool_changes(&prev_reports, &reports);
        let mut v = self.shared.lock();
        v.reports = Arc::new(reports);
        v.health = Arc::new(health);
        v.config = Some(Arc::clone(&self.cfg));
        v.last_build_seconds = started.elapsed().as_secs_f64();
        drop(v);
        self.digests_due = true;
        published
    }
}
