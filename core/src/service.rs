//! A backend service as the packet path needs it: how its packets reach
//! its backends, how it hashes and tracks them, and its Maglev tables.

use std::net::IpAddr;
use std::sync::Arc;

use crate::affinity::SessionAffinity;
use crate::encap::Encapsulation;
use crate::ids::BackendId;
use crate::maglev_table::MaglevTable;
use crate::quic_lb::QuicLbRouting;
use crate::zones::ZoneMap;

/// Connection tracking mode (SPEC §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum TrackingMode {
    #[default]
    PerConnection,
    PerSession,
}

impl TrackingMode {
    /// Both modes, as the configuration reference lists them.
    pub const ALL: [Self; 2] = [Self::PerConnection, Self::PerSession];

    /// The value `tracking_mode` takes for it in the configuration.
    pub const fn config_name(self) -> &'static str {
        match self {
            Self::PerConnection => "PER_CONNECTION",
            Self::PerSession => "PER_SESSION",
        }
    }
}

/// `connection_persistence_on_unhealthy_backends` (CT-8).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum PersistenceOnUnhealthy {
    #[default]
    DefaultForProtocol,
    NeverPersist,
    AlwaysPersist,
}

/// Connection tracking settings of a service (SPEC §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConnectionTracking {
    pub mode: TrackingMode,
    pub persistence: PersistenceOnUnhealthy,
    /// CT-5, default 60 s. Milliseconds in the width a conntrack entry
    /// keeps them (up to ~49.7 days; the control plane holds longer
    /// timeouts at that), so no packet converts it.
    pub idle_timeout_ms: u32,
    /// CT-5 for half-open entries: how long an entry written by a SYN
    /// lives until a later packet of its connection arrives; default 5 s.
    pub half_open_timeout_ms: u32,
}

impl Default for ConnectionTracking {
    fn default() -> Self {
        Self {
            mode: TrackingMode::default(),
            persistence: PersistenceOnUnhealthy::default(),
            idle_timeout_ms: 60_000,
            half_open_timeout_ms: 5_000,
        }
    }
}

/// A backend service as the dataplane needs it.
#[derive(Clone, Debug)]
pub struct ServiceState {
    pub name: String,
    pub encapsulation: Encapsulation,
    pub affinity: SessionAffinity,
    pub tracking: ConnectionTracking,
    /// CT-10: how long entries on a removed backend keep working.
    pub draining_timeout_ms: u64,
    /// CT-11: when false, a pool flip invalidates every entry of the service.
    pub drain_on_failover: bool,
    /// `fragments = "follow_flow"`: a TCP or UDP datagram's fragments go
    /// where its 5-tuple hashes, the ports learnt from its first fragment
    /// (`crate::fragment_flows`), instead of HA-2's 3-tuple.
    pub follow_fragments: bool,
    /// Incremented by the control plane at every primary↔failover flip.
    pub pool_epoch: u32,
    /// `tables[0]`: clients in no zone (or zonal affinity off);
    /// `tables[1 + z]`: clients in zone `z` of the snapshot's [`ZoneMap`].
    /// Shared between snapshots while their inputs do not change: a
    /// publish that touches one service builds only that service's tables.
    pub tables: Vec<Arc<MaglevTable>>,
    /// The service's current backends, including draining ones.
    pub backends: Vec<BackendId>,
    /// Its QUIC-LB configurations and server IDs (None: its UDP packets
    /// are balanced like any other).
    pub quic_lb: Option<Arc<QuicLbRouting>>,
}

impl ServiceState {
    /// The table for a new flow from `client` (ZA-3): the client's zone
    /// table when the service has zonal tables (zonal affinity on), else the
    /// no-zone table. The zone lookup is skipped for services without them.
    // Public for core/tests/conntrack_rules.rs.
    #[inline]
    pub fn table_for_client(&self, zones: &ZoneMap, client: IpAddr) -> Option<&MaglevTable> {
        if self.tables.len() > 1 {
            self.table_for(zones.zone_of(client))
        } else {
            self.tables.first().map(Arc::as_ref)
        }
    }

    /// The table for a client in `zone` (None: no zone / affinity off).
    // Public for the conntrack tests (core/tests/conntrack_support).
    #[inline]
    pub fn table_for(&self, zone: Option<u16>) -> Option<&MaglevTable> {
        match zone {
            Some(z) => self
                .tables
                .get(1 + usize::from(z))
                .or_else(|| self.tables.first())
                .map(Arc::as_ref),
            None => self.tables.first().map(Arc::as_ref),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zones::Zone;

    /// ZA-3: clients in a zone subnet get their zone's table, others (and
    /// every client of a service without zonal tables) the no-zone table.
    #[test]
    fn za_3_table_for_client_by_zone_subnet() {
        let zones = ZoneMap {
            zones: vec![
                Zone {
                    name: "a".into(),
                    subnets: vec![("10.1.0.0".parse().unwrap(), 16)],
                },
                Zone {
                    name: "b".into(),
                    subnets: vec![
                        ("10.2.0.0".parse().unwrap(), 16),
                        ("2001:db8:b::".parse().unwrap(), 48),
                    ],
                },
            ],
        };
        let t = |id: u32| {
            Arc::new(MaglevTable {
                slots: vec![BackendId(id)].into(),
            })
        };
        let mut svc = ServiceState {
            name: "s".into(),
            encapsulation: Encapsulation::L2,
            affinity: SessionAffinity::None,
            tracking: ConnectionTracking::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch: 0,
            tables: vec![t(0), t(1), t(2)],
            backends: vec![],
            quic_lb: None,
        };
        let owner = |svc: &ServiceState, ip: &str| {
            svc.table_for_client(&zones, ip.parse().unwrap())
                .and_then(|t| t.lookup(0))
        };
        assert_eq!(owner(&svc, "10.1.2.3"), Some(BackendId(1)));
        assert_eq!(owner(&svc, "10.2.0.9"), Some(BackendId(2)));
        assert_eq!(owner(&svc, "2001:db8:b:1::1"), Some(BackendId(2)));
        assert_eq!(owner(&svc, "192.0.2.7"), Some(BackendId(0)), "no zone");
        svc.tables.truncate(1);
        assert_eq!(owner(&svc, "10.1.2.3"), Some(BackendId(0)), "affinity off");
    }
}
