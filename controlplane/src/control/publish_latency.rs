//! How long a health verdict takes to reach the workers: from the moment
//! the checker recorded the probe result that flipped a backend's health
//! to the publication of the first snapshot built after it (the 10 ms
//! supervision tick, the rebuild and the publish together).

use std::time::Instant;

/// Upper bounds (seconds) of the histogram's buckets: a millisecond (a
/// flip picked up right before a tick) to ten seconds (a stalled control
/// thread).
pub const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Health-flip-to-publish latencies: per-bucket counts (the last one past
/// [`BUCKETS`]) and their sum.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct PublishLatency {
    pub counts: [u64; BUCKETS.len() + 1],
    pub sum: f64,
}

impl PublishLatency {
    /// One flip recorded at `flipped`, published at `published`.
    pub fn observe(&mut self, flipped: Instant, published: Instant) {
        let seconds = published.saturating_duration_since(flipped).as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&ub| seconds <= ub)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket] += 1;
        self.sum += seconds;
    }

    /// Flips observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn flips_land_in_the_first_bucket_that_holds_them() {
        let t = Instant::now();
        let mut h = PublishLatency::default();
        h.observe(t, t + Duration::from_millis(12));
        h.observe(t, t + Duration::from_millis(10));
        h.observe(t, t + Duration::from_secs(60));
        // A publish stamped before the flip (clock reads on two threads).
        h.observe(t + Duration::from_millis(1), t);
        assert_eq!(h.count(), 4);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[3], 1, "10 ms is in the 0.01 bucket");
        assert_eq!(h.counts[4], 1, "12 ms is in the 0.025 bucket");
        assert_eq!(h.counts[BUCKETS.len()], 1, "past the last bound");
        assert!((h.sum - 60.022).abs() < 1e-9, "{}", h.sum);
    }
}
