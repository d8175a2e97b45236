//! Requests to the kernel over rtnetlink (`NETLINK_ROUTE`), each awaited
//! for its acknowledgement or answer: the TAP's configuration and the
//! neighbour resolver's route lookups. Messages are built and parsed by
//! `netlink-packet-route`; this module frames them and matches answers to
//! requests by sequence number.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// How long a request waits for the kernel's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// A `NETLINK_ROUTE` socket for requests (subscribed to no events).
pub struct RequestSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl RequestSocket {
    pub fn open() -> io::Result<Self> {
        let fd = socket(SocketFlags::empty())?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(ANSWER_TIMEOUT),
        )?;
        Ok(Self {
            fd,
            seq: 0,
            buf: vec![0; 32 << 10],
        })
    }

    /// Sends `msg` with `flags` (besides `NLM_F_REQUEST | NLM_F_ACK`) and
    /// waits for the kernel's acknowledgement: Err is what it refused with.
    pub fn apply(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        self.ask(msg, flags | NLM_F_ACK).map(drop)
    }

    /// Sends `msg` and returns the kernel's answer: its first message for
    /// the request, None for an acknowledgement or an empty dump.
    pub fn ask(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Option<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        send(&self.fd, &request(msg, NLM_F_REQUEST | flags, seq))?;
        loop {
            let (n, _) = match rustix::net::recv(&self.fd, &mut self.buf, RecvFlags::empty()) {
                Ok(r) => r,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if let Some(answer) = answer(&self.buf[..n.min(self.buf.len())], seq) {
                return answer;
            }
        }
    }
}

/// The answer to request `seq` in a datagram: Ok(Some(message)), the
/// kernel's error, or Ok(None) for an acknowledgement or a dump's end;
/// None when the datagram holds no answer to `seq`.
pub fn answer(datagram: &[u8], seq: u32) -> Option<io::Result<Option<RouteNetlinkMessage>>> {
    let mut found = None;
    for_each_message(datagram, |header, payload| {
        if header.sequence_number != seq || found.is_some() {
            return;
        }
        found = match payload {
            NetlinkPayload::InnerMessage(m) => Some(Ok(Some(m))),
            NetlinkPayload::Error(e) if e.code.is_some() => Some(Err(e.to_io())),
            NetlinkPayload::Error(_) | NetlinkPayload::Done(_) => Some(Ok(None)),
            _ => None,
        };
    });
    found
}

/// Calls `f` with each message of a netlink datagram; messages of kinds
/// `netlink-packet-route` does not know, or cannot decode, are skipped.
pub fn for_each_message(
    datagram: &[u8],
    mut f: impl FnMut(NetlinkHeader, NetlinkPayload<RouteNetlinkMessage>),
) {
    let mut rest = datagram;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < 16 || len > rest.len() {
            return;
        }
        if let Ok(m) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len]) {
            f(m.header, m.payload);
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
}

/// The bytes of request `inner` with `flags` and sequence number `seq`.
pub fn request(inner: RouteNetlinkMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut m = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::InnerMessage(inner),
    );
    m.header.flags = flags;
    m.header.sequence_number = seq;
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// A `NETLINK_ROUTE` socket with `flags` (besides close-on-exec).
pub fn socket(flags: SocketFlags) -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC | flags,
        None, // NETLINK_ROUTE
    )?)
}

/// Sends one request to the kernel.
pub fn send(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    rustix::net::sendto(fd, msg, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    Ok(())
}
