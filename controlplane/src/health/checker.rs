//! The I/O shell around the sans-IO [`Scheduler`]: one thread, one mio
//! `Poll`, every probe's socket. It reads the wall clock, opens what the
//! scheduler asks, and reports socket events back as [`Input`]s — errno
//! values and raw answers translated into protocol terms ([`input_of`]).
//!
//! Transports (HC-8: ordinary kernel sockets, never the packet workers):
//! - Handshake: a raw SYN ([`SynSocket`], HC-1's half-open probe) when the
//!   process has CAP_NET_RAW and the backend is IPv4; otherwise a
//!   non-blocking `connect()` closed with RST (`SO_LINGER` 0) once it
//!   completes — same verdicts, one ACK more on the wire.
//! - Stream: a non-blocking `connect()`; closed with RST, so thousands of
//!   probes a second leave no TIME_WAIT on the appliance.
//! - Datagram: a UDP socket bound to an ephemeral port and connected to
//!   the backend, fresh for each run.
//!
//! A data-path probe's run opens the same transports to the VIP instead,
//! from a port's address, marked and registered so that its packets take
//! a client's way to the backend ([`super::data_socket`]); what the
//! workers saw of it is read before every timeout, so that one names
//! where along the path the probe stopped.

use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};

use std::collections::{HashMap, VecDeque};

use sluice_core::probe_path::{ProbeProto, Ticket};

use super::data_path::PathReport;
use super::data_socket::{self, DataPathContext};
use super::driver::{Input, Transport};
use super::drivers::Driver;
use super::halfopen::Answer;
use super::route::Route;
use super::scheduler::{Event, Io, ProbeKey, RunId, Scheduler, StatusMap};
use super::syn_socket::SynSocket;

enum Command {
    SetTargets(Vec<ProbeKey>),
    Stop,
}

/// Handle to the running health-check thread.
pub struct HealthChecker {
    commands: Sender<Command>,
    waker: Arc<Waker>,
    pub events: Receiver<Event>,
    pub status: StatusMap,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthChecker")
    }
}

const WAKER: Token = Token(usize::MAX);
const SYN: Token = Token(usize::MAX - 1);

/// Largest datagram a UDP reply can be.
const MAX_DATAGRAM: usize = 65_535;
/// Bytes read from a stream at a time.
const STREAM_CHUNK: usize = 2048;
/// How long a closed data-path socket's packets still take the data path.
const LINGER: Duration = Duration::from_secs(2);

impl HealthChecker {
    /// A checker of direct probes only (a data-path probe is never
    /// routed).
    pub fn spawn() -> io::Result<Self> {
        Self::spawn_with(None)
    }

    /// A checker whose data-path probes go through `data`'s table and
    /// snapshots.
    pub fn spawn_with(data: Option<DataPathContext>) -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (commands, cmd_rx) = mpsc::channel();
        let (ev_tx, events) = mpsc::channel();
        let status: StatusMap = Arc::default();
        let syn = SynSocket::new().ok().filter(|h| {
            use std::os::fd::AsRawFd as _;
            h.sockets().iter().all(|s| {
                let fd = s.as_raw_fd();
                poll.registry()
                    .register(&mut mio::unix::SourceFd(&fd), SYN, Interest::READABLE)
                    .is_ok()
            })
        });
        let mut shell = Shell {
            poll,
            core: Scheduler::new(Arc::clone(&status), |k: &ProbeKey| {
                Driver::new(&k.kind, k.addr)
            }),
            syn,
            syn_owner: std::collections::HashMap::new(),
            conns: Vec::new(),
            data,
            data_runs: HashMap::new(),
            lingering: VecDeque::new(),
            buf: vec![0; MAX_DATAGRAM],
            events: ev_tx,
        };
        let thread = std::thread::Builder::new()
            .name("sluice-health".into())
            .spawn(move || {
                // Probing is background work (`background`): a flip's
                // publish or a status render goes first.
                crate::background::lower_this_thread("the health checker");
                shell.run(&cmd_rx)
            })?;
        Ok(Self {
            commands,
            waker,
            events,
            status,
            thread: Some(thread),
        })
    }

    /// Replaces the probe set; probes whose key stays keep their state.
    pub fn set_targets(&self, keys: Vec<ProbeKey>) {
        let _ = self.commands.send(Command::SetTargets(keys));
        let _ = self.waker.wake();
    }
}

