//! The health-check scheduler, sans-IO in quinn-proto's shape: every
//! probe's timers, runs and state, advanced only by calls that carry
//! `now`. The I/O shell ([`super::checker`]) reads the wall clock, owns
//! the sockets and executes what [`Scheduler::poll_io`] asks; the tests
//! drive the same code on virtual time ([`super::sim`]).
//!
//! Probes are keyed by [`ProbeKey`] (address, kind, timing): services that
//! name the same backend and check share one probe and one state. A timer
//! heap orders due probes and deadlines; entries are invalidated lazily by
//! a per-entry sequence number so rescheduling is O(log n).
//!
//! Schedule (HC-4): a new probe's first run is spread over its interval by
//! a stable hash of its key ([`jitter`]), so 10,000 backends added at once
//! do not all fire in the same millisecond; afterwards each run starts
//! `interval` after the previous one finished — answered, failed, or timed
//! out at its deadline `timeout` after it started.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::data_path::{self, PathReport};
use super::driver::{Input, Probe, Step, Transport};
use super::failure::FailureReason;
use super::route::Route;
use super::state::{Change, HealthState, InitialState, ProbeResult, Thresholds};
use crate::config::ProbeKind;

/// Identity of a shared probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeKey {
    /// The backend's address and the check's port.
    pub addr: SocketAddr,
    /// Which way the probe travels to it.
    pub route: Route,
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
    /// Failed probes per [`FailureReason::index`].
    pub failures: [u64; FailureReason::COUNT],
    /// Why the latest probe failed; None if it passed or none finished.
    pub last_failure: Option<FailureReason>,
}

impl ProbeStatus {
    pub fn new(initial: InitialState) -> Self {
        Self {
            state: HealthState::new(initial),
            probes: 0,
            latency_counts: Default::default(),
            latency_sum: 0.0,
            lag_sum: 0.0,
            lag_max: 0.0,
            failures: [0; FailureReason::COUNT],
            last_failure: None,
        }
    }
}

pub const LATENCY_BUCKETS: [f64; 8] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0];

/// A health change worth recomputing tables for.
#[derive(Clone, Debug)]
pub struct Event {
    pub key: ProbeKey,
    pub change: Change,
    /// When the probe result that made the change was recorded.
    pub at: Instant,
}

/// Every probe's status by key: a process-local map (the fast keyed
/// hasher; 100,000 probes are looked up once per backend at each build
/// and each `sluice status`). Statuses are stored in the order their
/// probes were added — the configuration's — apart from a compact index,
/// so the lookups of one service's backends after another's read
/// neighbouring entries instead of 100,000 scattered ~300-byte slots.
pub type ProbeStatuses = indexmap::IndexMap<ProbeKey, ProbeStatus, ahash::RandomState>;

/// Shared view of every probe's status, written by the scheduler.
pub type StatusMap = Arc<Mutex<ProbeStatuses>>;

/// One run of one probe: the slot is stable for the probe's life (the
/// shell's poll token), the sequence number unique across runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunId {
    pub slot: usize,
    pub seq: u64,
}

/// What the shell must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Io {
    /// Open `transport` to `addr` for `run` and report on it with
    /// [`Scheduler::handle_input`].
    Open {
        run: RunId,
        addr: SocketAddr,
        /// Directly to `addr`, or as a client's packets to a VIP.
        route: Route,
        transport: Transport,
    },
    /// Write these bytes on the run's stream, or send them as a datagram.
    Send { run: RunId, bytes: Vec<u8> },
    /// The run is over: close its socket (a stream with RST).
    Close { run: RunId },
}

struct Entry<P> {
    key: ProbeKey,
    thresholds: Thresholds,
    /// Identifies the entry's one live timer (unique across entries, so a
    /// stale timer of a removed entry never fires for its slot's successor).
    seq: u64,
    run: Option<Running<P>>,
}

struct Running<P> {
    id: RunId,
    probe: P,
    started: Instant,
    /// A data-path run: what is known of its way so far.
    path: Option<PathReport>,
}

/// Every probe's schedule and state, generic over the drivers: `make`
/// builds the driver of one run from its key.
pub struct Scheduler<P> {
    make: Box<dyn FnMut(&ProbeKey) -> P + Send>,
    next_seq: u64,
    entries: Vec<Option<Entry<P>>>,
    free: Vec<usize>,
    by_key: HashMap<ProbeKey, usize>,
    /// (due, entry, seq): start a run if idle, time it out if in flight.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    status: StatusMap,
    io: VecDeque<Io>,
    events: VecDeque<Event>,
}

