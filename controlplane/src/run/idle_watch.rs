//! `--exit-on-idle`: whether the workers' input has gone quiet.
//!
//! Nothing counts as quiet before every worker has started polling: on a
//! loaded machine a worker may start late (each first writes its
//! conntrack shard, 136 MiB at the default capacity), and a replay whose
//! packets wait in that worker's queue would otherwise be cut short. A
//! worker that never starts does not hold the run for ever: it ends
//! [`HUNG_WORKER_LIMIT`] after start.
//!
//! Once every worker polls:
//!
//! - before any packet, the run ends after [`IDLE_STARTUP_GRACE`] (or the
//!   limit, if longer): a source that never sends anything;
//! - after packets, quiet means the limit has passed since the last one
//!   and every worker has polled twice since (the first poll after a stall
//!   may still read a burst): a worker the scheduler starved for longer
//!   than the limit has not read its queues yet. A worker that stops
//!   polling does not hold the exit up for more than
//!   [`IDLE_STARTUP_GRACE`] beyond the limit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use sluice_core::stats::WorkerStats;

/// How long `--exit-on-idle` waits for the first packet once every worker
/// polls, and at most for a worker that stopped polling.
pub const IDLE_STARTUP_GRACE: Duration = Duration::from_secs(5);

/// How long `--exit-on-idle` waits for a worker that never starts polling.
pub const HUNG_WORKER_LIMIT: Duration = Duration::from_secs(120);

pub struct IdleWatch {
    limit: Duration,
    started: Instant,
    /// When every worker had polled at least once.
    all_polling_since: Option<Instant>,
    last_rx: u64,
    last_change: Instant,
    polls_at_change: Vec<u64>,
}

impl IdleWatch {
    /// Watches `stats` for `limit` without input, from `now` on.
    pub fn new(limit: Duration, stats: &[Arc<CachePadded<WorkerStats>>], now: Instant) -> Self {
        Self {
            limit,
            started: now,
            all_polling_since: None,
            last_rx: rx_total(stats),
            last_change: now,
            polls_at_change: polls(stats),
        }
    }

    /// Whether the run should end at `now` (see the module documentation).
    pub fn idle(&mut self, stats: &[Arc<CachePadded<WorkerStats>>], now: Instant) -> bool {
        let polls = polls(stats);
        if self.all_polling_since.is_none() && polls.iter().all(|&p| p > 0) {
            self.all_polling_since = Some(now);
        }
        let rx = rx_total(stats);
        if rx != self.last_rx {
            self.last_rx = rx;
            self.last_change = now;
            self.polls_at_change = polls;
            return false;
        }
        let quiet = now.saturating_duration_since(self.last_change);
        let limit = self.limit;
        let Some(all_polling_since) = self.all_polling_since else {
            return quiet >= limit
                && now.saturating_duration_since(self.started) >= HUNG_WORKER_LIMIT;
        };
        if rx == 0 {
            return now.saturating_duration_since(all_polling_since)
                >= limit.max(IDLE_STARTUP_GRACE);
        }
        let all_polled_since_change = polls
            .iter()
            .zip(&self.polls_at_change)
            .all(|(now, then)| now.saturating_sub(*then) >= 2);
        (quiet >= limit && all_polled_since_change) || quiet >= limit + IDLE_STARTUP_GRACE
    }
}

fn rx_total(stats: &[Arc<CachePadded<WorkerStats>>]) -> u64 {
    stats
        .iter()
        .flat_map(|s| s.ports.iter())
        .map(|p| p.rx_packets.get())
        .sum()
}

