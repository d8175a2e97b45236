//! The sans-IO health state of one (backend, health check) pair (HC-3 …
//! HC-5, HC-7) and the probe schedule that HC-4's detection windows assume.

use std::time::Duration;

use super::failure::FailureReason;
use crate::config::HealthCheckConfig;

/// What a new backend is considered before its first verdict.
///
/// Default [`InitialState::Unhealthy`]: a backend added by a reload must
/// prove itself (`healthy_threshold` successes) before it gets new
/// connections, so a mistyped address never takes traffic. At start-up this
/// costs nothing: while every backend is unhealthy, EL-1/EL-4 send traffic to
/// all of them anyway (fail open), exactly as if they were healthy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum InitialState {
    Healthy,
    #[default]
    Unhealthy,
}

/// One probe's outcome as the state machine sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    /// Passed, with what the response said about the weight.
    Success { weight: WeightReport },
    /// Failed, and why (the state machine needs only that it failed).
    Failure(FailureReason),
}

/// The `X-Load-Balancing-Endpoint-Weight` header of a passing probe (HC-7).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WeightReport {
    /// TCP probes carry no weight.
    NotApplicable,
    Valid(u16),
    /// Missing or not an integer 0–1000: keep the last weight, count it.
    Invalid,
}

/// Thresholds of HC-3.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Thresholds {
    pub healthy: u32,
    pub unhealthy: u32,
}

impl From<&HealthCheckConfig> for Thresholds {
    fn from(c: &HealthCheckConfig) -> Self {
        Self {
            healthy: c.healthy_threshold.max(1),
            unhealthy: c.unhealthy_threshold.max(1),
        }
    }
}

/// What changed with one result.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Change {
    /// The healthy flag flipped.
    pub health: bool,
    /// The weight changed.
    pub weight: bool,
    /// A success carried no valid weight header (HC-7, counted).
    pub weight_invalid: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthState {
    pub healthy: bool,
    /// Consecutive results of the kind that would flip the state.
    pub consecutive_successes: u32,
    pub consecutive_failures: u32,
    /// Last reported weight (HC-7), initially 1.
    pub weight: u16,
    pub transitions: u64,
    pub weight_header_invalid: u64,
}

impl HealthState {
    pub fn new(initial: InitialState) -> Self {
        Self {
            healthy: initial == InitialState::Healthy,
            consecutive_successes: 0,
            consecutive_failures: 0,
            weight: 1,
            transitions: 0,
            weight_header_invalid: 0,
        }
    }

    /// HC-3/HC-5: the state flips only after `threshold` consecutive results
    /// of the other kind; one result of the same kind resets the count.
    pub fn record(&mut self, result: ProbeResult, t: Thresholds) -> Change {
        let mut change = Change::default();
        match result {
            ProbeResult::Success { weight } => {
                self.consecutive_failures = 0;
                self.consecutive_successes = self.consecutive_successes.saturating_add(1);
                match weight {
                    WeightReport::Valid(w) if w != self.weight => {
                        self.weight = w;
                        change.weight = true;
                    }
                    WeightReport::Valid(_) | WeightReport::NotApplicable => {}
                    WeightReport::Invalid => {
                        self.weight_header_invalid += 1;
                        change.weight_invalid = true;
                    }
                }
                if !self.healthy && self.consecutive_successes >= t.healthy {
                    self.healthy = true;
                    change.health = true;
                }
            }
            ProbeResult::Failure(_) => {
                self.consecutive_successes = 0;
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                if self.healthy && self.consecutive_failures >= t.unhealthy {
                    self.healthy = false;
                    change.health = true;
                }
            }
        }
        if change.health {
            self.transitions += 1;
        }
        change
    }
}

/// HC-4's schedule: the next probe starts one `interval` after the previous
/// one finished (answered, or timed out). That is what makes the failure
/// window `timeout × U + interval × (U − 1)`.
pub fn next_probe_at(finished: Duration, interval: Duration) -> Duration {
    finished + interval
}

