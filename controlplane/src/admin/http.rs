//! The admin HTTP endpoint (AP-5): `GET /metrics`, `GET /healthz` (the
//! control loop is alive) and `GET /ready` (ports up, first snapshot
//! published).
//!
//! One thread runs a mio event loop over non-blocking sockets, so a client
//! that stalls holds a connection slot, never the thread. `/metrics` is
//! streamed (`crate::metrics::exposition`): each connection gets at most
//! [`PARTS_PER_TURN`] parts of 64 KiB per turn of the loop, written only
//! as its socket takes them, so `/healthz` and `/ready` are answered while
//! scrapes render, and a reader that stops costs one part of memory.
//! Everything a client can make the appliance hold is capped ([`LIMITS`]):
//! connections (at the cap, the one stalled the longest makes room, an
//! unanswered one before one being answered), request head bytes, the
//! time to send the head, the time to take the answer, bytes of answers
//! not yet taken. Only a bodiless `GET` is answered; every answer closes
//! the connection, so nothing a client sends after its head is ever parsed.
//! Accept errors (EMFILE under a low open-files limit) are logged and
//! retried with a backoff instead of ending the thread.

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use super::request::{answer, Response};
use super::state::AdminState;
use crate::metrics::exposition::{Exposition, PART_BYTES};

/// What one client may make the admin endpoint hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections; at the cap the one stalled the longest is closed.
    pub max_connections: usize,
    /// Request line plus headers; larger gets 431.
    pub max_head_bytes: usize,
    /// From accept to a complete request head (slow senders are closed).
    pub head_timeout: Duration,
    /// From the first byte of the answer to its last being taken.
    pub write_timeout: Duration,
    /// After the answer: how long and how much unread input is discarded
    /// before closing, so the answer is not cut by a reset.
    pub linger: Duration,
    pub linger_bytes: usize,
    /// Answers written but not yet taken, over all connections; past it the
    /// oldest slow reader is closed.
    pub max_pending_bytes: usize,
}

pub const LIMITS: Limits = Limits {
    max_connections: 64,
    max_head_bytes: 8 * 1024,
    head_timeout: Duration::from_secs(5),
    write_timeout: Duration::from_secs(10),
    linger: Duration::from_secs(1),
    linger_bytes: 64 * 1024,
    max_pending_bytes: 64 << 20,
};

/// The running endpoint; dropping it stops the thread and closes every
/// connection.
pub struct AdminServer {
    addr: SocketAddr,
    tid: rustix::thread::Pid,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `listen` now (so a taken address fails here, before anything
    /// else starts) and serves from a new thread.
    pub fn start(listen: SocketAddr, state: Arc<AdminState>) -> io::Result<Self> {
        Self::start_with(listen, state, LIMITS)
    }

    pub fn start_with(
        listen: SocketAddr,
        state: Arc<AdminState>,
        limits: Limits,
    ) -> io::Result<Self> {
        let std_listener = std::net::TcpListener::bind(listen)?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let mut listener = TcpListener::from_std(std_listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server {
            poll,
            listener,
            addr,
            conns: (0..limits.max_connections).map(|_| None).collect(),
            state,
            limits,
            stop: Arc::clone(&stop),
            accept: AcceptBackoff::default(),
            again: Vec::new(),
        };
        let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("sluice-admin".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid());
                server.run()
            })?;
        let tid = tid_rx
            .recv()
            .map_err(|_| io::Error::other("admin thread ended at start"))?;
        Ok(Self {
            addr,
            tid,
            stop,
            waker,
            thread: Some(thread),
        })
    }

    /// Moves the endpoint's thread onto the calling thread's CPUs. It starts
    /// before EAL, so it would otherwise float over the workers' CPUs too
    /// and a scrape could take time from a polling worker; called from the
    /// main lcore once EAL has pinned it.
    pub fn share_cpus_of_current_thread(&self) -> io::Result<()> {
        let cpus = rustix::thread::sched_getaffinity(None)?;
        rustix::thread::sched_setaffinity(Some(self.tid), &cpus)?;
        Ok(())
    }

