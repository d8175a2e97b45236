//! The VIP routes in the kernel over rtnetlink: add and delete one host
//! route (`VIP/32` or `VIP/128` through a TAP, in sluice's table, with
//! sluice's protocol number), waiting for the kernel's acknowledgement.
//!
//! Raw messages over a [`crate::rtnetlink`] socket: two message kinds
//! with three attributes each, encoded by hand so the encoding is pure
//! ([`route_message`]) and tested byte for byte against the layout of
//! `linux/rtnetlink.h`; [`RouteSocket`] only sends and reads.

use std::io;
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};

use super::bird::ROUTE_PROTOCOL;

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_TABLE: u16 = 15;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_NOWHERE: u8 = 255;
const RTN_UNICAST: u8 = 1;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// One VIP route: `dst` through interface `oif`, in `table`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    pub dst: IpAddr,
    pub oif: u32,
    pub table: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create the route; an identical one already there is no error (and
    /// changes nothing, so BIRD sees no update).
    Add,
    Delete,
}

/// The netlink request for `op` on `route`, with sequence number `seq`.
pub fn route_message(op: Op, route: &Route, seq: u32) -> Vec<u8> {
    let (kind, flags, scope) = match op {
        Op::Add => (
            RTM_NEWROUTE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            RT_SCOPE_LINK,
        ),
        Op::Delete => (RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, RT_SCOPE_NOWHERE),
    };
    let (family, dst): (u8, Vec<u8>) = match route.dst {
        IpAddr::V4(a) => (AF_INET, a.octets().to_vec()),
        IpAddr::V6(a) => (AF_INET6, a.octets().to_vec()),
    };
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&[0; 4]); // length, set below
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // to the kernel
    let table_byte = u8::try_from(route.table).unwrap_or(0);
    m.extend_from_slice(&[
        family,
        (dst.len() * 8) as u8, // dst_len: a host route
        0,                     // src_len
        0,                     // tos
        table_byte,            // RTA_TABLE below carries tables above 255
        ROUTE_PROTOCOL,
        scope,
        RTN_UNICAST,
    ]);
    m.extend_from_slice(&0u32.to_ne_bytes()); // rtm_flags
    attribute(&mut m, RTA_DST, &dst);
    attribute(&mut m, RTA_TABLE, &route.table.to_ne_bytes());
    if op == Op::Add {
        attribute(&mut m, RTA_OIF, &route.oif.to_ne_bytes());
    }
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

fn attribute(m: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    m.extend_from_slice(&(len as u16).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(payload);
    m.resize(m.len().next_multiple_of(4), 0);
}

/// The errno of the acknowledgement for `seq` in a netlink reply (0:
/// success); None when the reply holds none for it.
pub fn ack_errno(reply: &[u8], seq: u32) -> Option<i32> {
    let mut rest = reply;
    while rest.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().ok()?);
        let msg_seq = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if len < NLMSG_HDR || len > rest.len() {
            return None;
        }
        if kind == NLMSG_ERROR && msg_seq == seq && len >= NLMSG_HDR + 4 {
            let error = i32::from_ne_bytes(rest[16..20].try_into().ok()?);
            return Some(-error);
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

/// A NETLINK_ROUTE socket for route changes.
pub struct RouteSocket {
    fd: OwnedFd,
    seq: u32,
    /// For interface name → index (an ioctl on any socket).
    probe: OwnedFd,
}

impl RouteSocket {
    pub fn open() -> io::Result<Self> {
        let fd = crate::rtnetlink::socket(SocketFlags::empty())?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(2)),
        )?;
        let probe = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        Ok(Self { fd, seq: 0, probe })
    }

    /// The index of interface `name` in this network namespace.
    pub fn ifindex(&self, name: &str) -> io::Result<u32> {
        Ok(rustix::net::netdevice::name_to_index(&self.probe, name)?)
    }

    /// Applies `op`; adding a route that exists and deleting one that does
    /// not are no errors.
    pub fn apply(&mut self, op: Op, route: &Route) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let msg = route_message(op, route, seq);
        crate::rtnetlink::send(&self.fd, &msg)?;
        let mut buf = [0u8; 8192];
        loop {
            let (n, _) = rustix::net::recv(&self.fd, &mut buf, RecvFlags::empty())?;
            let Some(errno) = ack_errno(&buf[..n], seq) else {
                continue;
            };
            let ignorable = match op {
                Op::Add => errno == libc::EEXIST,
                Op::Delete => errno == libc::ESRCH,
            };
            return if errno == 0 || ignorable {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(errno))
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte layout of `struct nlmsghdr`, `struct rtmsg` and the
    /// attributes, as `ip route add 203.0.113.10/32 dev IF table 1000
    /// proto 83 scope link` sends them.
    #[test]
    fn an_add_request_has_the_rtnetlink_layout() {
        let r = Route {
            dst: "203.0.113.10".parse().unwrap(),
            oif: 7,
            table: 1000,
        };
        let m = route_message(Op::Add, &r, 9);
        assert_eq!(m.len(), 16 + 12 + 8 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 52);
        assert_eq!(
            u16::from_ne_bytes(m[4..6].try_into().unwrap()),
            RTM_NEWROUTE
        );
        assert_eq!(u16::from_ne_bytes(m[6..8].try_into().unwrap()), 0x605);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 9);
        assert_eq!(
            &m[16..24],
            &[AF_INET, 32, 0, 0, 0, 83, RT_SCOPE_LINK, RTN_UNICAST]
        );
        assert_eq!(&m[28..36], &[8, 0, 1, 0, 203, 0, 113, 10][..]);
        assert_eq!(u16::from_ne_bytes(m[38..40].try_into().unwrap()), RTA_TABLE);
        assert_eq!(u32::from_ne_bytes(m[40..44].try_into().unwrap()), 1000);
        assert_eq!(u16::from_ne_bytes(m[46..48].try_into().unwrap()), RTA_OIF);
        assert_eq!(u32::from_ne_bytes(m[48..52].try_into().unwrap()), 7);
    }

    #[test]
    fn a_delete_names_the_route_without_an_interface() {
        let r = Route {
            dst: "2001:db8::10".parse().unwrap(),
            oif: 7,
            table: 100,
        };
        let m = route_message(Op::Delete, &r, 1);
        assert_eq!(m.len(), 16 + 12 + 20 + 8);
        assert_eq!(
            u16::from_ne_bytes(m[4..6].try_into().unwrap()),
            RTM_DELROUTE
        );
        assert_eq!(
            &m[16..24],
            &[AF_INET6, 128, 0, 0, 100, 83, RT_SCOPE_NOWHERE, RTN_UNICAST]
        );
    }

    #[test]
    fn acks_are_matched_by_sequence() {
        let mut reply = Vec::new();
        for (seq, err) in [(3u32, 0i32), (4, -libc::EEXIST)] {
            reply.extend_from_slice(&36u32.to_ne_bytes());
            reply.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            reply.extend_from_slice(&0u16.to_ne_bytes());
            reply.extend_from_slice(&seq.to_ne_bytes());
            reply.extend_from_slice(&0u32.to_ne_bytes());
            reply.extend_from_slice(&err.to_ne_bytes());
            reply.extend_from_slice(&[0; 16]);
        }
        assert_eq!(ack_errno(&reply, 3), Some(0));
        assert_eq!(ack_errno(&reply, 4), Some(libc::EEXIST));
        assert_eq!(ack_errno(&reply, 5), None);
        assert_eq!(ack_errno(&reply[..20], 3), None, "truncated");
    }
}
