//! The service manager's notification protocol (sd_notify(3)): readiness,
//! reloads, stopping and the watchdog, for `Type=notify` units.
//!
//! Every call is a no-op when `NOTIFY_SOCKET` is unset (a terminal, tests,
//! another supervisor). A failed send is reported once and otherwise
//! ignored: systemd then acts on its own timeouts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// Talks to the service manager; owned by the control thread.
#[derive(Debug)]
pub struct ServiceManager {
    /// `WatchdogSec` of the unit (`WATCHDOG_USEC`), if any.
    watchdog: Option<Duration>,
    last_watchdog: Option<Instant>,
}

impl Default for ServiceManager {
    fn default() -> Self {
        Self::from_env()
    }
}

impl ServiceManager {
    /// Reads the watchdog interval systemd passes (`WATCHDOG_USEC`, for
    /// this process's pid).
    pub fn from_env() -> Self {
        Self {
            watchdog: sd_notify::watchdog_enabled(),
            last_watchdog: None,
        }
    }

    /// The unit's watchdog interval, if it has one.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// READY=1: the ports are up and the first snapshot is published.
    pub fn ready(&self, status: &str) {
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// RELOADING=1, before re-reading the configuration. systemd then
    /// waits for the next READY=1 before it calls the reload done.
    pub fn reloading(&self) {
        let mut states = vec![NotifyState::Reloading];
        if let Ok(now) = NotifyState::monotonic_usec_now() {
            states.push(now);
        }
        send(&states);
    }

    /// STOPPING=1: shutting down on a signal.
    pub fn stopping(&self) {
        send(&[NotifyState::Stopping]);
    }

    /// STOPPING=1 for a stop that first drains for `drain`
    /// (`bgp.drain_time`), with EXTEND_TIMEOUT_USEC: systemd then waits
    /// the drain plus [`STOP_AFTER_DRAIN`] from now before it kills the
    /// service, whatever the unit's `TimeoutStopSec`.
    pub fn draining(&self, drain: Duration) {
        send(&[
            NotifyState::Stopping,
            NotifyState::ExtendTimeoutUsec(extend_usec(drain)),
        ]);
    }

    /// WATCHDOG=1 at most every half interval: called on each iteration
    /// of the control loop, so a loop that stops iterating stops feeding
    /// it and systemd restarts the service after `WatchdogSec`.
    pub fn alive(&mut self) {
        let Some(interval) = self.watchdog else {
            return;
        };
        let now = Instant::now();
        if self.last_watchdog.is_some_and(|t| now - t < interval / 2) {
            return;
        }
        self.last_watchdog = Some(now);
        send(&[NotifyState::Watchdog]);
    }
}

/// The time the orderly stop after a drain (workers, ports, TAPs, EAL)
/// is given: the packaged unit's `TimeoutStopSec`.
pub const STOP_AFTER_DRAIN: Duration = Duration::from_secs(30);

/// EXTEND_TIMEOUT_USEC for a drain of `drain` and the stop after it.
/// `bgp.drain_time` is at most an hour, well within the 32 bits the
/// value has (71 minutes).
fn extend_usec(drain: Duration) -> u32 {
    u32::try_from((drain + STOP_AFTER_DRAIN).as_micros()).unwrap_or(u32::MAX)
}

fn send(states: &[NotifyState<'_>]) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = sd_notify::notify(states) {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            crate::warn!("sluice: cannot notify the service manager (NOTIFY_SOCKET): {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_timeout_covers_the_drain_and_the_stop_after_it() {
        assert_eq!(extend_usec(Duration::ZERO), 30_000_000);
        assert_eq!(extend_usec(Duration::from_secs(5)), 35_000_000);
        // bgp.drain_time's maximum.
        assert_eq!(extend_usec(Duration::from_secs(3600)), 3_630_000_000);
        assert_eq!(extend_usec(Duration::from_secs(86_400)), u32::MAX);
    }
}