    /// The bound address (the port chosen when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Accepts per loop turn, so a connect flood cannot starve open connections.
const ACCEPT_BATCH: usize = 32;
/// The send buffer asked for each connection (the kernel doubles it): about
/// two stream parts.
const SEND_BUFFER: usize = PART_BYTES;

#[derive(Debug)]
enum Phase {
    Reading,
    Writing(Answer),
    Lingering { drained: usize },
}

/// An answer being written: the bytes not yet taken, and the stream the
/// next part comes from.
#[derive(Debug)]
struct Answer {
    out: Vec<u8>,
    pos: usize,
    stream: Option<Box<Exposition>>,
    chunked: bool,
}

impl Answer {
    /// Replaces the taken bytes with the stream's next part (framed as a
    /// chunk, the last chunk after it once it ends); false when there is
    /// nothing more to write.
    fn refill(&mut self) -> bool {
        let Some(stream) = self.stream.as_mut() else {
            return false;
        };
        self.out.clear();
        self.pos = 0;
        let mut part = Vec::with_capacity(PART_BYTES + 4096);
        let ended = stream.fill(&mut part, PART_BYTES);
        if self.chunked {
            if !part.is_empty() {
                self.out
                    .extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                self.out.extend_from_slice(&part);
                self.out.extend_from_slice(b"\r\n");
            }
            if ended {
                self.out.extend_from_slice(b"0\r\n\r\n");
            }
        } else {
            self.out = part;
        }
        if ended {
            self.stream = None;
        }
        !self.out.is_empty()
    }
}

impl Phase {
    /// Eviction order: finished first, then unanswered or mid-answer with
    /// a client that stopped taking bytes, then mid-answer waiting for its
    /// turn of the loop (`waiting`): a stalled reader is no better than an
    /// idle connection, and neither must outlive a client just accepted.
    fn eviction_rank(&self, waiting: bool) -> u8 {
        match self {
            Phase::Lingering { .. } => 0,
            Phase::Reading => 1,
            Phase::Writing(_) if !waiting => 1,
            Phase::Writing(_) => 2,
        }
    }

    fn pending(&self) -> usize {
        match self {
            Phase::Writing(a) => a.out.len() - a.pos,
            _ => 0,
        }
    }
}

struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    phase: Phase,
    /// The last time the client sent or took bytes: under pressure, the
    /// connection stalled the longest is closed first.
    progress: Instant,
    /// Its last turn ended with the socket still taking bytes
    /// (`Step::Again`): it waits for the loop, not for its client, so it
    /// is not stalled whatever `progress` says.
    waiting: bool,
    deadline: Instant,
}

#[derive(PartialEq, Eq)]
enum Step {
    Keep,
    /// The socket may take more but the connection had its turn: drive it
    /// again in the next turn of the loop (readiness is edge-triggered, so
    /// no event would come).
    Again,
    Close,
}

/// Stream parts written to one connection per turn of the loop, so a fast
/// reader of a big exposition leaves the loop to others (`/healthz`)
/// between its parts.
const PARTS_PER_TURN: usize = 2;

impl Conn {
    /// Moves the connection along as far as the socket allows, for at
    /// most [`PARTS_PER_TURN`] stream parts.
    fn drive(&mut self, state: &AdminState, limits: &Limits) -> Step {
        let mut chunk = [0u8; 4096];
        let mut parts = 0;
        loop {
            match &mut self.phase {
                Phase::Reading => {
                    let room = (limits.max_head_bytes - self.head.len()).min(chunk.len());
                    match self.stream.read(&mut chunk[..room]) {
                        Ok(0) => return Step::Close,
                        Ok(n) => {
                            self.progress = Instant::now();
                            self.head.extend_from_slice(&chunk[..n]);
                            if let Some(r) = answer(&self.head, limits.max_head_bytes, state) {
                                self.respond(r, limits);
                            }
                        }
                        Err(e) => return would_block(e),
                    }
                }
                Phase::Writing(a) if a.pos == a.out.len() => {
                    if parts == PARTS_PER_TURN && a.stream.is_some() {
                        return Step::Again;
                    }
                    parts += 1;
                    if !a.refill() {
                        let _ = self.stream.shutdown(Shutdown::Write);
                        self.phase = Phase::Lingering { drained: 0 };
                        self.deadline = Instant::now() + limits.linger;
                    }
                }
                Phase::Writing(a) => match self.stream.write(&a.out[a.pos..]) {
                    Ok(n) => {
                        self.progress = Instant::now();
                        a.pos += n;
                    }
                    Err(e) => return would_block(e),
                },
                Phase::Lingering { drained } => match self.stream.read(&mut chunk) {
                    Ok(0) => return Step::Close,
                    Ok(n) => {
                        *drained += n;
                        if *drained > limits.linger_bytes {
                            return Step::Close;
                        }
                    }
                    Err(e) => return would_block(e),
                },
            }
        }
    }

