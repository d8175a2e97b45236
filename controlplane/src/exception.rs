//! AP-4: the kernel side of each port's exception path.
//!
//! DPDK's `net_tap` creates the TAP interface; the workers move packets
//! between it and the port. This module gives the interface what makes the
//! kernel answer for the appliance: the port's addresses, its MTU, its
//! default routes, and the port's MAC. The kernel then answers ARP,
//! neighbour discovery and ping for the appliance's addresses, and the
//! health checker's ordinary sockets reach backends through it. On a trunk
//! port (`vlan = N`) the TAP is still configured untagged: the workers pop
//! the tag off punted frames and push it onto the kernel's (`sluice_core::vlan`).
//!
//! Configured over rtnetlink ([`crate::rtnetlink`]), each request awaited
//! for the kernel's acknowledgement; no process is spawned.

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::config::{Cidr, PortConfig};
use crate::rtnetlink::RequestSocket;

/// A change to the TAP the kernel refused (or the netlink socket failed).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct KernelRequestError {
    /// What was asked, as `ip` would say it (`addr replace 10.0.0.2/24 dev sl-up`).
    pub what: String,
    pub source: io::Error,
}

/// Why the kernel side of a TAP could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TapSetupError {
    /// Setting an address, the MTU, the link state or a route failed.
    #[error(transparent)]
    Kernel(#[from] KernelRequestError),
    /// Writing a sysctl (disabling IPv6 on a port without `address6`).
    #[error("write {value} to {path}: {source}")]
    Sysctl {
        path: String,
        value: &'static str,
        source: io::Error,
    },
}

/// A port's `tap` names an interface that already exists on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "dataplane.port {port:?}.tap: interface {tap:?} already exists on this host: sluice \
     creates its TAP itself and would take over or fail on it; choose another tap name, or \
     delete the interface (ip link del {tap}) if it is left over"
)]
pub struct TapExists {
    /// The config port's name.
    pub port: String,
    /// The interface its `tap` names.
    pub tap: String,
}

/// The `net_tap` vdev string for port `index` whose TAP is `iface`.
///
/// The device name starts with the driver name (`net_tap`), which is how
/// EAL's vdev bus finds the driver; the suffix keeps it clear of `net_tap`
/// devices an operator lists as data ports.
pub fn tap_vdev(index: usize, iface: &str) -> String {
    format!("net_tap_sluice{index},iface={iface}")
}

/// The TAP names of `ports` that already name an interface in this
/// network namespace. `net_tap` would attach to an existing TAP (taking
/// over another program's interface, or a stale one with its addresses and
/// routes) or fail part-way through start-up on any other kind, so
/// `sluice run` refuses them before EAL starts; `check-config` warns.
pub fn existing_taps(ports: &[PortConfig]) -> Vec<TapExists> {
    // /proc/self/net is the reading process's network namespace.
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    ports
        .iter()
        .filter_map(|p| {
            Some(TapExists {
                port: p.name.clone(),
                tap: p.tap.clone()?,
            })
        })
        .filter(|t| interface_listed(&dev, &t.tap))
        .collect()
}

/// Whether `/proc/net/dev` text lists interface `name`.
fn interface_listed(dev: &str, name: &str) -> bool {
    dev.lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(iface, _)| iface.trim() == name)
}

/// Gives the TAP its MAC (the port's: the kernel's frames leave through
/// the port), addresses and MTU, brings it up, and installs the
/// port's default routes (`gateway`, `gateway6`) through it.
pub fn configure_tap(port: &PortConfig, iface: &str, mac: [u8; 6]) -> Result<(), TapSetupError> {
    let mut tap = Tap::open(iface)?;
    let mac_text = crate::config::mac_text(&mac);
    tap.link(
        &format!("link set dev {iface} address {mac_text} mtu {}", port.mtu),
        LinkFlags::empty(),
        vec![
            LinkAttribute::Address(mac.to_vec()),
            LinkAttribute::Mtu(u32::from(port.mtu)),
        ],
    )?;
    if let Some(c) = port.ipv4 {
        tap.address(c, AddressHeaderFlags::empty())?;
    }
    match port.ipv6 {
        // No duplicate address detection: the address belongs to this
        // appliance by configuration, and DAD would delay it by a second.
        Some(c) => tap.address(c, AddressHeaderFlags::Nodad)?,
        // No IPv6 on this port: keep the kernel from sending router
        // solicitations and MLD reports out of it.
        None => sysctl(&format!("net/ipv6/conf/{iface}/disable_ipv6"), "1")?,
    }
    tap.link(&format!("link set dev {iface} up"), LinkFlags::Up, vec![])?;
    for gw in &port.gateways {
        tap.default_route(*gw)?;
    }
    Ok(())
}

