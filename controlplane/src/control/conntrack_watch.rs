//! One log line when a worker's conntrack shard comes near full, and one
//! when it has room again: above [`NEAR_FULL`] of its capacity new flows
//! soon go by Maglev alone (`sluice_conntrack_insert_failed_total`).

use super::Controller;

/// Fill (entries / capacity) at which a shard is reported near full.
pub(super) const NEAR_FULL: f64 = 0.9;
/// Fill below which a near-full shard is reported to have room again
/// (lower than [`NEAR_FULL`]: a shard hovering at the mark logs once).
pub(super) const ROOM_AGAIN: f64 = 0.8;

/// The new near-full state of a shard of `capacity` holding `entries`,
/// `near_full` before: Some when it changed.
pub(super) fn crossed(entries: u64, capacity: u64, near_full: bool) -> Option<bool> {
    if capacity == 0 {
        return None;
    }
    let fill = entries as f64 / capacity as f64;
    match near_full {
        false if fill >= NEAR_FULL => Some(true),
        true if fill < ROOM_AGAIN => Some(false),
        _ => None,
    }
}

impl Controller {
    /// Reads each worker's conntrack occupancy and logs the crossings
    /// (with the `worker` field).
    pub(super) fn watch_conntrack(&mut self) {
        self.conntrack_near_full.resize(self.stats.len(), false);
        for (worker, (s, near_full)) in self
            .stats
            .iter()
            .zip(self.conntrack_near_full.iter_mut())
            .enumerate()
        {
            let (entries, capacity) = (s.conntrack.entries.get(), s.conntrack.capacity.get());
            match crossed(entries, capacity, *near_full) {
                Some(true) => crate::warn!(
                    worker,
                    "sluice: conntrack: worker {worker} near full: {entries} of {capacity} \
                     connections; beyond it new flows go by Maglev alone \
                     (raise dataplane.conntrack_capacity)"
                ),
                Some(false) => crate::info!(
                    worker,
                    "sluice: conntrack: worker {worker} has room again: {entries} of {capacity} connections"
                ),
                None => continue,
            }
            *near_full = !*near_full;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_full_at_ninety_percent_room_again_below_eighty() {
        assert_eq!(crossed(899, 1000, false), None);
        assert_eq!(crossed(900, 1000, false), Some(true));
        assert_eq!(crossed(850, 1000, true), None);
        assert_eq!(crossed(799, 1000, true), Some(false));
        assert_eq!(crossed(5, 0, false), None);
    }
}
