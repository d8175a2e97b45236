//! The health-check scheduler: one thread, one mio `Poll`, every probe.
//!
//! Probes are keyed by [`ProbeKey`] (address, kind, timing): services that
//! name the same backend and check share one probe and one state. A timer
//! heap orders due probes and timeouts; entries are invalidated lazily by a
//! per-entry sequence number so rescheduling is O(log n).
//!
//! Jitter: a new probe's first run is spread over its interval by a stable
//! hash of its key, so 10,000 backends added at once do not all fire in the
//! same millisecond; afterwards each probe runs `interval` after its
//! previous one finished (HC-4's schedule).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};

use super::halfopen::{Answer, HalfOpen};
use super::probe::{InFlight, ProbeKind};
use super::state::{Change, HealthState, InitialState, ProbeResult, Thresholds, WeightReport};

/// Identity of a shared probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeKey {
    pub addr: SocketAddr,
    pub kind: ProbeKind,
    pub interval: Duration,
    pub timeout: Duration,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    /// State before the first verdict (`initial_state`).
    pub initial: InitialState,
}

/// What the rest of the control plane may read about a probe.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeStatus {
    pub state: HealthState,
    pub probes: u64,
    /// Probe latency histogram: counts per [`LATENCY_BUCKETS`] upper bound
    /// (seconds), plus one overflow bucket; and the sum, for Prometheus.
    pub latency_counts: [u64; LATENCY_BUCKETS.len() + 1],
    pub latency_sum: f64,
    /// Scheduling lag: how late probes started after they were due (the
    /// scheduler's own drift under load), sum and maximum in seconds.
    pub lag_sum: f64,
    pub lag_max: f64,
}

pub const LATENCY_BUCKETS: [f64; 8] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];

/// A health change worth recomputing tables for.
#[derive(Clone, Debug)]
pub struct Event {
    pub key: ProbeKey,
    pub change: Change,
}

enum Command {
    SetTargets(Vec<ProbeKey>),
    Stop,
}

/// Shared view of every probe's status, written by the scheduler thread.
pub type StatusMap = Arc<Mutex<HashMap<ProbeKey, ProbeStatus>>>;

/// Handle to the running scheduler thread.
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
const HALFOPEN: Token = Token(usize::MAX - 1);

