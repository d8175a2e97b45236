//! The kernel's state as the resolver keeps it, and a backend's egress
//! from it: pure functions of parsed rtnetlink messages
//! (`netlink-packet-route`), so they are tested without a kernel.

use std::collections::HashMap;
use std::net::IpAddr;

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::RouteNetlinkMessage;
use sluice_core::backend::Egress;

use super::route::{LookupError, Route};

/// One neighbour entry: its MAC (if any) and NUD state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Neighbour {
    pub lladdr: Option<[u8; 6]>,
    pub state: NeighbourState,
}

impl Neighbour {
    /// The MAC, when the entry may be used to send (RFC 4861 §7.3.2: STALE
    /// may send; the kernel re-confirms it).
    pub(super) fn usable_mac(&self) -> Option<[u8; 6]> {
        use NeighbourState::*;
        let usable = matches!(
            self.state,
            Reachable | Stale | Delay | Probe | Permanent | Noarp
        );
        usable.then_some(self.lladdr)?
    }

    /// Whether the entry is confirmed: no nudge needed.
    pub(super) fn is_fresh(&self) -> bool {
        use NeighbourState::*;
        matches!(self.state, Reachable | Permanent | Noarp)
    }
}

/// The NUD state as `ip neigh` names it (operators know these words).
pub(super) fn state_name(s: NeighbourState) -> String {
    use NeighbourState::*;
    match s {
        Incomplete => "INCOMPLETE".into(),
        Reachable => "REACHABLE".into(),
        Stale => "STALE".into(),
        Delay => "DELAY".into(),
        Probe => "PROBE".into(),
        Failed => "FAILED".into(),
        Noarp => "NOARP".into(),
        Permanent => "PERMANENT".into(),
        None => "NONE".into(),
        Other(bits) => format!("0x{bits:x}"),
        _ => format!("{s}"),
    }
}

/// What a message changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    Nothing,
    /// A neighbour entry was added, changed or removed.
    Neighbour,
    /// A route was added or removed: every route lookup is out of date.
    Routes,
}

/// The IPv4 and IPv6 neighbour entries, by (interface index, address).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Neighbours(HashMap<(u32, IpAddr), Neighbour>);

impl Neighbours {
    pub(super) fn get(&self, ifindex: u32, addr: IpAddr) -> Option<&Neighbour> {
        self.0.get(&(ifindex, addr))
    }

    /// Applies one rtnetlink message (an event or a dump entry).
    pub(super) fn apply(&mut self, m: &RouteNetlinkMessage) -> Change {
        match m {
            RouteNetlinkMessage::NewNeighbour(n) => match neighbour_entry(n) {
                Some((key, entry)) => {
                    if self.0.insert(key, entry) == Some(entry) {
                        Change::Nothing
                    } else {
                        Change::Neighbour
                    }
                }
                None => Change::Nothing,
            },
            RouteNetlinkMessage::DelNeighbour(n) => match neighbour_entry(n) {
                Some((key, _)) if self.0.remove(&key).is_some() => Change::Neighbour,
                _ => Change::Nothing,
            },
            RouteNetlinkMessage::NewRoute(_) | RouteNetlinkMessage::DelRoute(_) => Change::Routes,
            _ => Change::Nothing,
        }
    }
}

/// The key and entry of an IPv4 or IPv6 neighbour message; None for other
/// families (a bridge's forwarding entries arrive as neighbours too, their
/// destination parsed as `NeighbourAddress::Other`).
fn neighbour_entry(n: &NeighbourMessage) -> Option<((u32, IpAddr), Neighbour)> {
    let mut dst = None;
    let mut lladdr = None;
    for a in &n.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                dst = Some(IpAddr::from(*v4))
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                dst = Some(IpAddr::from(*v6))
            }
            NeighbourAttribute::LinkLayerAddress(mac) => {
                lladdr = <[u8; 6]>::try_from(&mac[..]).ok()
            }
            _ => {}
        }
    }
    let entry = Neighbour {
        lladdr,
        state: n.header.state,
    };
    Some(((n.header.ifindex, dst?), entry))
}

/// Why a backend's next hop has no MAC to send to.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unresolved<'a> {
    #[error("no route: {0}")]
    NoRoute(&'a LookupError),
    #[error(
        "the kernel routes it via {:?}, which is no port's TAP; \
         give the port an address on the backend's subnet or a route via it",
        .dev.unwrap_or("nothing")
    )]
    NotThroughATap { dev: Option<&'a str> },
    #[error("next hop {next_hop}: no neighbour entry yet")]
    NoNeighbour { next_hop: IpAddr },
    #[error("next hop {next_hop}: neighbour state {}", state_name(*.state))]
    NeighbourState {
        next_hop: IpAddr,
        state: NeighbourState,
    },
}

/// The egress of `addr`: Ok((egress, entry is fresh)) when the next hop's
/// MAC is known, Err((egress without MAC, why)) otherwise. `taps[i]` is
/// port i's TAP name.
pub(super) fn resolve<'a>(
    addr: IpAddr,
    route: Result<&'a Route, &'a LookupError>,
    taps: &[Option<String>],
    neighbours: &Neighbours,
) -> Result<(Egress, bool), (Egress, Unresolved<'a>)> {
    let egress = |port: usize, next_hop_mac: Option<[u8; 6]>| Egress {
        port: port as u16,
        next_hop_mac,
    };
    let route = route.map_err(|e| (egress(0, None), Unresolved::NoRoute(e)))?;
    let dev = route.dev.as_deref();
    let port = dev.and_then(|d| taps.iter().position(|t| t.as_deref() == Some(d)));
    let (Some(port), Some(oif)) = (port, route.oif) else {
        return Err((egress(0, None), Unresolved::NotThroughATap { dev }));
    };
    let next_hop = route.gateway.unwrap_or(addr);
    match neighbours.get(oif, next_hop).map(|n| (n, n.usable_mac())) {
        Some((n, Some(mac))) => Ok((egress(port, Some(mac)), n.is_fresh())),
        Some((n, None)) => Err((
            egress(port, None),
            Unresolved::NeighbourState {
                next_hop,
                state: n.state,
            },
        )),
        None => Err((egress(port, None), Unresolved::NoNeighbour { next_hop })),
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
pub(super) mod tests;
