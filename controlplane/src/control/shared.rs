//! What the control thread shares with the metrics and control-socket
//! threads.

use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::health::ProbeStatuses;
use crate::publish::ServiceReport;

use super::publish_latency::PublishLatency;

/// What other threads may read (metrics, `sluice status`).
#[derive(Debug, Default)]
pub struct Shared {
    pub view: Mutex<View>,
}

/// Cheap to clone: the large parts are shared, so a reader (metrics,
/// `sluice status`) holds the lock only for a few reference counts.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub reports: Arc<Vec<ServiceReport>>,
    pub health: Arc<ProbeStatuses>,
    pub config: Option<Arc<Config>>,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    /// The latest reload: whether it applied, when (seconds since the Unix
    /// epoch) and, when it was refused, why. None before the first reload.
    pub last_reload: Option<LastReload>,
    pub last_build_seconds: f64,
    /// Health flips' latency to the publication reflecting them.
    pub health_publish: PublishLatency,
    /// Digests and announcement (AP-6), shared by every copy of the view.
    pub fleet: Arc<crate::fleet::Fleet>,
    /// What the start did with the conntrack hand-off file.
    pub handoff: crate::handoff::StartReport,
}

/// The outcome of the latest reload.
#[derive(Clone, Debug)]
pub struct LastReload {
    pub ok: bool,
    pub unix_seconds: f64,
    pub error: Option<String>,
}

impl Shared {
    pub fn view(&self) -> View {
        self.lock().clone()
    }

    /// The view for the control thread to update.
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }
}