    fn respond(&mut self, r: Response, limits: &Limits) {
        self.head = Vec::new();
        let (out, stream, chunked) = r.into_parts();
        self.phase = Phase::Writing(Answer {
            out,
            pos: 0,
            stream,
            chunked,
        });
        self.deadline = Instant::now() + limits.write_timeout;
    }
}

/// `Keep` while the socket merely has nothing more now; `Close` on errors.
fn would_block(e: io::Error) -> Step {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Step::Keep,
        _ => Step::Close,
    }
}

/// Accept failures: retried after a pause growing while they last, logged
/// at most every [`ACCEPT_LOG_EVERY`] (with the count since the last line),
/// and on recovery from a streak longer than [`ACCEPT_PAUSE_MAX`].
#[derive(Default)]
struct AcceptBackoff {
    /// Failures since the last log line.
    unreported: u64,
    /// Start of the current streak of failures.
    failing_since: Option<Instant>,
    retry_at: Option<Instant>,
    pause: Duration,
    logged_at: Option<Instant>,
    /// The last batch hit its limit: more connections may be waiting.
    more: bool,
}

const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(50);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

struct Server {
    poll: Poll,
    listener: TcpListener,
    addr: SocketAddr,
    conns: Vec<Option<Conn>>,
    state: Arc<AdminState>,
    limits: Limits,
    stop: Arc<AtomicBool>,
    accept: AcceptBackoff,
    /// Connections that had their turn with more to write (`Step::Again`).
    again: Vec<usize>,
}

