//! Zones (SPEC §6): the client subnets of each zone, for the per-zone
//! table variants of services with zonal affinity.

use std::net::IpAddr;

/// Every zone's client subnets, in configuration order (the position is
/// the zone's index).
#[derive(Clone, Debug, Default)]
pub struct ZoneMap {
    pub zones: Vec<Zone>,
}

/// Client subnets of one zone.
#[derive(Clone, Debug)]
pub struct Zone {
    pub name: String,
    pub subnets: Vec<(IpAddr, u8)>,
}

impl ZoneMap {
    /// The zone of a client address (SPEC §6: "compatible" clients), by a
    /// linear scan: a handful of subnets, looked up only for new flows of
    /// services that have zonal tables
    /// (`crate::service::ServiceState::table_for_client`).
    pub(crate) fn zone_of(&self, client: IpAddr) -> Option<u16> {
        self.zones
            .iter()
            .position(|z| {
                z.subnets
                    .iter()
                    .any(|&(net, len)| in_subnet(client, net, len))
            })
            .map(|i| i as u16)
    }
}

fn in_subnet(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