/// Parses `X-Load-Balancing-Endpoint-Weight` (HC-7): an integer 0–1000,
/// surrounding blanks allowed, anything else invalid.
pub fn parse_weight(value: &str) -> Option<u16> {
    let v = value.trim();
    if v.is_empty() || v.len() > 4 || !v.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    v.parse::<u16>().ok().filter(|&w| w <= 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T33: Thresholds = Thresholds {
        healthy: 3,
        unhealthy: 3,
    };
    const OK: ProbeResult = ProbeResult::Success {
        weight: WeightReport::NotApplicable,
    };
    const FAIL: ProbeResult = ProbeResult::Failure(FailureReason::Timeout);

    /// Drives the state with a simulated clock: each probe lasts `took`
    /// (the response time, or the timeout for a failure) and the next starts
    /// `interval` later. Returns the simulated time at which the state flips.
    fn time_to_flip(
        st: &mut HealthState,
        result: ProbeResult,
        took: Duration,
        interval: Duration,
    ) -> Duration {
        let mut now = Duration::ZERO;
        for _ in 0..100 {
            let finished = now + took;
            if st.record(result, T33).health {
                return finished;
            }
            now = next_probe_at(finished, interval);
        }
        panic!("never flipped");
    }

    /// HC-4's worked example: timeout 5 s, interval 2 s, thresholds 3/3,
    /// response 1 s → 19 s to go unhealthy, 7 s to come back.
    #[test]
    fn hc_4_windows_19s_and_7s() {
        let interval = Duration::from_secs(2);
        let mut st = HealthState::new(InitialState::Healthy);
        let down = time_to_flip(&mut st, FAIL, Duration::from_secs(5), interval);
        assert_eq!(down, Duration::from_secs(19));
        assert!(!st.healthy);
        let up = time_to_flip(&mut st, OK, Duration::from_secs(1), interval);
        assert_eq!(up, Duration::from_secs(7));
        assert!(st.healthy);
        assert_eq!(st.transitions, 2);
    }

    /// HC-3: failures short of the threshold keep the backend healthy, and
    /// one success in between resets the count.
    #[test]
    fn hc_3_thresholds_need_consecutive_results() {
        let mut st = HealthState::new(InitialState::Healthy);
        for r in [FAIL, FAIL, OK, FAIL] {
            assert!(!st.record(r, T33).health);
            assert!(st.healthy);
        }
        st.record(FAIL, T33);
        assert!(st.record(FAIL, T33).health);
        assert!(!st.healthy);
    }

    /// HC-5: an unhealthy backend returns after `healthy_threshold` successes.
    #[test]
    fn hc_5_unhealthy_backend_returns() {
        let mut st = HealthState::new(InitialState::Unhealthy);
        let t = Thresholds {
            healthy: 2,
            unhealthy: 3,
        };
        assert!(!st.record(OK, t).health);
        assert!(st.record(OK, t).health);
        assert!(st.healthy);
    }

    /// HC-7: valid header sets the weight; missing/invalid keeps it, counted.
    #[test]
    fn hc_7_weight_header() {
        let mut st = HealthState::new(InitialState::Healthy);
        assert_eq!(st.weight, 1);
        let c = st.record(
            ProbeResult::Success {
                weight: WeightReport::Valid(40),
            },
            T33,
        );
        assert!(c.weight && st.weight == 40);
        let c = st.record(
            ProbeResult::Success {
                weight: WeightReport::Invalid,
            },
            T33,
        );
        assert!(c.weight_invalid && !c.weight && st.weight == 40);
        assert_eq!(st.weight_header_invalid, 1);
        for (s, w) in [
            ("0", Some(0)),
            (" 1000 ", Some(1000)),
            ("1001", None),
            ("-1", None),
            ("", None),
            ("7x", None),
            ("+5", None),
        ] {
            assert_eq!(parse_weight(s), w, "{s:?}");
        }
    }
}
