//! A virtual network for the scheduler's tests: the I/O shell's part,
//! played by scripted backends on virtual time. Nothing sleeps; time
//! moves only when [`Sim::run_until`] takes the next timer or delivery.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{Input, Probe, Transport};
use super::scheduler::{Event, Io, ProbeKey, ProbeStatus, RunId, Scheduler};

/// How a scripted backend answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Handshakes complete, and whatever is sent gets `reply` (a stream
    /// then closes).
    Reply(Vec<u8>),
    /// RST to a SYN; ICMP port unreachable to a datagram.
    Refuse,
    /// ICMP destination unreachable.
    Unreachable,
    /// Nothing, ever.
    Silent,
}

/// A backend: its answer, `delay` after the SYN (handshake) or after the
/// request (stream, datagram: they connect at once).
#[derive(Clone, Debug)]
pub struct Backend {
    pub answer: Answer,
    pub delay: Duration,
}

impl Backend {
    pub fn new(answer: Answer, delay: Duration) -> Self {
        Self { answer, delay }
    }
}

#[derive(Clone, Debug)]
enum Delivery {
    Connected,
    Data(Vec<u8>),
    Closed,
    Refused,
    Unreachable,
}

/// One thing the shell did, at a virtual time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    pub at: Instant,
    pub io: Io,
}

pub struct Sim<P> {
    pub t0: Instant,
    pub now: Instant,
    pub sched: Scheduler<P>,
    pub status: super::StatusMap,
    backends: HashMap<SocketAddr, Backend>,
    transports: HashMap<RunId, (SocketAddr, Transport)>,
    pending: Vec<(Instant, RunId, Delivery)>,
    /// Every I/O request, in order.
    pub log: Vec<Logged>,
    /// Every health change, with its virtual time and the probe's status
    /// right after it.
    pub events: Vec<(Instant, Event, ProbeStatus)>,
}

impl<P: Probe> Sim<P> {
    pub fn new(make: impl FnMut(&ProbeKey) -> P + Send + 'static) -> Self {
        let status = super::StatusMap::default();
        let t0 = Instant::now();
        Self {
            t0,
            now: t0,
            sched: Scheduler::new(Arc::clone(&status), make),
            status,
            backends: HashMap::new(),
            transports: HashMap::new(),
            pending: Vec::new(),
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Virtual time `secs` after the start.
    pub fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }

    pub fn backend(&mut self, addr: SocketAddr, b: Backend) {
        self.backends.insert(addr, b);
    }

    pub fn set_targets(&mut self, keys: Vec<ProbeKey>) {
        self.sched.set_targets(keys, self.now);
        self.drain();
    }

    pub fn status(&self, key: &ProbeKey) -> ProbeStatus {
        self.status.lock().unwrap()[key].clone()
    }

    /// When runs against `addr` started, and their ids.
    pub fn opens(&self, addr: SocketAddr) -> Vec<(Instant, RunId)> {
        self.log
            .iter()
            .filter_map(|l| match l.io {
                Io::Open { run, addr: a, .. } if a == addr => Some((l.at, run)),
                _ => None,
            })
            .collect()
    }

    /// When `run` was closed.
    pub fn closed_at(&self, run: RunId) -> Option<Instant> {
        self.log
            .iter()
            .find(|l| l.io == Io::Close { run })
            .map(|l| l.at)
    }

    /// When `key`'s healthy flag flipped, and to what.
    pub fn flips(&self, key: &ProbeKey) -> Vec<(Instant, bool)> {
        self.events
            .iter()
            .filter(|(_, e, _)| &e.key == key && e.change.health)
            .map(|(at, _, st)| (*at, st.state.healthy))
            .collect()
    }

    /// Runs open (not yet closed).
    pub fn open_runs(&self) -> HashSet<RunId> {
        self.transports.keys().copied().collect()
    }

    /// Advances virtual time to `end`, taking every timer and delivery due
    /// by then in time order (deliveries first at equal times).
    pub fn run_until(&mut self, end: Instant) {
        loop {
            let delivery = self.pending.iter().map(|p| p.0).min();
            let timer = self.sched.poll_timeout();
            let next = match (delivery, timer) {
                (Some(d), Some(t)) => d.min(t),
                (Some(x), None) | (None, Some(x)) => x,
                (None, None) => break,
            };
            if next > end {
                break;
            }
            self.now = next;
            if delivery == Some(next) {
                let i = self.pending.iter().position(|p| p.0 == next).unwrap();
                let (_, run, d) = self.pending.remove(i);
                let input = match &d {
                    Delivery::Connected => Input::Connected,
                    Delivery::Data(b) => Input::Data(b),
                    Delivery::Closed => Input::Closed,
                    Delivery::Refused => Input::Refused,
                    Delivery::Unreachable => Input::Unreachable,
                };
                self.sched.handle_input(run, input, next);
            } else {
                self.sched.handle_timeout(next);
            }
            self.drain();
        }
        self.now = end;
    }

    /// Executes the scheduler's I/O requests the way the scripted
    /// backends answer them.
    fn drain(&mut self) {
        while let Some(io) = self.sched.poll_io() {
            self.log.push(Logged {
                at: self.now,
                io: io.clone(),
            });
            match io {
                Io::Open {
                    run,
                    addr,
                    transport,
                    ..
                } => {
                    self.transports.insert(run, (addr, transport));
                    match transport {
                        Transport::Handshake => self.answer(run, addr, None),
                        Transport::Stream | Transport::Datagram => {
                            self.sched.handle_input(run, Input::Connected, self.now);
                        }
                    }
                }
                Io::Send { run, .. } => {
                    if let Some(&(addr, transport)) = self.transports.get(&run) {
                        self.answer(run, addr, Some(transport));
                    }
                }
                Io::Close { run } => {
                    self.transports.remove(&run);
                    self.pending.retain(|p| p.1 != run);
                }
            }
        }
        while let Some(e) = self.sched.poll_event() {
            let st = self.status(&e.key);
            self.events.push((self.now, e, st));
        }
    }

    /// Queues the backend's answer to a SYN (`sent` None) or to data.
    fn answer(&mut self, run: RunId, addr: SocketAddr, sent: Option<Transport>) {
        let Some(b) = self.backends.get(&addr).cloned() else {
            return;
        };
        let at = self.now + b.delay;
        let deliveries = match (&b.answer, sent) {
            (Answer::Silent, _) => vec![],
            (Answer::Refuse, _) => vec![Delivery::Refused],
            (Answer::Unreachable, _) => vec![Delivery::Unreachable],
            (Answer::Reply(_), None) => vec![Delivery::Connected],
            (Answer::Reply(r), Some(Transport::Stream)) => {
                vec![Delivery::Data(r.clone()), Delivery::Closed]
            }
            (Answer::Reply(r), Some(_)) => vec![Delivery::Data(r.clone())],
        };
        self.pending
            .extend(deliveries.into_iter().map(|d| (at, run, d)));
    }
}