impl HealthChecker {
    pub fn spawn() -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (commands, cmd_rx) = mpsc::channel();
        let (ev_tx, events) = mpsc::channel();
        let status: StatusMap = Arc::default();
        // HC-1 half-open probes need CAP_NET_RAW; without it TCP checks
        // fall back to connect() probes (same verdicts, one ACK more).
        let halfopen = HalfOpen::new().ok().filter(|h| {
            use std::os::fd::AsRawFd as _;
            h.sockets().iter().all(|s| {
                let fd = s.as_raw_fd();
                poll.registry()
                    .register(&mut mio::unix::SourceFd(&fd), HALFOPEN, Interest::READABLE)
                    .is_ok()
            })
        });
        let mut sched = Scheduler {
            poll,
            halfopen,
            syn_owner: HashMap::new(),
            next_seq: 0,
            entries: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            timers: BinaryHeap::new(),
            status: Arc::clone(&status),
            events: ev_tx,
        };
        let thread = std::thread::Builder::new()
            .name("sluice-health".into())
            .spawn(move || sched.run(&cmd_rx))?;
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

struct Entry {
    key: ProbeKey,
    thresholds: Thresholds,
    /// Identifies the entry's one live timer (unique across entries, so a
    /// stale timer of a removed entry never fires for its slot's successor).
    seq: u64,
    inflight: Option<(Active, Instant)>,
}

/// A probe in flight.
enum Active {
    /// HTTP, or TCP connect() when raw sockets are unavailable.
    Stream(InFlight),
    /// HC-1 half-open: our SYN's sequence number.
    Syn(u32),
}

struct Scheduler {
    poll: Poll,
    halfopen: Option<HalfOpen>,
    /// SYN sequence number → entry, for half-open answers.
    syn_owner: HashMap<u32, usize>,
    next_seq: u64,
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    by_key: HashMap<ProbeKey, usize>,
    /// (due, entry, seq): start a probe if idle, time it out if in flight.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    status: StatusMap,
    events: Sender<Event>,
}

impl Scheduler {
    fn run(&mut self, commands: &Receiver<Command>) {
        let mut events = Events::with_capacity(1024);
        loop {
            let now = Instant::now();
            let timeout = self
                .timers
                .peek()
                .map(|Reverse((due, _, _))| due.saturating_duration_since(now));
            if self.poll.poll(&mut events, timeout).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    HALFOPEN => self.on_answers(),
                    t => self.on_ready(t.0),
                }
            }
            while let Ok(cmd) = commands.try_recv() {
                match cmd {
                    Command::SetTargets(keys) => self.set_targets(keys),
                    Command::Stop => return,
                }
            }
            self.fire_timers();
        }
    }

    fn set_targets(&mut self, keys: Vec<ProbeKey>) {
        let wanted: std::collections::HashSet<_> = keys.iter().cloned().collect();
        let gone: Vec<usize> = self
            .by_key
            .iter()
            .filter(|(k, _)| !wanted.contains(*k))
            .map(|(_, &i)| i)
            .collect();
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        for i in gone {
            if let Some(e) = self.entries[i].take() {
                match e.inflight {
                    Some((Active::Stream(mut f), _)) => {
                        let _ = self.poll.registry().deregister(&mut f.stream);
                    }
                    Some((Active::Syn(seq), _)) => {
                        self.syn_owner.remove(&seq);
                    }
                    None => {}
                }
                self.by_key.remove(&e.key);
                status.remove(&e.key);
                self.free.push(i);
            }
        }
        let now = Instant::now();
        for key in keys {
            if self.by_key.contains_key(&key) {
                continue;
            }
            let thresholds = Thresholds {
                healthy: key.healthy_threshold.max(1),
                unhealthy: key.unhealthy_threshold.max(1),
            };
            let first = now + jitter(&key);
            self.next_seq += 1;
            let entry = Entry {
                key: key.clone(),
                thresholds,
                seq: self.next_seq,
                inflight: None,
            };
            let i = match self.free.pop() {
                Some(i) => {
                    self.entries[i] = Some(entry);
                    i
                }
                None => {
                    self.entries.push(Some(entry));
                    self.entries.len() - 1
                }
            };
            self.by_key.insert(key.clone(), i);
            let initial = key.initial;
            status.insert(
                key,
                ProbeStatus {
                    state: HealthState::new(initial),
                    probes: 0,
                    latency_counts: Default::default(),
                    latency_sum: 0.0,
                    lag_sum: 0.0,
                    lag_max: 0.0,
                },
            );
            self.timers.push(Reverse((first, i, self.next_seq)));
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(&Reverse((due, i, seq))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            let Some(Some(e)) = self.entries.get_mut(i) else {
                continue;
            };
            if e.seq != seq {
                continue; // superseded
            }
            if e.inflight.is_some() {
                self.finish(i, ProbeResult::Failure); // timeout
            } else {
                let lag = now.saturating_duration_since(due).as_secs_f64();
                if let Some(st) = self
                    .status
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(&e.key)
                {
                    st.lag_sum += lag;
                    st.lag_max = st.lag_max.max(lag);
                }
                self.start(i, now);
            }
        }
    }

    fn start(&mut self, i: usize, now: Instant) {
        let Some(Some(e)) = self.entries.get_mut(i) else {
            return;
        };
        self.next_seq += 1;
        e.seq = self.next_seq;
        let deadline = Reverse((now + e.key.timeout, i, e.seq));
        if let (ProbeKind::Tcp, true, Some(h)) =
            (&e.key.kind, e.key.addr.is_ipv4(), self.halfopen.as_mut())
        {
            // The timer sequence doubles as the SYN's sequence number:
            // unique among probes in flight.
            let syn = self.next_seq as u32;
            if h.send_syn(e.key.addr, syn).is_ok() {
                e.inflight = Some((Active::Syn(syn), now));
                self.syn_owner.insert(syn, i);
                self.timers.push(deadline);
            } else {
                self.finish(i, ProbeResult::Failure);
            }
            return;
        }
        match InFlight::start(e.key.addr) {
            Ok(mut f) => {
                let reg = self.poll.registry().register(
                    &mut f.stream,
                    Token(i),
                    Interest::READABLE | Interest::WRITABLE,
                );
                if reg.is_err() {
                    self.finish(i, ProbeResult::Failure);
                    return;
                }
                e.inflight = Some((Active::Stream(f), now));
                self.timers.push(deadline);
            }
            Err(_) => self.finish(i, ProbeResult::Failure),
        }
    }

    /// HC-1: SYN-ACK → success, RST → failure.
    fn on_answers(&mut self) {
        let mut answers = Vec::new();
        if let Some(h) = self.halfopen.as_mut() {
            h.drain(|seq, a| answers.push((seq, a)));
        }
        for (seq, answer) in answers {
            if let Some(&i) = self.syn_owner.get(&seq) {
                let result = match answer {
                    Answer::SynAck => ProbeResult::Success {
                        weight: WeightReport::NotApplicable,
                    },
                    Answer::Reset | Answer::Unreachable => ProbeResult::Failure,
                };
                self.finish(i, result);
            }
        }
    }

    fn on_ready(&mut self, i: usize) {
        let Some(Some(e)) = self.entries.get_mut(i) else {
            return;
        };
        let Some((Active::Stream(f), _)) = e.inflight.as_mut() else {
            return;
        };
        if let Some(result) = f.step(&e.key.kind, e.key.addr) {
            self.finish(i, result);
        }
    }

    /// Records a verdict and schedules the next probe `interval` later.
    fn finish(&mut self, i: usize, result: ProbeResult) {
        let Some(Some(e)) = self.entries.get_mut(i) else {
            return;
        };
        let now = Instant::now();
        let mut latency = None;
        if let Some((active, started)) = e.inflight.take() {
            match active {
                Active::Stream(mut f) => {
                    f.abort();
                    let _ = self.poll.registry().deregister(&mut f.stream);
                }
                Active::Syn(syn) => {
                    self.syn_owner.remove(&syn);
                }
            }
            latency = Some(now.duration_since(started).as_secs_f64());
        }
        self.next_seq += 1;
        e.seq = self.next_seq;
        self.timers.push(Reverse((now + e.key.interval, i, e.seq)));
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let Some(st) = status.get_mut(&e.key) else {
            return;
        };
        st.probes += 1;
        if let Some(l) = latency {
            let b = LATENCY_BUCKETS
                .iter()
                .position(|&ub| l <= ub)
                .unwrap_or(LATENCY_BUCKETS.len());
            st.latency_counts[b] += 1;
            st.latency_sum += l;
        }
        let change = st.state.record(result, e.thresholds);
        if change.health || change.weight {
            let _ = self.events.send(Event {
                key: e.key.clone(),
                change,
            });
        }
    }
}

/// Stable first-run offset in [0, interval): no RNG, so restarts and tests
/// are reproducible, yet different keys spread out.
fn jitter(key: &ProbeKey) -> Duration {
    let text = format!("{}{:?}", key.addr, key.kind);
    let h = sluice_core::hash::stable_hash_bytes(0x6865_616c_7468, text.as_bytes());
    let ms = key.interval.as_millis().max(1) as u64;
    Duration::from_millis(h % ms)
}