fn polls(stats: &[Arc<CachePadded<WorkerStats>>]) -> Vec<u64> {
    stats.iter().map(|s| s.polls.get()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    /// Workers as the supervision loop sees them: worker `w` starts
    /// polling at `starts[w]` and polls every tick from then on; the
    /// first poll of worker `w` reads `input[w]` packets.
    struct Workers {
        stats: Vec<Arc<CachePadded<WorkerStats>>>,
        starts: Vec<Option<Duration>>,
        input: Vec<u64>,
    }

    impl Workers {
        fn new(starts: &[Option<Duration>], input: &[u64]) -> Self {
            Self {
                stats: starts
                    .iter()
                    .map(|_| Arc::new(WorkerStats::new()))
                    .collect(),
                starts: starts.to_vec(),
                input: input.to_vec(),
            }
        }

        /// One tick of every worker at `t` since start.
        fn poll(&self, t: Duration) {
            for (w, s) in self.stats.iter().enumerate() {
                if self.starts[w].is_some_and(|start| t >= start) {
                    if s.polls.get() == 0 {
                        s.ports[0].rx_packets.add(self.input[w]);
                    }
                    s.polls.add(1);
                }
            }
        }

        /// When `--exit-on-idle LIMIT` ends the run (None: not within
        /// `horizon`).
        fn run_ends(&self, limit: Duration, horizon: Duration) -> Option<Duration> {
            let t0 = Instant::now();
            let mut watch = IdleWatch::new(limit, &self.stats, t0);
            let mut t = Duration::ZERO;
            while t <= horizon {
                self.poll(t);
                if watch.idle(&self.stats, t0 + t) {
                    return Some(t);
                }
                t += TICK;
            }
            None
        }
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    /// A worker still writing its conntrack shard at 8 s (a loaded
    /// machine) reads the replay then; the run does not end before it.
    #[test]
    fn a_worker_starved_until_8_s_reads_its_input_before_the_run_ends() {
        let limit = Duration::from_millis(500);
        let one = Workers::new(&[secs(8)], &[10]);
        let ends = one.run_ends(limit, Duration::from_secs(30)).unwrap();
        assert_eq!(one.stats[0].ports[0].rx_packets.get(), 10);
        assert!(ends >= Duration::from_secs(8) + limit, "ended at {ends:?}");
        assert!(ends < Duration::from_secs(9), "ended at {ends:?}");

        let two = Workers::new(&[secs(0), secs(8)], &[0, 10]);
        let ends = two.run_ends(limit, Duration::from_secs(30)).unwrap();
        assert!(ends >= Duration::from_secs(8) + limit, "ended at {ends:?}");
    }

    /// One worker reads traffic at once; the other, whose queue holds the
    /// rest, starts at 8 s: the run waits for it beyond limit + grace.
    #[test]
    fn traffic_on_one_worker_waits_for_a_late_second_one() {
        let limit = Duration::from_millis(500);
        let w = Workers::new(&[secs(0), secs(8)], &[5, 10]);
        let ends = w.run_ends(limit, Duration::from_secs(30)).unwrap();
        assert_eq!(rx_total(&w.stats), 15);
        assert!(ends >= Duration::from_secs(8) + limit, "ended at {ends:?}");
    }

    /// Workers polling from the start: no input ends the run after the
    /// grace, input after the limit past the last packet.
    #[test]
    fn polling_workers_end_after_the_grace_or_the_limit() {
        let limit = Duration::from_millis(500);
        let silent = Workers::new(&[secs(0), secs(0)], &[0, 0]);
        let ends = silent.run_ends(limit, Duration::from_secs(30)).unwrap();
        assert_eq!(ends, IDLE_STARTUP_GRACE);
        let busy = Workers::new(&[secs(0), secs(0)], &[3, 4]);
        let ends = busy.run_ends(limit, Duration::from_secs(30)).unwrap();
        assert!(
            ends >= limit && ends < limit + 3 * TICK,
            "ended at {ends:?}"
        );
    }

    /// A worker that never polls ends the run at the hard limit, not
    /// before and not never.
    #[test]
    fn a_hung_worker_ends_the_run_at_the_hard_limit() {
        let limit = Duration::from_millis(500);
        let hung = Workers::new(&[secs(0), None], &[7, 0]);
        let ends = hung.run_ends(limit, Duration::from_secs(200)).unwrap();
        assert_eq!(ends, HUNG_WORKER_LIMIT);
    }
}
