//! The kernel's answer to a route get for a backend: the route (its
//! interface and gateway), or why there is none. Shared by the socket
//! that asks (`kernel`) and the state that resolves egress from it
//! (`state`).

use std::io;
use std::net::IpAddr;

use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};

/// The kernel's route to a backend: its interface and gateway.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Route {
    /// The outgoing interface's index.
    pub oif: Option<u32>,
    /// Its name (filled by the caller, which can ask the kernel).
    pub dev: Option<String>,
    /// The gateway; None for a directly connected destination.
    pub gateway: Option<IpAddr>,
}

impl Route {
    /// The route in a `RTM_NEWROUTE` answer to a route get. Of a multipath
    /// route (the kernel picks one path for a get, so rarely seen) the
    /// first path is taken.
    pub(super) fn from_message(m: &RouteMessage) -> Self {
        let mut route = Route::default();
        for a in &m.attributes {
            match a {
                RouteAttribute::Oif(i) => route.oif = Some(*i),
                RouteAttribute::Gateway(g) => route.gateway = route_address(g),
                RouteAttribute::MultiPath(hops) if route.oif.is_none() => {
                    if let Some(h) = hops.first() {
                        route.oif = Some(h.interface_index);
                        route.gateway = h.attributes.iter().find_map(|a| match a {
                            RouteAttribute::Gateway(g) => route_address(g),
                            _ => None,
                        });
                    }
                }
                _ => {}
            }
        }
        route
    }
}

fn route_address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some((*v4).into()),
        RouteAddress::Inet6(v6) => Some((*v6).into()),
        _ => None,
    }
}

/// Why the kernel gave no route for a backend.
#[derive(Debug, thiserror::Error)]
pub(super) enum LookupError {
    /// The kernel refused the lookup (`ENETUNREACH`, …) or did not answer.
    #[error("route get {addr}: {source}")]
    Kernel { addr: IpAddr, source: io::Error },
    /// The answer held no route.
    #[error("route get {addr}: no route in the kernel's answer")]
    Empty { addr: IpAddr },
}