impl Drop for HealthChecker {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One run's socket.
enum Conn {
    Stream {
        stream: TcpStream,
        connected: bool,
        /// Bytes still to write.
        out: Vec<u8>,
    },
    Datagram(UdpSocket),
    /// A half-open run: our SYN's sequence number.
    Syn(u32),
}

struct Shell {
    poll: Poll,
    core: Scheduler<Driver>,
    syn: Option<SynSocket>,
    /// SYN sequence number → run, for half-open answers.
    syn_owner: std::collections::HashMap<u32, RunId>,
    /// Per scheduler slot (the poll token): the run's socket.
    conns: Vec<Option<(RunId, Conn)>>,
    /// Data-path probes' table and snapshots (None: direct probes only).
    data: Option<DataPathContext>,
    /// Each data-path run in flight: its socket's registration in the
    /// table (None: it could not be routed).
    data_runs: HashMap<RunId, Option<Ticket>>,
    /// Registrations of closed data-path sockets, kept [`LINGER`] after
    /// the close so that the RST the kernel sends then still takes the
    /// data path (else the backend would keep the connection open).
    lingering: VecDeque<(Instant, Ticket)>,
    buf: Vec<u8>,
    events: Sender<Event>,
}

impl Shell {
    fn run(&mut self, commands: &Receiver<Command>) {
        let mut events = Events::with_capacity(1024);
        loop {
            let now = Instant::now();
            let timeout = self
                .core
                .poll_timeout()
                .map(|due| due.saturating_duration_since(now));
            if self.poll.poll(&mut events, timeout).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    SYN => self.on_syn_answers(),
                    t => self.on_ready(t.0),
                }
            }
            while let Ok(cmd) = commands.try_recv() {
                match cmd {
                    Command::SetTargets(keys) => self.core.set_targets(keys, Instant::now()),
                    Command::Stop => return,
                }
            }
            self.note_data_paths();
            self.core.handle_timeout(Instant::now());
            self.flush();
        }
    }

    /// Executes the scheduler's requests (which may queue more) and
    /// forwards its health changes.
    fn flush(&mut self) {
        while let Some(io) = self.core.poll_io() {
            match io {
                Io::Open {
                    run,
                    addr,
                    route: Route::Direct,
                    transport,
                } => self.open(run, addr, transport),
                Io::Open {
                    run,
                    addr,
                    route: Route::Data { vip },
                    transport,
                } => self.open_data(run, addr, SocketAddr::new(vip, addr.port()), transport),
                Io::Send { run, bytes } => self.send(run, bytes),
                Io::Close { run } => self.close(run),
            }
        }
        while let Some(e) = self.core.poll_event() {
            let _ = self.events.send(e);
        }
    }

    fn feed(&mut self, run: RunId, input: Input<'_>) {
        self.core.handle_input(run, input, Instant::now());
    }

    fn open(&mut self, run: RunId, addr: SocketAddr, transport: Transport) {
        if let Some((old, _)) = self.conns.get(run.slot).and_then(Option::as_ref) {
            let old = *old;
            self.close(old);
        }
        let conn = match (transport, self.syn.as_mut()) {
            (Transport::Handshake, Some(syn)) if addr.is_ipv4() => {
                // The run's sequence number doubles as the SYN's: unique
                // among runs in flight.
                let seq = run.seq as u32;
                syn.send_syn(addr, seq).map(|()| {
                    self.syn_owner.insert(seq, run);
                    Conn::Syn(seq)
                })
            }
            (Transport::Handshake | Transport::Stream, _) => {
                connect_stream(&self.poll, addr, Token(run.slot))
            }
            (Transport::Datagram, _) => connect_datagram(&self.poll, addr, Token(run.slot)),
        };
        match conn {
            Ok(conn) => {
                let ready = matches!(conn, Conn::Datagram(_));
                if self.conns.len() <= run.slot {
                    self.conns.resize_with(run.slot + 1, || None);
                }
                self.conns[run.slot] = Some((run, conn));
                if ready {
                    self.feed(run, Input::Connected);
                }
            }
            Err(e) => self.feed(run, input_of(&e)),
        }
    }

    /// A data-path run: its socket to `vip` for backend `addr`, or none
    /// when it cannot be routed (its timeout then says so).
    fn open_data(&mut self, run: RunId, addr: SocketAddr, vip: SocketAddr, transport: Transport) {
        if let Some((old, _)) = self.conns.get(run.slot).and_then(Option::as_ref) {
            let old = *old;
            self.close(old);
        }
        let opened = match &self.data {
            Some(ctx) => data_socket::open(ctx, transport, vip, addr.ip()),
            None => Ok(None),
        };
        let opened = match opened {
            Ok(Some(o)) => o,
            Ok(None) => {
                self.data_runs.insert(run, None);
                return;
            }
            Err(e) => return self.feed(run, input_of(&e)),
        };
        self.data_runs.insert(run, Some(opened.ticket));
        let token = Token(run.slot);
        let registered = match opened.ticket.proto {
            ProbeProto::Tcp => {
                let mut stream = TcpStream::from_std(opened.socket.into());
                self.poll
                    .registry()
                    .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                    .map(|()| Conn::Stream {
                        stream,
                        connected: false,
                        out: Vec::new(),
                    })
            }
            ProbeProto::Udp => {
                let mut s = UdpSocket::from_std(opened.socket.into());
                self.poll
                    .registry()
                    .register(&mut s, token, Interest::READABLE)
                    .map(|()| Conn::Datagram(s))
            }
        };
        match registered {
            Ok(conn) => {
                let ready = matches!(conn, Conn::Datagram(_));
                if self.conns.len() <= run.slot {
                    self.conns.resize_with(run.slot + 1, || None);
                }
                self.conns[run.slot] = Some((run, conn));
                if ready {
                    self.feed(run, Input::Connected);
                }
            }
            Err(e) => self.feed(run, input_of(&e)),
        }
    }

    /// Tells the scheduler what the workers saw of each data-path run in
    /// flight, so that a timeout names where along the path it stopped.
    fn note_data_paths(&mut self) {
        let Some(ctx) = &self.data else {
            return;
        };
        for (&run, ticket) in &self.data_runs {
            let seen = ticket.map(|t| ctx.probes.seen(t.proto, t.port));
            let connected = matches!(
                self.conns.get(run.slot),
                Some(Some((r, Conn::Stream { connected: true, .. }))) if *r == run
            );
            let report = PathReport {
                seen: seen.unwrap_or_default(),
                connected,
            };
            self.core.note_path(run, report);
        }
        let now = Instant::now();
        while let Some(&(closed, ticket)) = self.lingering.front() {
            if now.saturating_duration_since(closed) < LINGER {
                break;
            }
            ctx.probes.release(ticket);
            self.lingering.pop_front();
        }
    }

    fn send(&mut self, run: RunId, bytes: Vec<u8>) {
        let result = match self.conn(run) {
            Some(Conn::Stream { out, .. }) => {
                out.extend_from_slice(&bytes);
                Ok(())
            }
            Some(Conn::Datagram(s)) => s.send(&bytes).map(drop),
            Some(Conn::Syn(_)) | None => Ok(()),
        };
        match result {
            Ok(()) => self.on_ready(run.slot),
            Err(e) => self.feed(run, input_of(&e)),
        }
    }

    fn close(&mut self, run: RunId) {
        if let Some(Some(ticket)) = self.data_runs.remove(&run) {
            self.lingering.push_back((Instant::now(), ticket));
        }
        let Some(slot) = self.conns.get_mut(run.slot) else {
            return;
        };
        if slot.as_ref().map(|(r, _)| *r) != Some(run) {
            return;
        }
        match slot.take() {
            Some((_, Conn::Stream { mut stream, .. })) => {
                // RST rather than FIN: no TIME_WAIT here, and the backend
                // sees no half-closed connection.
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                let _ = self.poll.registry().deregister(&mut stream);
            }
            Some((_, Conn::Datagram(mut s))) => {
                let _ = self.poll.registry().deregister(&mut s);
            }
            Some((_, Conn::Syn(seq))) => {
                self.syn_owner.remove(&seq);
            }
            None => {}
        }
    }

    fn conn(&mut self, run: RunId) -> Option<&mut Conn> {
        match self.conns.get_mut(run.slot) {
            Some(Some((r, c))) if *r == run => Some(c),
            _ => None,
        }
    }

    /// HC-1: SYN-ACK, RST or ICMP unreachable for the runs that sent SYNs.
    fn on_syn_answers(&mut self) {
        let mut answers = Vec::new();
        if let Some(s) = self.syn.as_mut() {
            s.drain(|seq, a| answers.push((seq, a)));
        }
        for (seq, answer) in answers {
            if let Some(&run) = self.syn_owner.get(&seq) {
                let input = match answer {
                    Answer::SynAck => Input::Connected,
                    Answer::Reset => Input::Refused,
                    Answer::Unreachable => Input::Unreachable,
                };
                self.feed(run, input);
                self.flush();
            }
        }
    }

    /// Drains a readable or writable socket: one input at a time, each
    /// answered (and its requests executed) before the next, until the
    /// socket would block or the run is over.
    fn on_ready(&mut self, slot: usize) {
        loop {
            let Some(Some((run, conn))) = self.conns.get_mut(slot) else {
                return;
            };
            let run = *run;
            let got = match conn {
                Conn::Stream {
                    stream,
                    connected,
                    out,
                } => {
                    if !*connected {
                        match stream_connected(stream) {
                            Ok(false) => return,
                            Ok(true) => {
                                *connected = true;
                                Ok(None)
                            }
                            Err(e) => Err(e),
                        }
                    } else if !out.is_empty() {
                        match stream.write(out) {
                            Ok(n) => {
                                out.drain(..n);
                                continue;
                            }
                            Err(e) => Err(e),
                        }
                    } else {
                        let chunk = self.buf.len().min(STREAM_CHUNK);
                        stream.read(&mut self.buf[..chunk]).map(Some)
                    }
                }
                Conn::Datagram(s) => s.recv(&mut self.buf).map(Some),
                Conn::Syn(_) => return,
            };
            let is_stream = matches!(conn, Conn::Stream { .. });
            // After end of file or an error the socket has nothing more
            // to say: a driver that waits on is left to its deadline.
            let last = match got {
                Ok(None) => {
                    self.feed(run, Input::Connected);
                    false
                }
                Ok(Some(0)) if is_stream => {
                    self.feed(run, Input::Closed);
                    true
                }
                Ok(Some(n)) => {
                    let now = Instant::now();
                    self.core
                        .handle_input(run, Input::Data(&self.buf[..n]), now);
                    false
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.feed(run, input_of(&e));
                    true
                }
            };
            self.flush();
            if last {
                return;
            }
        }
    }
}

