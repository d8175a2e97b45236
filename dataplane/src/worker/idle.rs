//! What a worker does after a poll that found nothing to do. Busy polling
//! (the default) polls again at once: the lowest latency, and a whole core
//! per worker. Adaptive idle, for cores shared with other programs (VMs,
//! test machines), backs off once the ports have been quiet for a while —
//! CPU pause hints first, then sleeps doubling up to a bound — and returns
//! to busy polling on the first packet. The bound caps the latency the
//! first packet after a quiet spell can wait: one sleep, plus the kernel's
//! timer slack and wake-up.

use std::time::Duration;

use sluice_core::stats::WorkerStats;

/// How a worker polls when its queues are empty.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum IdlePolling {
    /// Poll again at once: a dedicated core per worker (bare metal).
    #[default]
    Busy,
    /// After [`Backoff::SPIN_POLLS`] empty polls, pause; after
    /// [`Backoff::PAUSE_POLLS`] more, sleep 1 µs, 2 µs, 4 µs … up to
    /// `sleep_max` per empty poll, until a poll finds work.
    Adaptive { sleep_max: Duration },
}

/// One step of the back-off after an empty poll.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum IdleStep {
    /// Poll again at once.
    Poll,
    /// Spin this many CPU pause hints, then poll.
    Pause(u32),
    /// Sleep this long, then poll.
    Sleep(Duration),
}

/// The back-off state of one worker: how long its polls have been empty.
#[derive(Debug)]
pub(crate) struct Backoff {
    polling: IdlePolling,
    /// Consecutive polls that found nothing.
    empty: u32,
    /// The next sleep.
    sleep: Duration,
}

impl Backoff {
    /// Empty polls spun at full speed before backing off (tens of µs: a
    /// gap between two bursts of one flow does not reach it).
    pub(crate) const SPIN_POLLS: u32 = 256;
    /// Empty polls then each followed by [`Backoff::PAUSES`] pause hints
    /// (a few µs each: frees the core's pipeline for a hyperthread
    /// sibling) before the first sleep.
    pub(crate) const PAUSE_POLLS: u32 = 256;
    /// Pause hints per empty poll in that phase.
    pub(crate) const PAUSES: u32 = 32;
    /// The first sleep; each next one is twice as long, up to the bound.
    pub(crate) const FIRST_SLEEP: Duration = Duration::from_micros(1);

    pub(crate) fn new(polling: IdlePolling) -> Self {
        Self {
            polling,
            empty: 0,
            sleep: Self::FIRST_SLEEP,
        }
    }

    /// The step after a poll; `found` is whether it found any work
    /// (packets received, steered in or injected, or RX held back).
    #[inline]
    pub(crate) fn next_step(&mut self, found: bool) -> IdleStep {
        if found {
            self.empty = 0;
            self.sleep = Self::FIRST_SLEEP;
            return IdleStep::Poll;
        }
        let IdlePolling::Adaptive { sleep_max } = self.polling else {
            return IdleStep::Poll;
        };
        self.empty = self.empty.saturating_add(1);
        if self.empty <= Self::SPIN_POLLS {
            IdleStep::Poll
        } else if self.empty <= Self::SPIN_POLLS + Self::PAUSE_POLLS {
            IdleStep::Pause(Self::PAUSES)
        } else {
            let sleep = self.sleep.min(sleep_max);
            self.sleep = sleep.saturating_mul(2).min(sleep_max);
            IdleStep::Sleep(sleep)
        }
    }

    /// Counts a poll that found nothing in `stats`, and takes the step
    /// after the poll.
    #[inline]
    pub(crate) fn after_poll(&mut self, found: bool, stats: &WorkerStats) {
        if !found {
            stats.idle_polls.add(1);
        }
        match self.next_step(found) {
            IdleStep::Poll => {}
            IdleStep::Pause(n) => {
                // PAUSE on x86, as rte_pause; YIELD on arm64.
                for _ in 0..n {
                    std::hint::spin_loop();
                }
            }
            IdleStep::Sleep(d) => {
                stats.idle_sleeps.add(1);
                std::thread::sleep(d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive(max_us: u64) -> Backoff {
        Backoff::new(IdlePolling::Adaptive {
            sleep_max: Duration::from_micros(max_us),
        })
    }

    fn steps(b: &mut Backoff, empty_polls: u32) -> Vec<IdleStep> {
        (0..empty_polls).map(|_| b.next_step(false)).collect()
    }

    /// Busy polling never pauses or sleeps, however long the queues stay
    /// empty.
    #[test]
    fn busy_polling_never_backs_off() {
        let mut b = Backoff::new(IdlePolling::Busy);
        assert!(steps(&mut b, 100_000).iter().all(|s| *s == IdleStep::Poll));
    }

    /// Adaptive idle: spins, then pauses, then sleeps growing by doubling
    /// and never longer than the bound.
    #[test]
    fn adaptive_idle_spins_then_pauses_then_sleeps_up_to_the_bound() {
        let mut b = adaptive(100);
        let s = steps(&mut b, Backoff::SPIN_POLLS + Backoff::PAUSE_POLLS + 12);
        let (spin, rest) = s.split_at(Backoff::SPIN_POLLS as usize);
        let (pause, sleep) = rest.split_at(Backoff::PAUSE_POLLS as usize);
        assert!(spin.iter().all(|s| *s == IdleStep::Poll));
        assert!(pause.iter().all(|s| *s == IdleStep::Pause(Backoff::PAUSES)));
        let us: Vec<u128> = sleep
            .iter()
            .map(|s| match s {
                IdleStep::Sleep(d) => d.as_micros(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(us, [1, 2, 4, 8, 16, 32, 64, 100, 100, 100, 100, 100]);
    }

    /// The first poll that finds work resets the back-off: the next empty
    /// polls spin again before any pause or sleep.
    #[test]
    fn the_first_packet_resets_the_back_off() {
        let mut b = adaptive(50);
        steps(&mut b, 10_000);
        assert_eq!(b.next_step(true), IdleStep::Poll);
        let again = steps(&mut b, Backoff::SPIN_POLLS + Backoff::PAUSE_POLLS + 1);
        assert!(again[..Backoff::SPIN_POLLS as usize]
            .iter()
            .all(|s| *s == IdleStep::Poll));
        assert_eq!(
            again.last(),
            Some(&IdleStep::Sleep(Backoff::FIRST_SLEEP)),
            "sleeps start small again"
        );
    }
}
