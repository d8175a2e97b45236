//! The checks of one row, on kernel sockets: direct from the appliance's
//! own address, and through the data path (`crate::health::data_socket`:
//! marked, routed into the port's TAP, encapsulated by the workers as a
//! client's packets are). Each waits at most its deadline; a probe's
//! registration is released a little after its socket closes, so that a
//! late answer is not taken for another socket's.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use sluice_core::encap;
use sluice_core::probe_path::{Seen, Ticket};
use socket2::Socket;

use super::diagnosis::{diagnose, mac_text, Facts};
use super::plan::{Speech, Target};
use super::refusals::{self, Listener};
use super::{Check, Row, ANSWER_WAIT, FULL_SIZE_WAIT};
use crate::health::checker::input_of;
use crate::health::data_path::{timeout_reason, PathReport};
use crate::health::data_socket::{self, DataPathContext};
use crate::health::driver::{tcp_failure, Transport};
use crate::health::failure::FailureReason;

/// How long a released probe's port stays noted as the probe's: answers
/// still on their way are not mistaken for the next socket's.
const LINGER: Duration = Duration::from_secs(2);

/// Checks one row.
pub(super) fn check_row(t: &Target, ctx: &DataPathContext, refusals: &Listener) -> Row {
    let mut tickets = Vec::new();
    let next_hop = match (&t.port, t.next_hop_mac) {
        (None, _) => Check::fail(
            "not_published",
            "the backend is not in the published tables",
        ),
        (Some(p), Some(mac)) => Check::pass(format!("{} on {}", mac_text(mac), p.name)),
        (Some(p), None) => Check::fail("unresolved", format!("unresolved on {}", p.name)),
    };
    let direct = match t.mute {
        Some(why) => Check::skipped(why),
        None => direct(t),
    };
    let (to_vip, full_size) = if let Some(why) = t.mute {
        (Check::skipped(why), Check::skipped(why))
    } else {
        let vip = through(t, ctx, t.vip, &mut tickets);
        let full = match (vip.open, &t.speech) {
            (Some(socket), Speech::Tcp) => {
                full_size(t, ctx, socket, &vip.ticket, || refusals.too_big(t.backend))
            }
            (_, Speech::Udp { .. }) => Check::skipped("UDP: nothing acknowledges a datagram"),
            (None, Speech::Tcp) => Check::skipped("the VIP's connection did not come up"),
        };
        (vip.check, full)
    };
    let to_backend = if to_vip.passed() || t.mute.is_some() {
        Check::skipped("not needed")
    } else {
        let own = SocketAddr::new(t.backend, t.vip.port());
        let check = through(t, ctx, own, &mut tickets).check;
        let refused = refusals
            .refused(t.backend)
            .into_iter()
            .find(|&r| refusals::is_tunnel(t.encapsulation, r));
        match refused {
            Some(r) if check.reason() == Some("no_answer") => Check::fail(
                "tunnel_refused",
                match r.port {
                    Some(port) => format!("{} answers UDP {port} with port unreachable", t.backend),
                    None => format!(
                        "{} answers IP protocol {} with protocol unreachable",
                        t.backend, r.protocol
                    ),
                },
            ),
            _ => check,
        }
    };
    let facts = Facts {
        target: t,
        next_hop: &next_hop,
        direct: &direct,
        to_vip: &to_vip,
        to_backend: &to_backend,
        full_size: &full_size,
    };
    let (problem, hint) = diagnose(&facts);
    release_later(ctx, tickets);
    Row {
        service: t.service.clone(),
        encapsulation: t.encapsulation.name().to_string(),
        backend: t.backend,
        vip: t.vip.ip(),
        protocol: match t.speech {
            Speech::Tcp => "tcp",
            Speech::Udp { .. } => "udp",
        }
        .to_string(),
        port: t.vip.port(),
        next_hop,
        direct,
        to_vip,
        to_backend,
        full_size,
        problem,
        hint,
    }
}

