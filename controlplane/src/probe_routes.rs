//! The kernel's routes for data-path probes: a probe socket is marked
//! with its egress port's mark (`health::data_socket`), and for each port
//! with a TAP a policy rule sends packets with that mark to a table of
//! their own, whose default routes lead into the TAP through a gateway
//! that exists only as a permanent neighbour entry with the port's MAC.
//! The kernel thus sends a probe to any VIP through the TAP without
//! resolving anything, and the workers take it from there. Nothing else
//! on the host carries the mark, so nothing else is routed differently.
//!
//! Installed when a configuration has a data-path check, removed when
//! sluice stops (the table's routes and neighbours go with the TAP; the
//! rules are deleted here). A rule left by a killed sluice is replaced at
//! the next start.
//!
//! As `ip` would do it, for port 0 with TAP `sl-up`:
//!
//! ```text
//! ip rule add fwmark 0x5c1c0000 lookup 1545338880 pref 1545
//! ip neigh replace 169.254.92.28 lladdr <port MAC> dev sl-up nud permanent
//! ip route replace default via 169.254.92.28 dev sl-up onlink table 1545338880
//! (and the same for IPv6 through fe80::5c1c)
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol, RouteScope,
    RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::exception::{interface_index, KernelRequestError};
use crate::health::data_socket::{PROBE_MARK_BASE, PROBE_TABLE_BASE};
use crate::rtnetlink::RequestSocket;

/// The gateway of probe routes over IPv4: link-local, never on a wire.
pub const GATEWAY4: Ipv4Addr = Ipv4Addr::new(169, 254, 92, 28);
/// The gateway of probe routes over IPv6.
pub const GATEWAY6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x5c1c);
/// The rules' preference: ahead of the main table's (32766).
const PREFERENCE: u32 = 1545;

/// The probe rules installed, deleted on drop.
#[derive(Debug)]
pub struct ProbeRoutes {
    /// (family, port index) of each rule.
    rules: Vec<(AddressFamily, u32)>,
}

/// One port's TAP, for its probe routes.
#[derive(Copy, Clone, Debug)]
pub struct ProbeTap<'a> {
    /// The port's config index: its mark and table.
    pub port: u32,
    pub iface: &'a str,
    pub mac: [u8; 6],
    /// The port has an address of each family (IPv6 on the TAP at all).
    pub ipv4: bool,
    pub ipv6: bool,
}

impl ProbeRoutes {
    /// Installs the rule, neighbour and route of each family for each TAP.
    pub fn install(taps: &[ProbeTap<'_>]) -> Result<Self, KernelRequestError> {
        let mut socket = RequestSocket::open().map_err(|source| KernelRequestError {
            what: "netlink socket for probe routes".into(),
            source,
        })?;
        let mut out = Self { rules: Vec::new() };
        for tap in taps {
            let index = interface_index(tap.iface).map_err(|source| KernelRequestError {
                what: format!("interface {}", tap.iface),
                source,
            })?;
            let families = [
                (tap.ipv4, AddressFamily::Inet, IpAddr::V4(GATEWAY4)),
                (tap.ipv6, AddressFamily::Inet6, IpAddr::V6(GATEWAY6)),
            ];
            for (_, family, gateway) in families.into_iter().filter(|f| f.0) {
                let mut apply = |what: String, msg, flags| {
                    socket
                        .apply(msg, flags)
                        .map_err(|source| KernelRequestError { what, source })
                };
                // A rule left by an earlier sluice would be doubled.
                let _ = apply(
                    String::new(),
                    RouteNetlinkMessage::DelRule(rule(family, tap.port)),
                    0,
                );
                apply(
                    format!(
                        "rule add fwmark {:#x} lookup {} pref {PREFERENCE}",
                        mark(tap.port),
                        table(tap.port)
                    ),
                    RouteNetlinkMessage::NewRule(rule(family, tap.port)),
                    NLM_F_CREATE,
                )?;
                out.rules.push((family, tap.port));
                if family == AddressFamily::Inet {
                    // The answers come from VIPs, which the kernel may
                    // route out of another interface: a strict
                    // reverse-path filter on the TAP would drop them.
                    let key = format!("net/ipv4/conf/{}/rp_filter", tap.iface);
                    crate::exception::sysctl(&key, "2").map_err(|e| KernelRequestError {
                        what: format!("sysctl {key}=2"),
                        source: std::io::Error::other(e.to_string()),
                    })?;
                }
                apply(
                    format!("neigh replace {gateway} dev {} nud permanent", tap.iface),
                    RouteNetlinkMessage::NewNeighbour(neighbour(index, gateway, tap.mac)),
                    NLM_F_CREATE | NLM_F_REPLACE,
                )?;
                apply(
                    format!(
                        "route replace default via {gateway} dev {} onlink table {}",
                        tap.iface,
                        table(tap.port)
                    ),
                    RouteNetlinkMessage::NewRoute(route(index, gateway, tap.port)),
                    NLM_F_CREATE | NLM_F_REPLACE,
                )?;
            }
        }
        Ok(out)
    }
}

impl Drop for ProbeRoutes {
    fn drop(&mut self) {
        if let Ok(mut socket) = RequestSocket::open() {
            for &(family, port) in &self.rules {
                let _ = socket.apply(RouteNetlinkMessage::DelRule(rule(family, port)), 0);
            }
        }
    }
}

fn mark(port: u32) -> u32 {
    PROBE_MARK_BASE + port
}

fn table(port: u32) -> u32 {
    PROBE_TABLE_BASE + port
}

/// `fwmark MARK lookup TABLE pref PREFERENCE`.
fn rule(family: AddressFamily, port: u32) -> RuleMessage {
    let mut m = RuleMessage::default();
    m.header.family = family;
    m.header.action = RuleAction::ToTable;
    m.attributes = vec![
        RuleAttribute::FwMark(mark(port)),
        RuleAttribute::FwMask(u32::MAX),
        RuleAttribute::Table(table(port)),
        RuleAttribute::Priority(PREFERENCE),
    ];
    m
}

/// `GATEWAY lladdr MAC dev TAP nud permanent`.
fn neighbour(index: u32, gateway: IpAddr, mac: [u8; 6]) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.ifindex = index;
    m.header.state = NeighbourState::Permanent;
    let (family, address) = match gateway {
        IpAddr::V4(a) => (AddressFamily::Inet, NeighbourAddress::Inet(a)),
        IpAddr::V6(a) => (AddressFamily::Inet6, NeighbourAddress::Inet6(a)),
    };
    m.header.family = family;
    m.attributes = vec![
        NeighbourAttribute::Destination(address),
        NeighbourAttribute::LinkLayerAddress(mac.to_vec()),
    ];
    m
}

/// `default via GATEWAY dev TAP onlink table TABLE`.
fn route(index: u32, gateway: IpAddr, port: u32) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.table = RouteHeader::RT_TABLE_UNSPEC;
    m.header.protocol = RouteProtocol::Boot;
    m.header.scope = RouteScope::Universe;
    m.header.kind = RouteType::Unicast;
    let via = match gateway {
        IpAddr::V4(a) => {
            m.header.address_family = AddressFamily::Inet;
            m.header.flags = RouteFlags::Onlink;
            RouteAddress::Inet(a)
        }
        IpAddr::V6(a) => {
            m.header.address_family = AddressFamily::Inet6;
            RouteAddress::Inet6(a)
        }
    };
    m.attributes = vec![
        RouteAttribute::Table(table(port)),
        RouteAttribute::Gateway(via),
        RouteAttribute::Oif(index),
    ];
    m
}
