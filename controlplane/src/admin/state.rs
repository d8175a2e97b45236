//! What the admin endpoint reports: the control loop's heartbeat
//! (`/healthz`) and, once the appliance runs, the sources `/metrics` and
//! `/ready` answer from. The control thread writes it; the endpoint's
//! thread ([`super::http`]) reads it through [`super::request`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::metrics::MetricsSources;

/// `/healthz` answers 503 once the control loop has not run for this long.
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(10);

/// What the admin endpoint reports; the control thread updates it.
pub struct AdminState {
    epoch: Instant,
    /// Milliseconds since `epoch` of the control loop's last iteration.
    last_beat_ms: AtomicU64,
    /// Set once ports, workers and the first snapshot exist; cleared before
    /// the ports close. The lock is held while answering, so clearing it
    /// waits for an answer in progress.
    published: Mutex<Option<Arc<MetricsSources>>>,
}

impl AdminState {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            published: Mutex::new(None),
        })
    }

    /// The control loop (or start-up, between steps) is alive.
    pub fn beat(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last [`beat`](Self::beat) (or since creation).
    pub fn since_beat(&self) -> Duration {
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    /// Ports started, workers running, first snapshot published: /metrics
    /// and /ready answer from `src` from now on.
    pub fn publish(&self, src: Arc<MetricsSources>) {
        *self.lock() = Some(src);
    }

    /// Stopping: /metrics and /ready answer 503 from now on, and no answer
    /// still reads the ports when this returns.
    pub fn withdraw(&self) {
        *self.lock() = None;
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Arc<MetricsSources>>> {
        self.published.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Withdraws the published sources when dropped, so every exit path stops
/// answering from the ports before they close.
pub struct Published<'a>(pub &'a AdminState);

impl Drop for Published<'_> {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}