/// From the appliance's own address to the backend's, as a direct check.
fn direct(t: &Target) -> Check {
    let to = SocketAddr::new(t.backend, t.vip.port());
    match &t.speech {
        Speech::Tcp => match TcpStream::connect_timeout(&to, ANSWER_WAIT) {
            Ok(s) => {
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                Check::pass(format!("{to} accepts"))
            }
            Err(e) => error_check(&e),
        },
        Speech::Udp { request, response } => {
            let run = || -> io::Result<Vec<u8>> {
                let any: SocketAddr = match to.ip() {
                    IpAddr::V4(_) => "0.0.0.0:0".parse().map_err(io::Error::other)?,
                    IpAddr::V6(_) => "[::]:0".parse().map_err(io::Error::other)?,
                };
                let s = UdpSocket::bind(any)?;
                s.connect(to)?;
                s.send(request)?;
                let socket = socket2::SockRef::from(&s);
                receive(&socket)
            };
            match run() {
                Ok(reply) => udp_verdict(&reply, response.as_deref(), to.ip()),
                Err(e) => error_check(&e),
            }
        }
    }
}

/// A data-path probe's outcome; the stream, when it came up.
struct Through {
    check: Check,
    open: Option<Socket>,
    ticket: Option<Ticket>,
}

/// Through the data path to `to`, as the VIP's clients' packets travel
/// to the backend.
fn through(
    t: &Target,
    ctx: &DataPathContext,
    to: SocketAddr,
    tickets: &mut Vec<Ticket>,
) -> Through {
    let transport = match t.speech {
        Speech::Tcp => Transport::Stream,
        Speech::Udp { .. } => Transport::Datagram,
    };
    let none = |check| Through {
        check,
        open: None,
        ticket: None,
    };
    // The largest segment the port carries encapsulated without an ICMP
    // too-big: what a client sends once path-MTU discovery settled.
    let mss = t.port.as_ref().map(|p| {
        let room = usize::from(p.mtu)
            .saturating_sub(encap::overhead(t.encapsulation, t.backend))
            .saturating_sub(ip_tcp_headers(to.ip()));
        room.max(536) as u32
    });
    let opened = match data_socket::open_to(ctx, transport, t.vip, t.backend, to, mss) {
        Ok(Some(o)) => o,
        Ok(None) => {
            return none(Check::fail(
                "not_routed",
                "the snapshot has no such backend, or its egress port no address of \
                 this family",
            ))
        }
        Err(e) => return none(error_check(&e)),
    };
    tickets.push(opened.ticket);
    let heard = match &t.speech {
        Speech::Tcp => connect(&opened.socket),
        Speech::Udp { request, response } => match exchange(&opened.socket, request) {
            // A datagram reaching the connected socket came from `to`.
            Ok(reply) => Heard::Answer(udp_verdict(&reply, response.as_deref(), to.ip())),
            Err(e) if is_timeout(&e) => Heard::Silent,
            Err(e) => Heard::Error(e),
        },
    };
    let check = match heard {
        Heard::Answer(c) => c,
        Heard::Silent => {
            let seen = ctx.probes.seen(opened.ticket.proto, opened.ticket.port);
            let reason = timeout_reason(PathReport {
                seen,
                connected: false,
            });
            Check::fail(reason.name(), seen_text(seen))
        }
        Heard::Error(e) => error_check(&e),
    };
    let up = check.passed() && matches!(t.speech, Speech::Tcp);
    Through {
        check,
        open: up.then_some(opened.socket),
        ticket: Some(opened.ticket),
    }
}

/// What came of a probe through the data path.
enum Heard {
    /// An answer, judged.
    Answer(Check),
    /// Nothing in time: what the workers saw says where it stopped.
    Silent,
    /// The socket's error (an RST, an ICMP unreachable).
    Error(io::Error),
}

