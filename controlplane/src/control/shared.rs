//! What the control thread shares with the metrics and control-socket
//! threads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::health::{ProbeKey, ProbeStatus};
use crate::publish::ServiceReport;

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
    pub health: Arc<HashMap<ProbeKey, ProbeStatus>>,
    pub config: Option<Arc<Config>>,
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    pub last_build_seconds: f64,
    /// Digests and announcement (AP-6), shared by every copy of the view.
    pub fleet: Arc<crate::fleet::Fleet>,
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
