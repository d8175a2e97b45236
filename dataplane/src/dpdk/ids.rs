//! DPDK's numeric handles as types: a port id is not an lcore id, and
//! neither is a queue index or a config port index.

use std::fmt;

/// An ethdev port id (`uint16_t port_id`), as DPDK numbers the devices
/// it probed. Not the config's port index: [`crate::worker::Worker`] maps
/// one to the other.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(u16);

impl PortId {
    #[inline]
    pub(crate) const fn new(id: u16) -> Self {
        Self(id)
    }

    /// The number DPDK and its tools (`dpdk-telemetry.py`) show.
    #[inline]
    pub const fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An EAL lcore id: the logical core `--lcores` maps onto a CPU set.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(u32);

impl LcoreId {
    #[inline]
    pub(crate) const fn new(id: u32) -> Self {
        Self(id)
    }

    #[inline]
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for LcoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