impl<P: Probe> Scheduler<P> {
    pub fn new(status: StatusMap, make: impl FnMut(&ProbeKey) -> P + Send + 'static) -> Self {
        Self {
            make: Box::new(make),
            next_seq: 0,
            entries: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            timers: BinaryHeap::new(),
            status,
            io: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Replaces the probe set (a reload): probes whose key stays keep
    /// their state, schedule and run in flight; removed ones have their
    /// run closed; new ones start at `now` + their [`jitter`].
    pub fn set_targets(&mut self, keys: Vec<ProbeKey>, now: Instant) {
        let wanted: HashSet<&ProbeKey> = keys.iter().collect();
        let gone: Vec<usize> = self
            .by_key
            .iter()
            .filter(|(k, _)| !wanted.contains(k))
            .map(|(_, &i)| i)
            .collect();
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        for i in gone {
            if let Some(e) = self.entries[i].take() {
                if let Some(r) = e.run {
                    self.io.push_back(Io::Close { run: r.id });
                }
                self.by_key.remove(&e.key);
                status.swap_remove(&e.key);
                self.free.push(i);
            }
        }
        for key in keys {
            if self.by_key.contains_key(&key) {
                continue;
            }
            self.next_seq += 1;
            let entry = Entry {
                thresholds: Thresholds {
                    healthy: key.healthy_threshold.max(1),
                    unhealthy: key.unhealthy_threshold.max(1),
                },
                seq: self.next_seq,
                run: None,
                key: key.clone(),
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
            self.timers
                .push(Reverse((now + jitter(&key), i, self.next_seq)));
            self.by_key.insert(key.clone(), i);
            // A status may be there already: seeded by the start from the
            // process before it (`Controller::seed_health`).
            status
                .entry(key.clone())
                .or_insert_with(|| ProbeStatus::new(key.initial));
        }
    }

    /// When [`Self::handle_timeout`] next has work: the earliest live timer.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((due, i, seq))) = self.timers.peek() {
            if self.is_live(i, seq) {
                return Some(due);
            }
            self.timers.pop();
        }
        None
    }

    /// Starts the runs due by `now` and fails those past their deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((due, i, seq))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            if !self.is_live(i, seq) {
                continue; // superseded
            }
            let Some(Some(e)) = self.entries.get_mut(i) else {
                continue;
            };
            if let Some(r) = e.run.as_mut() {
                let result = match (r.probe.on_timeout(now), r.path) {
                    (ProbeResult::Failure(FailureReason::Timeout), Some(seen)) => {
                        ProbeResult::Failure(data_path::timeout_reason(seen))
                    }
                    (result, _) => result,
                };
                self.finish(i, result, now);
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

    /// What the workers saw so far of data-path run `run`'s socket: its
    /// timeout is then named by where along the path it stopped.
    pub fn note_path(&mut self, run: RunId, report: PathReport) {
        if let Some(Some(e)) = self.entries.get_mut(run.slot) {
            if let Some(r) = e.run.as_mut().filter(|r| r.id == run) {
                r.path = Some(report);
            }
        }
    }

    /// An event on `run`'s transport; ignored once the run is over (a late
    /// answer after its deadline, a socket closed by a reload).
    pub fn handle_input(&mut self, run: RunId, input: Input<'_>, now: Instant) {
        let Some(Some(e)) = self.entries.get_mut(run.slot) else {
            return;
        };
        let Some(r) = e.run.as_mut().filter(|r| r.id == run) else {
            return;
        };
        match r.probe.on_input(input, now) {
            Step::Wait => {}
            Step::Send(bytes) => self.io.push_back(Io::Send { run, bytes }),
            Step::Done(result) => self.finish(run.slot, result, now),
        }
    }

    /// The next thing the shell must do.
    pub fn poll_io(&mut self) -> Option<Io> {
        self.io.pop_front()
    }

    /// The next health change for the control thread.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn is_live(&self, i: usize, seq: u64) -> bool {
        matches!(self.entries.get(i), Some(Some(e)) if e.seq == seq)
    }

    fn start(&mut self, i: usize, now: Instant) {
        let Some(Some(e)) = self.entries.get_mut(i) else {
            return;
        };
        self.next_seq += 1;
        e.seq = self.next_seq;
        let id = RunId {
            slot: i,
            seq: e.seq,
        };
        let mut probe = (self.make)(&e.key);
        let transport = probe.start(now);
        e.run = Some(Running {
            id,
            probe,
            started: now,
            path: None,
        });
        self.timers.push(Reverse((now + e.key.timeout, i, e.seq)));
        self.io.push_back(Io::Open {
            run: id,
            addr: e.key.addr,
            route: e.key.route,
            transport,
        });
    }

    /// Records a verdict and schedules the next run `interval` later.
    fn finish(&mut self, i: usize, result: ProbeResult, now: Instant) {
        let Some(Some(e)) = self.entries.get_mut(i) else {
            return;
        };
        let mut latency = None;
        if let Some(r) = e.run.take() {
            self.io.push_back(Io::Close { run: r.id });
            latency = Some(now.saturating_duration_since(r.started).as_secs_f64());
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
        st.last_failure = match result {
            ProbeResult::Failure(reason) => {
                st.failures[reason.index()] += 1;
                Some(reason)
            }
            ProbeResult::Success { .. } => None,
        };
        let change = st.state.record(result, e.thresholds);
        if change.health || change.weight {
            self.events.push_back(Event {
                key: e.key.clone(),
                change,
                at: now,
            });
        }
    }
}

/// Stable first-run offset in [0, interval): no RNG, so restarts and tests
/// are reproducible, yet different keys spread out.
pub fn jitter(key: &ProbeKey) -> Duration {
    let text = format!("{}{:?}", key.addr, key.kind);
    let h = sluice_core::hash::stable_hash_bytes(0x6865_616c_7468, text.as_bytes());
    let ms = key.interval.as_millis().max(1) as u64;
    Duration::from_millis(h % ms)
}

#[cfg(test)]
mod tests;
