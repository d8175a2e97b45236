//! A backend as the packet path needs it: where it is, how it is reached,
//! and what the control plane decided about it (health, weight, pool,
//! draining).

use std::net::IpAddr;

use crate::ids::{BackendId, ServiceId};
use crate::time::Millis;

/// Whether a backend belongs to the primary or the failover pool (FO-1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Pool {
    #[default]
    Primary,
    Failover,
}

/// Where to send packets for a backend: egress port and next-hop MAC.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Egress {
    /// The port's index in the snapshot (config order).
    pub port: u16,
    /// None while the next hop is unresolved (packets dropped, counted).
    pub next_hop_mac: Option<[u8; 6]>,
}

/// One backend of one service, keyed by its stable id.
#[derive(Clone, Debug)]
pub struct BackendState {
    pub id: BackendId,
    pub service: ServiceId,
    pub address: IpAddr,
    pub healthy: bool,
    /// 0–1000 (HC-7); 1 when unweighted.
    pub weight: u16,
    pub pool: Pool,
    /// CT-10: Some(deadline) once removed from the config; entries keep
    /// working until the deadline, new connections never come here.
    pub draining_until: Option<Millis>,
    pub egress: Egress,
}