/// The TAP interface and a request socket to change it.
struct Tap<'a> {
    name: &'a str,
    index: u32,
    socket: RequestSocket,
}

impl<'a> Tap<'a> {
    fn open(name: &'a str) -> Result<Self, KernelRequestError> {
        let failed = |what: &str, e: io::Error| KernelRequestError {
            what: format!("{what} {name}"),
            source: e,
        };
        let socket = RequestSocket::open().map_err(|e| failed("netlink socket for", e))?;
        let index = interface_index(name).map_err(|e| failed("interface", e))?;
        Ok(Self {
            name,
            index,
            socket,
        })
    }

    fn apply(
        &mut self,
        what: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), KernelRequestError> {
        self.socket
            .apply(msg, flags)
            .map_err(|source| KernelRequestError {
                what: what.to_string(),
                source,
            })
    }

    /// Sets `attributes` and raises `up` (`LinkFlags::Up` or nothing).
    fn link(
        &mut self,
        what: &str,
        up: LinkFlags,
        attributes: Vec<LinkAttribute>,
    ) -> Result<(), KernelRequestError> {
        let mut m = LinkMessage::default();
        m.header.index = self.index;
        m.header.flags = up;
        m.header.change_mask = up;
        m.attributes = attributes;
        self.apply(what, RouteNetlinkMessage::SetLink(m), 0)
    }

    /// `ip addr replace CIDR dev TAP` (with `nodad`: `flags`).
    fn address(&mut self, c: Cidr, flags: AddressHeaderFlags) -> Result<(), KernelRequestError> {
        let mut m = AddressMessage::default();
        m.header.family = family(c.addr);
        m.header.prefix_len = c.prefix;
        m.header.flags = flags;
        m.header.index = self.index;
        if c.addr.is_ipv4() {
            m.attributes.push(AddressAttribute::Local(c.addr));
        }
        m.attributes.push(AddressAttribute::Address(c.addr));
        let nodad = if flags.is_empty() { "" } else { " nodad" };
        let what = format!("addr replace {} dev {}{nodad}", cidr(c), self.name);
        self.apply(
            &what,
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// `ip route replace default via GW dev TAP`.
    fn default_route(&mut self, gw: IpAddr) -> Result<(), KernelRequestError> {
        let mut m = RouteMessage::default();
        m.header.address_family = family(gw);
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::Boot;
        m.header.scope = RouteScope::Universe;
        m.header.kind = RouteType::Unicast;
        let via = match gw {
            IpAddr::V4(a) => RouteAddress::Inet(a),
            IpAddr::V6(a) => RouteAddress::Inet6(a),
        };
        m.attributes.push(RouteAttribute::Gateway(via));
        m.attributes.push(RouteAttribute::Oif(self.index));
        let what = format!("route replace default via {gw} dev {}", self.name);
        self.apply(
            &what,
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }
}

fn family(a: IpAddr) -> AddressFamily {
    if a.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// The index of interface `name` (an ioctl on any socket).
pub(crate) fn interface_index(name: &str) -> io::Result<u32> {
    let probe = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    Ok(rustix::net::netdevice::name_to_index(&probe, name)?)
}

fn cidr(c: Cidr) -> String {
    format!("{}/{}", c.addr, c.prefix)
}

pub(crate) fn sysctl(key: &str, value: &'static str) -> Result<(), TapSetupError> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value).map_err(|source| TapSetupError::Sysctl {
        path,
        value,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_found_in_proc_net_dev() {
        let dev = "Inter-|   Receive\n face |bytes\n    lo: 1 2 3\n  eth0: 4 5 6\n";
        assert!(interface_listed(dev, "lo"));
        assert!(interface_listed(dev, "eth0"));
        assert!(!interface_listed(dev, "eth"));
        assert!(!interface_listed(dev, "face |bytes"));
    }

    #[test]
    fn tap_vdev_names_the_driver_first() {
        let v = tap_vdev(1, "sl-up");
        assert!(v.starts_with("net_tap"), "{v}");
        assert_eq!(v, "net_tap_sluice1,iface=sl-up");
    }
}
