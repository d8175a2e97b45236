//! The I/O half of HC-1's half-open probe: one raw IPv4 socket sends the
//! SYNs ([`super::halfopen::syn_segment`]) from a reserved source port
//! and reads the TCP answers; a second raw socket reads ICMP destination
//! unreachable messages. Needs CAP_NET_RAW; without it the shell probes
//! TCP with `connect()` instead.

use std::collections::HashMap;
use std::io::{self, Read as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::halfopen::{parse_answer, parse_unreachable, syn_segment, Answer};

#[derive(Debug)]
pub struct SynSocket {
    raw: Socket,
    icmp: Socket,
    /// Keeps the source port ours: no other socket of this host can take
    /// it while we probe from it.
    _reserved: Socket,
    port: u16,
    /// Source address per destination (the route's choice).
    sources: HashMap<Ipv4Addr, Ipv4Addr>,
}

impl SynSocket {
    /// Needs CAP_NET_RAW; the caller falls back to connect() probes if not.
    pub fn new() -> io::Result<Self> {
        let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP))?;
        raw.set_nonblocking(true)?;
        let icmp = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
        icmp.set_nonblocking(true)?;
        let reserved = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        reserved.bind(&SockAddr::from(SocketAddr::from(([0, 0, 0, 0], 0))))?;
        let port = reserved
            .local_addr()?
            .as_socket()
            .map(|a| a.port())
            .ok_or_else(|| io::Error::other("no local port"))?;
        Ok(Self {
            raw,
            icmp,
            _reserved: reserved,
            port,
            sources: HashMap::new(),
        })
    }

    /// The sockets to watch for readability.
    pub fn sockets(&self) -> [&Socket; 2] {
        [&self.raw, &self.icmp]
    }

    /// Sends a SYN to `dst` with sequence number `seq`.
    pub fn send_syn(&mut self, dst: SocketAddr, seq: u32) -> io::Result<()> {
        let IpAddr::V4(dip) = dst.ip() else {
            return Err(io::Error::other("half-open probes are IPv4 only"));
        };
        let sip = match self.sources.get(&dip) {
            Some(s) => *s,
            None => {
                // The kernel picks the source a connection would use.
                let u = UdpSocket::bind("0.0.0.0:0")?;
                u.connect(dst)?;
                let IpAddr::V4(s) = u.local_addr()?.ip() else {
                    return Err(io::Error::other("no IPv4 source"));
                };
                self.sources.insert(dip, s);
                s
            }
        };
        let seg = syn_segment(sip, dip, self.port, dst.port(), seq);
        self.raw
            .send_to(&seg, &SockAddr::from(SocketAddr::new(dst.ip(), 0)))?;
        Ok(())
    }

    /// Reads every pending answer: (our SYN's sequence number, answer).
    pub fn drain(&mut self, mut each: impl FnMut(u32, Answer)) {
        let mut buf = [0u8; 1500];
        // `Read for &Socket` takes an initialised buffer: no unsafe here.
        while let Ok(n) = (&self.raw).read(&mut buf) {
            if let Some((ack, answer)) = parse_answer(&buf[..n], self.port) {
                each(ack.wrapping_sub(1), answer);
            }
        }
        while let Ok(n) = (&self.icmp).read(&mut buf) {
            if let Some(seq) = parse_unreachable(&buf[..n], self.port) {
                each(seq, Answer::Unreachable);
            }
        }
    }
}