impl Server {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = self
                .next_wakeup()
                .map(|t| t.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::error!("sluice: admin http: poll: {e}");
                    std::thread::sleep(ACCEPT_PAUSE_MIN);
                }
                continue;
            }
            let mut accept = false;
            for slot in std::mem::take(&mut self.again) {
                self.drive(slot);
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => accept = true,
                    WAKER => {}
                    Token(t) => self.drive(t - FIRST_CONN),
                }
            }
            let now = Instant::now();
            let retry_due = self.accept.retry_at.is_some_and(|t| now >= t);
            if (accept && self.accept.retry_at.is_none()) || retry_due || self.accept.more {
                self.accept_batch();
            }
            self.expire(Instant::now());
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        if self.accept.more || !self.again.is_empty() {
            return Some(Instant::now());
        }
        self.conns
            .iter()
            .flatten()
            .map(|c| c.deadline)
            .chain(self.accept.retry_at)
            .min()
    }

    fn drive(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let step = conn.drive(&self.state, &self.limits);
        conn.waiting = step == Step::Again;
        let writing = matches!(conn.phase, Phase::Writing(_));
        match step {
            Step::Close => return self.close(slot),
            Step::Again if !self.again.contains(&slot) => self.again.push(slot),
            Step::Again | Step::Keep => {}
        }
        if writing {
            self.bound_pending(slot);
        }
    }

    /// Keeps the answers not yet taken under `max_pending_bytes`, closing
    /// the readers stalled the longest other than `keep`.
    fn bound_pending(&mut self, keep: usize) {
        loop {
            let pending: usize = self.conns.iter().flatten().map(|c| c.phase.pending()).sum();
            if pending <= self.limits.max_pending_bytes {
                return;
            }
            let oldest = self
                .conns
                .iter()
                .enumerate()
                .filter(|&(i, c)| i != keep && c.as_ref().is_some_and(|c| c.phase.pending() > 0))
                .min_by_key(|(_, c)| c.as_ref().map(|c| c.progress));
            match oldest {
                Some((i, _)) => self.close(i),
                None => return,
            }
        }
    }

    fn accept_batch(&mut self) {
        self.accept.retry_at = None;
        self.accept.more = false;
        for _ in 0..ACCEPT_BATCH {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    self.accepted_again();
                    self.admit(stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => return self.accept_failed(&e),
            }
        }
        self.accept.more = true;
    }

    /// The pending connection stays in the kernel's backlog; readiness will
    /// not be signalled again for it, so retry on a timer. Out of file
    /// descriptors, one of ours (the oldest unanswered) makes room.
    fn accept_failed(&mut self, e: &io::Error) {
        let open = self.open();
        let a = &mut self.accept;
        let now = Instant::now();
        a.unreported += 1;
        a.failing_since.get_or_insert(now);
        a.pause = (a.pause * 2).clamp(ACCEPT_PAUSE_MIN, ACCEPT_PAUSE_MAX);
        a.retry_at = Some(now + a.pause);
        if a.logged_at.is_none_or(|t| now - t >= ACCEPT_LOG_EVERY) {
            a.logged_at = Some(now);
            crate::warn!(
                "sluice: admin http {}: accept failed ({e}); {} failure(s) since the last \
                 report, retrying within {:?}, {open} connection(s) open",
                self.addr,
                a.unreported,
                ACCEPT_PAUSE_MAX,
            );
            a.unreported = 0;
        }
        if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
            self.evict();
        }
    }

    fn accepted_again(&mut self) {
        let a = &mut self.accept;
        if let Some(since) = a.failing_since.take() {
            if since.elapsed() > ACCEPT_PAUSE_MAX {
                crate::info!(
                    "sluice: admin http {}: accepting again after failing for {:.1} s",
                    self.addr,
                    since.elapsed().as_secs_f64()
                );
            }
        }
        a.pause = Duration::ZERO;
    }

    fn open(&self) -> usize {
        self.conns.iter().flatten().count()
    }

    fn admit(&mut self, mut stream: TcpStream) {
        if self.open() >= self.conns.len() {
            self.evict();
        }
        let Some(slot) = self.conns.iter().position(Option::is_none) else {
            return;
        };
        // A socket's send buffer is what a client that stops reading takes
        // from the loop's time before it stalls: bounded here instead of
        // growing with the kernel's autotuning (to 4 MiB by default).
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
        let registered = self.poll.registry().register(
            &mut stream,
            Token(FIRST_CONN + slot),
            Interest::READABLE | Interest::WRITABLE,
        );
        if registered.is_err() {
            return;
        }
        let now = Instant::now();
        self.conns[slot] = Some(Conn {
            stream,
            head: Vec::new(),
            phase: Phase::Reading,
            progress: now,
            waiting: false,
            deadline: now + self.limits.head_timeout,
        });
        // Bytes that arrived before registration are reported by it (edge
        // triggered registration reports the current state), but driving
        // now costs nothing and answers a fast client in this turn.
        self.drive(slot);
    }

    /// Closes the connection that matters least: finished, else unanswered
    /// or stalled by its client, else mid-answer waiting for the loop
    /// ([`Phase::eviction_rank`]); among those, the one stalled the longest
    /// (a slow reader before a scrape that is being taken, however long
    /// the loop's turns, and before a client just accepted).
    fn evict(&mut self) {
        let victim = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.as_ref()
                    .map(|c| (i, (c.phase.eviction_rank(c.waiting), c.progress)))
            })
            .min_by_key(|&(_, key)| key);
        if let Some((i, _)) = victim {
            self.close(i);
        }
    }

    fn expire(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            if self.conns[i].as_ref().is_some_and(|c| c.deadline <= now) {
                self.close(i);
            }
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut c) = self.conns[slot].take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
    }
}

/// Raises the soft open-files limit to the hard one: connections, health
/// probes and DPDK all take descriptors, and the admin endpoint should meet
/// its connection cap long before the process meets EMFILE. Returns the
/// limit now in force.
pub fn raise_open_files_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        setrlimit(Resource::Nofile, lim)?;
    }
    Ok(lim.current.unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