/// Waits for a non-blocking stream's connection.
fn connect(s: &Socket) -> Heard {
    let until = Instant::now() + ANSWER_WAIT;
    loop {
        match s.take_error() {
            Ok(Some(e)) | Err(e) => return Heard::Error(e),
            Ok(None) => {}
        }
        if let Ok(peer) = s.peer_addr() {
            let from = peer
                .as_socket()
                .map_or("the peer".into(), |a| a.ip().to_string());
            return Heard::Answer(Check::pass(format!("answered from {from}")));
        }
        if Instant::now() >= until {
            return Heard::Silent;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Sends a datagram on a connected socket and waits for the answer.
fn exchange(s: &Socket, request: &[u8]) -> io::Result<Vec<u8>> {
    s.set_nonblocking(false)?;
    s.send(request)?;
    receive(s)
}

/// The next datagram on a connected socket within [`ANSWER_WAIT`]; a
/// timeout is `WouldBlock`. A signal to this thread does not cut the wait
/// short.
fn receive(s: &Socket) -> io::Result<Vec<u8>> {
    let until = Instant::now() + ANSWER_WAIT;
    let mut buf = vec![0u8; 2048];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        s.set_read_timeout(Some(left))?;
        match (&*s).read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// On the VIP's connection: full-size segments, which the backend must
/// acknowledge within [`FULL_SIZE_WAIT`] (the connection aborts with
/// ETIMEDOUT when they are not: `TCP_USER_TIMEOUT`).
fn full_size(
    t: &Target,
    ctx: &DataPathContext,
    s: Socket,
    ticket: &Option<Ticket>,
    router_mtu: impl Fn() -> Option<u32>,
) -> Check {
    let run = || -> io::Result<(u32, bool)> {
        s.set_nonblocking(false)?;
        s.set_tcp_user_timeout(Some(Duration::from_millis(1000)))?;
        let mss = s.mss()?;
        let request = padded_request(t.vip, 3 * mss as usize);
        (&s).write_all(&request)?;
        let until = Instant::now() + FULL_SIZE_WAIT;
        s.set_read_timeout(Some(Duration::from_millis(250)))?;
        let mut buf = [0u8; 512];
        while Instant::now() < until {
            match (&s).read(&mut buf) {
                Ok(_) => return Ok((mss, true)),
                Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Reset after the request arrived: it arrived.
                Err(_) => return Ok((mss, true)),
            }
        }
        Ok((mss, false))
    };
    let _ = s.set_linger(Some(Duration::ZERO));
    // The kernel's MSS leaves room for the timestamps option it sends.
    let inner = |mss: u32| mss as usize + ip_tcp_headers(t.vip.ip()) + TCP_TIMESTAMPS;
    let outer = |mss: u32| inner(mss) + encap::overhead(t.encapsulation, t.backend);
    let mss = s.mss().unwrap_or(0);
    match run() {
        Ok((mss, answered)) => Check::pass(format!(
            "{} bytes encapsulated{}",
            outer(mss),
            if answered {
                ", answered"
            } else {
                ", acknowledged"
            }
        )),
        Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => {
            let seen = ticket.map(|k| ctx.probes.seen(k.proto, k.port));
            let mtu = t.port.as_ref().map_or(0, |p| p.mtu);
            if seen.is_some_and(|s| s.too_big) {
                Check::fail(
                    "too_big",
                    format!(
                        "{} bytes encapsulated, beyond {}'s MTU {mtu}",
                        outer(mss),
                        t.port.as_ref().map_or("the port", |p| p.name.as_str())
                    ),
                )
            } else {
                let ptb = router_mtu().map_or(String::new(), |m| {
                    format!("; a router on the way answered with ICMP too-big, MTU {m}")
                });
                Check::fail(
                    "lost",
                    format!(
                        "{} bytes encapsulated ({} inside) never acknowledged{ptb}",
                        outer(mss),
                        inner(mss)
                    ),
                )
            }
        }
        Err(e) => error_check(&e),
    }
}

/// An HTTP request of `len` bytes (padded with a header): a web server
/// answers it once all of it arrived, any other server acknowledges it.
fn padded_request(vip: SocketAddr, len: usize) -> Vec<u8> {
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice-doctor\r\nConnection: close\r\n\
         X-Sluice-Doctor-Padding: ",
        vip.ip()
    );
    let tail = "\r\n\r\n";
    let pad = len.saturating_sub(head.len() + tail.len()).max(1);
    let mut out = Vec::with_capacity(head.len() + pad + tail.len());
    out.extend_from_slice(head.as_bytes());
    out.resize(head.len() + pad, b'p');
    out.extend_from_slice(tail.as_bytes());
    out
}

/// IP and TCP headers without options: what an MSS leaves out of the
/// MTU.
fn ip_tcp_headers(addr: IpAddr) -> usize {
    let ip = if addr.is_ipv4() { 20 } else { 40 };
    ip + 20
}

/// The TCP timestamps option, which Linux sends in every segment (and
/// takes out of the payload the MSS allows).
const TCP_TIMESTAMPS: usize = 12;

fn udp_verdict(reply: &[u8], response: Option<&[u8]>, from: IpAddr) -> Check {
    match response {
        Some(want) if !reply.windows(want.len().max(1)).any(|w| w == want) => Check::fail(
            "response_mismatch",
            format!("{from} answered without the check's `response`"),
        ),
        _ => Check::pass(format!("answered from {from}")),
    }
}

/// What the workers saw of a probe, in words.
fn seen_text(s: Seen) -> String {
    let parts: Vec<&str> = [
        (s.sent, "sent"),
        (s.not_sent, "not sent (see sluice_dropped_packets_total)"),
        (s.too_big, "beyond the port's MTU"),
        (s.answer_from_vip, "an answer from the VIP"),
        (
            s.answer_from_backend,
            "an answer from the backend's own address",
        ),
        (s.answer_from_other, "an answer from another address"),
    ]
    .into_iter()
    .filter_map(|(seen, words)| seen.then_some(words))
    .collect();
    if parts.is_empty() {
        "nothing reached the workers".into()
    } else {
        parts.join(", ")
    }
}

/// A socket's error as a failed check: the reason a TCP health check
/// gives the same error (`health::checker::input_of`), or a timeout.
fn error_check(e: &io::Error) -> Check {
    if is_timeout(e) {
        return Check::fail(FailureReason::Timeout.name(), "no answer");
    }
    match tcp_failure(input_of(e)).unwrap_or(FailureReason::LocalError) {
        FailureReason::Refused => Check::fail(
            FailureReason::Refused.name(),
            "refused: nothing listens there",
        ),
        reason => Check::fail(reason.name(), e.to_string()),
    }
}

/// Releases the probes' registrations once late answers had their time.
fn release_later(ctx: &DataPathContext, tickets: Vec<Ticket>) {
    if tickets.is_empty() {
        return;
    }
    let probes = std::sync::Arc::clone(&ctx.probes);
    let _ = std::thread::Builder::new()
        .name("doctor-linger".into())
        .spawn(move || {
            std::thread::sleep(LINGER);
            for t in tickets {
                probes.release(t);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket error gives the reason a TCP health check gives it (HC-1),
    /// so `doctor` and `sluice status` name a failure alike.
    #[test]
    fn a_socket_error_is_named_as_the_health_checks_name_it() {
        let reason = |n| error_check(&io::Error::from_raw_os_error(n)).reason;
        let named = |r: FailureReason| Some(r.name().to_string());
        assert_eq!(reason(libc::ECONNREFUSED), named(FailureReason::Refused));
        assert_eq!(reason(libc::ETIMEDOUT), named(FailureReason::Timeout));
        for unreachable in [libc::EHOSTUNREACH, libc::ENETUNREACH, libc::EACCES] {
            assert_eq!(reason(unreachable), named(FailureReason::Unreachable));
        }
        for reset in [libc::ECONNRESET, libc::ECONNABORTED, libc::EPIPE] {
            assert_eq!(reason(reset), named(FailureReason::Reset));
        }
        assert_eq!(reason(libc::EMFILE), named(FailureReason::LocalError));
        let would_block = io::Error::from(io::ErrorKind::WouldBlock);
        assert_eq!(
            error_check(&would_block).reason,
            named(FailureReason::Timeout)
        );
    }
}
