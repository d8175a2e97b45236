//! The resolver's rtnetlink sockets (`NETLINK_ROUTE`, messages built and
//! parsed by `netlink-packet-route`): one subscribed to neighbour and route
//! events, which also carries the neighbour table dumps, and a
//! [`RequestSocket`] for route lookups, whose answers then never queue
//! behind events.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use netlink_packet_core::{NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::neighbour::NeighbourMessage;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily as Af, RecvFlags, SocketFlags, SocketType};

use super::route::{LookupError, Route};
use crate::rtnetlink::{self, for_each_message, RequestSocket};

/// `RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE` (linux/rtnetlink.h).
const GROUPS: u32 = 0x4 | 0x40 | 0x400;
/// The event socket's receive buffer: a neighbour table dump of a large
/// L2 segment and a burst of route events fit before ENOBUFS.
const EVENT_BUFFER: usize = 4 << 20;

/// What the event socket delivered.
#[derive(Debug)]
pub(super) enum Incoming {
    /// An event, or an entry of a dump.
    Message(RouteNetlinkMessage),
    /// The end of the dump requested with sequence number `seq`.
    DumpDone { seq: u32 },
}

/// The subscribed socket: neighbour and route events, neighbour dumps.
pub(super) struct EventSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl EventSocket {
    pub(super) fn open() -> io::Result<Self> {
        let fd = rtnetlink::socket(SocketFlags::NONBLOCK)?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, GROUPS))?;
        rustix::net::sockopt::set_socket_recv_buffer_size(&fd, EVENT_BUFFER)?;
        Ok(Self {
            fd,
            seq: 0,
            buf: vec![0; 64 << 10],
        })
    }

    /// Asks for the whole IPv4 and IPv6 neighbour table; the entries arrive
    /// as [`Incoming::Message`]s, then [`Incoming::DumpDone`] with the
    /// returned sequence number.
    pub(super) fn request_neighbour_dump(&mut self) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let msg = rtnetlink::request(
            RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
            NLM_F_REQUEST | NLM_F_DUMP,
            self.seq,
        );
        rtnetlink::send(&self.fd, &msg)?;
        Ok(self.seq)
    }

    /// Everything queued on the socket, without blocking (the socket is
    /// polled edge-triggered, so it is read until empty). Ok(true) when
    /// the kernel dropped events meanwhile (`ENOBUFS`): the caller
    /// resynchronises.
    pub(super) fn drain(&mut self, out: &mut Vec<Incoming>) -> io::Result<bool> {
        let mut lost = false;
        loop {
            match rustix::net::recv(&self.fd, &mut self.buf, RecvFlags::empty()) {
                Ok((n, _)) => parse(&self.buf[..n.min(self.buf.len())], out),
                Err(Errno::AGAIN) => return Ok(lost),
                Err(Errno::NOBUFS) => lost = true,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsRawFd for EventSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Appends the messages of one netlink datagram to `out`. Messages of
/// kinds the resolver does not know, and undecodable ones, are skipped.
pub(super) fn parse(datagram: &[u8], out: &mut Vec<Incoming>) {
    for_each_message(datagram, |header, payload| match payload {
        NetlinkPayload::InnerMessage(m) => out.push(Incoming::Message(m)),
        NetlinkPayload::Done(_) => out.push(Incoming::DumpDone {
            seq: header.sequence_number,
        }),
        _ => {}
    });
}

/// Route lookups (`RTM_GETROUTE` for one address, as `ip route get` asks).
pub(super) struct RouteLookup {
    requests: RequestSocket,
    /// For interface index → name (an ioctl on any socket).
    probe: OwnedFd,
}

impl RouteLookup {
    pub(super) fn open() -> io::Result<Self> {
        let probe =
            rustix::net::socket_with(Af::INET, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
        Ok(Self {
            requests: RequestSocket::open()?,
            probe,
        })
    }

    /// The kernel's route to `addr`, with its interface's name.
    pub(super) fn get(&mut self, addr: IpAddr) -> Result<Route, LookupError> {
        let answer = self
            .requests
            .ask(route_get(addr), 0)
            .map_err(|source| LookupError::Kernel { addr, source })?;
        let Some(RouteNetlinkMessage::NewRoute(m)) = answer else {
            return Err(LookupError::Empty { addr });
        };
        let mut route = Route::from_message(&m);
        route.dev = route
            .oif
            .and_then(|i| rustix::net::netdevice::index_to_name(&self.probe, i).ok());
        Ok(route)
    }
}

/// The `RTM_GETROUTE` request for `addr`.
pub(super) fn route_get(addr: IpAddr) -> RouteNetlinkMessage {
    let mut m = RouteMessage::default();
    let (family, len, dst) = match addr {
        IpAddr::V4(a) => (AddressFamily::Inet, 32, RouteAddress::Inet(a)),
        IpAddr::V6(a) => (AddressFamily::Inet6, 128, RouteAddress::Inet6(a)),
    };
    m.header.address_family = family;
    m.header.destination_prefix_length = len;
    m.attributes.push(RouteAttribute::Destination(dst));
    RouteNetlinkMessage::GetRoute(m)
}
