//! What is announced, per VIP: written by the announcer
//! (`crate::announce`), read by `sluice status` and the metrics through
//! the [`super::Fleet`] they share.

use std::net::IpAddr;
use std::sync::Mutex;

/// What is announced, for `sluice status` and the metrics.
#[derive(Debug, Default)]
pub struct Status {
    vips: Mutex<Option<Vec<VipStatus>>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipStatus {
    pub vip: IpAddr,
    pub announced: bool,
    /// A service of the VIP has a healthy, eligible backend with a next
    /// hop: the appliance could serve it (withdrawn anyway, it is for
    /// another reason: stopping, not ready, the route not installed).
    pub servable: bool,
    /// Why not (empty when announced).
    pub reason: String,
}

impl Status {
    /// Every VIP's state; None without `[bgp]`.
    pub fn vips(&self) -> Option<Vec<VipStatus>> {
        self.vips.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set(&self, vips: Vec<VipStatus>) {
        *self.vips.lock().unwrap_or_else(|p| p.into_inner()) = Some(vips);
    }

    pub(crate) fn clear(&self) {
        *self.vips.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