/// A non-blocking connect, registered for both directions.
fn connect_stream(poll: &Poll, addr: SocketAddr, token: Token) -> io::Result<Conn> {
    let mut stream = TcpStream::connect(addr)?;
    poll.registry()
        .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
    Ok(Conn::Stream {
        stream,
        connected: false,
        out: Vec::new(),
    })
}

/// A UDP socket on an ephemeral port connected to `addr`: the kernel
/// delivers only `addr`'s datagrams, and reports ICMP errors about ours.
fn connect_datagram(poll: &Poll, addr: SocketAddr, token: Token) -> io::Result<Conn> {
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let mut s = UdpSocket::bind(any)?;
    s.connect(addr)?;
    poll.registry()
        .register(&mut s, token, Interest::READABLE)?;
    Ok(Conn::Datagram(s))
}

/// Whether a non-blocking connect has completed (its error, if it failed).
fn stream_connected(stream: &TcpStream) -> io::Result<bool> {
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    // Not connected yet: peer_addr fails with ENOTCONN.
    match stream.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}

/// A socket error in protocol terms. ECONNREFUSED is an RST to a SYN, or
/// on a connected UDP socket an ICMP port unreachable; the unreachable
/// family covers ICMP destination unreachable (IPv6's administratively
/// prohibited arrives as EACCES) and a missing route.
pub fn input_of(e: &io::Error) -> Input<'static> {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Input::Refused,
        Some(
            libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::ENOPROTOOPT
            | libc::EACCES,
        ) => Input::Unreachable,
        Some(libc::ECONNRESET | libc::ECONNABORTED | libc::EPIPE) => Input::Reset,
        _ => Input::LocalError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errno translation the UDP probe's reasons rest on: ICMP port
    /// unreachable arrives as ECONNREFUSED.
    #[test]
    fn errno_to_input() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(input_of(&e(libc::ECONNREFUSED)), Input::Refused);
        assert_eq!(input_of(&e(libc::EHOSTUNREACH)), Input::Unreachable);
        assert_eq!(input_of(&e(libc::ENETUNREACH)), Input::Unreachable);
        assert_eq!(input_of(&e(libc::ECONNRESET)), Input::Reset);
        assert_eq!(input_of(&e(libc::EMFILE)), Input::LocalError);
        assert_eq!(input_of(&io::Error::other("x")), Input::LocalError);
    }
}
