//! Retiring what a publish replaced: old snapshots are freed on the
//! control thread once no worker, metrics scrape or status request holds
//! one, and backend ids no snapshot in use names are released (CT-7).

use std::sync::Arc;

use crate::config::Config;

use super::Controller;

impl Controller {
    /// Frees retired snapshots no one holds any more, then the ids no
    /// snapshot still in use names, zeroing their counters.
    pub(super) fn retire(&mut self) {
        self.retired.retain(|old| Arc::strong_count(old) > 1);
        let oldest = self
            .retired
            .iter()
            .map(|s| s.generation)
            .min()
            .map_or(self.generation, |g| g.min(self.generation));
        let stats = &self.stats;
        self.ids
            .release(oldest, (self.clock)(), self.id_hold_ms, |index| {
                for s in stats {
                    s.backend_packets.reset(index);
                }
            });
    }
}

/// Hold before an id's generation wraps (see `backend_ids`): the longest
/// idle timeout of `cfg` or configured before (`previous`), plus a second
/// for bursts in flight.
pub(super) fn id_hold_ms(cfg: &Config, previous: u64) -> u64 {
    cfg.backend_services
        .iter()
        .map(|s| u64::try_from(s.connection_tracking.idle_timeout.as_millis()).unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0)
        .saturating_add(1_000)
        .max(previous)
}
