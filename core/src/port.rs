//! A dataplane port (an Ethernet interface DPDK drives) as the packet path
//! needs it: the source of what it sends and the limits it imposes.

use std::net::{Ipv4Addr, Ipv6Addr};

/// One port, indexed in the snapshot by its DPDK port index (config order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortState {
    pub name: String,
    pub mac: [u8; 6],
    /// The outer IPv4 / IPv6 source of tunnels leaving here (None: no
    /// tunnel of that family can leave here).
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    /// The largest IP packet it sends (AP-3).
    pub mtu: u16,
    /// Trunk port: the 802.1Q VLAN every frame it sends carries and every
    /// frame it receives must carry as its outer tag (see [`crate::vlan`]).
    pub vlan: Option<u16>,
}
