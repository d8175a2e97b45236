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

fn send(states: &[NotifyState<'_>]) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = sd_notify::notify(states) {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            crate::warn!("sluice: cannot notify the service manager (NOTIFY_SOCKET): {e}");
        }
    }
}
