//! Egress port and next-hop MAC of every backend, from the kernel's route
//! and neighbour tables (the appliance's addresses live on the exception
//! path's TAPs, so the kernel routes and resolves exactly as the
//! dataplane must forward).
//!
//! A thread follows the kernel over rtnetlink (`kernel.rs`): it dumps the
//! neighbour table at start, then applies the neighbour events it is
//! subscribed to, and asks for each backend's route (`RTM_GETROUTE`, as
//! `ip route get` does) when the backend appears and again after any route
//! event. It publishes a map backend address → [`Egress`] the moment a
//! change alters it, so a next hop's new MAC reaches the dataplane within
//! milliseconds. The thread blocks on the socket; it wakes for events, for
//! a new set of backends, and once a second while something needs a nudge
//! or a failed route lookup a retry. A full re-dump every [`RESYNC`], and
//! at once after the socket overflowed (`ENOBUFS`: events were lost),
//! keeps the table right whatever was missed.
//!
//! A backend whose next hop has no usable entry is published unresolved
//! (the dataplane drops its packets under `next_hop_unresolved`) and
//! resolution is triggered by a nudge (`nudge.rs`): the kernel resolves the next
//! hop to send it, and its neighbour event completes the resolution. The
//! same nudge keeps a STALE entry confirmed.

mod kernel;
mod nudge;
mod report;
mod route;
mod state;
mod sync;

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use sluice_core::backend::Egress;

use kernel::{EventSocket, RouteLookup};
use nudge::{Nudger, NUDGE_INTERVAL};
use report::{NextHopLog, Outcome};
use route::{LookupError, Route};
use state::{resolve, Change};
use sync::TableSync;
pub use sync::RESYNC;

const KERNEL: Token = Token(0);
const WAKE: Token = Token(1);

/// The resolver thread's handle.
pub struct NeighbourResolver {
    targets: Arc<Mutex<Vec<IpAddr>>>,
    /// The latest resolution of every target.
    pub table: Arc<Mutex<HashMap<IpAddr, Egress>>>,
    /// One message per change of `table`.
    pub events: Receiver<()>,
    stop: Arc<AtomicBool>,
    waker: Waker,
    /// Next hops the previous process had resolved, used for a target
    /// the kernel has not resolved yet, until their deadline.
    seeds: Seeds,
}

/// Egress per backend address, each until its deadline.
type Seeds = Arc<Mutex<HashMap<IpAddr, (Egress, Instant)>>>;

/// How long a seeded next hop stands in for an unresolved one: long
/// enough for the kernel's first resolution through a new TAP, short
/// enough that a backend that moved is not sent to for long.
pub const SEED_HOLD: Duration = Duration::from_secs(30);

impl std::fmt::Debug for NeighbourResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeighbourResolver").finish_non_exhaustive()
    }
}

impl Drop for NeighbourResolver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
    }
}

impl NeighbourResolver {
    /// Opens the netlink sockets and starts the thread. `taps[i]` is port
    /// i's TAP interface, if any: a route through it means "egress on
    /// port i".
    pub fn spawn(taps: Vec<Option<String>>) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let kernel = EventSocket::open()?;
        poll.registry().register(
            &mut SourceFd(&kernel.as_raw_fd()),
            KERNEL,
            Interest::READABLE,
        )?;
        let targets = Arc::new(Mutex::new(Vec::new()));
        let table = Arc::new(Mutex::new(HashMap::new()));
        let seeds: Seeds = Arc::default();
        let (events_tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut resolver = Resolver {
            taps,
            kernel,
            lookup: RouteLookup::open()?,
            sync: TableSync::new(Instant::now()),
            routes: HashMap::new(),
            nudger: Nudger::default(),
            logged: NextHopLog::default(),
            targets: Arc::clone(&targets),
            table: Arc::clone(&table),
            events: events_tx,
            seeds: Arc::clone(&seeds),
        };
        let s = Arc::clone(&stop);
        thread::Builder::new()
            .name("sluice-neigh".into())
            .spawn(move || resolver.run(poll, &s))?;
        Ok(Self {
            targets,
            table,
            events,
            stop,
            waker,
            seeds,
        })
    }

    /// Next hops the previous process resolved (the conntrack hand-off):
    /// each stands for its address while the kernel has not resolved it
    /// (the TAP is new, its neighbour table empty), for [`SEED_HOLD`] at
    /// most, so the first packets after a restart are not dropped as
    /// `next_hop_unresolved`. Returns how many the table took.
    pub fn seed(&self, next_hops: &HashMap<IpAddr, Egress>) -> usize {
        let until = Instant::now() + SEED_HOLD;
        let mut seeds = self.seeds.lock().unwrap_or_else(|p| p.into_inner());
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = 0;
        for (&addr, &egress) in next_hops {
            if egress.next_hop_mac.is_none() {
                continue;
            }
            seeds.insert(addr, (egress, until));
            let entry = table.entry(addr).or_insert(egress);
            if entry.next_hop_mac.is_none() {
                *entry = egress;
            }
            taken += 1;
        }
        drop(table);
        drop(seeds);
        let _ = self.waker.wake();
        taken
    }

    /// The backend addresses to resolve (replaces the previous set).
    pub fn set_targets(&self, mut addrs: Vec<IpAddr>) {
        addrs.sort_unstable();
        addrs.dedup();
        *self.targets.lock().unwrap_or_else(|p| p.into_inner()) = addrs;
        let _ = self.waker.wake();
    }
}

struct Resolver {
    taps: Vec<Option<String>>,
    kernel: EventSocket,
    lookup: RouteLookup,
    sync: TableSync,
    /// Each backend's route; a failed lookup with when it was made.
    routes: HashMap<IpAddr, (Instant, Result<Route, LookupError>)>,
    nudger: Nudger,
    logged: NextHopLog,
    targets: Arc<Mutex<Vec<IpAddr>>>,
    table: Arc<Mutex<HashMap<IpAddr, Egress>>>,
    events: Sender<()>,
    seeds: Seeds,
}

impl Resolver {
    fn run(&mut self, mut poll: Poll, stop: &AtomicBool) {
        let mut ready = Events::with_capacity(4);
        let mut wait = Duration::ZERO;
        loop {
            if let Err(e) = poll.poll(&mut ready, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    crate::warn!("sluice: neighbour resolver: poll: {e}");
                    thread::sleep(NUDGE_INTERVAL);
                }
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
            self.read_kernel();
            self.resync_if_due();
            wait = if self.sync.synced {
                self.update()
            } else {
                NUDGE_INTERVAL
            };
        }
    }

    /// Applies every queued event and dump entry.
    fn read_kernel(&mut self) {
        let mut incoming = Vec::new();
        match self.kernel.drain(&mut incoming) {
            Ok(false) => {}
            Ok(true) => {
                crate::warn!(
                    "sluice: neighbour resolver: kernel events lost (socket buffer full); \
                     reading the neighbour and route tables again"
                );
                self.sync.events_lost();
            }
            Err(e) => crate::warn!("sluice: neighbour resolver: netlink receive: {e}"),
        }
        for m in &incoming {
            if self.sync.apply(m) == Change::Routes {
                self.routes.clear();
            }
        }
    }

    /// Asks for a neighbour dump when one is due; every route is looked
    /// up again with it.
    fn resync_if_due(&mut self) {
        let now = Instant::now();
        if !self.sync.dump_due(now) {
            return;
        }
        match self.kernel.request_neighbour_dump() {
            Ok(seq) => {
                self.sync.dump_asked(seq, now);
                self.routes.clear();
            }
            Err(e) => crate::warn!("sluice: neighbour resolver: neighbour dump: {e}"),
        }
    }

    /// Resolves every target, publishes a changed table and sends the
    /// nudges due; how long the thread may then sleep.
    fn update(&mut self) -> Duration {
        let addrs = self
            .targets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // A failed lookup is retried after a while; a route stays until a
        // route event or the periodic resync.
        self.routes.retain(|a, (at, r)| {
            addrs.binary_search(a).is_ok() && (r.is_ok() || at.elapsed() < NUDGE_INTERVAL)
        });
        self.logged.retain(|a| addrs.binary_search(a).is_ok());
        self.nudger.retain(|a| addrs.binary_search(a).is_ok());
        let mut next = HashMap::with_capacity(addrs.len());
        let mut attention = false;
        let now = Instant::now();
        let mut seeds = self.seeds.lock().unwrap_or_else(|p| p.into_inner());
        seeds.retain(|_, (_, until)| now < *until);
        for &addr in &addrs {
            let lookup = &mut self.lookup;
            let (_, route) = self
                .routes
                .entry(addr)
                .or_insert_with(|| (Instant::now(), lookup.get(addr)));
            let egress = match resolve(addr, route.as_ref(), &self.taps, &self.sync.neighbours) {
                Ok((egress, fresh)) => {
                    self.logged
                        .record(addr, Outcome::Resolved(egress.next_hop_mac));
                    if !fresh {
                        attention = true;
                        self.nudger.nudge(addr);
                    }
                    seeds.remove(&addr);
                    egress
                }
                Err((egress, why)) => {
                    self.logged
                        .record(addr, Outcome::Unresolved(why.to_string()));
                    attention = true;
                    self.nudger.nudge(addr);
                    seeds.get(&addr).map_or(egress, |&(seeded, _)| seeded)
                }
            };
            next.insert(addr, egress);
        }
        drop(seeds);
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if *t != next {
            *t = next;
            let _ = self.events.send(());
        }
        // At least a nudge interval: a dump that could not be asked is
        // asked again then, not in a loop.
        if attention {
            NUDGE_INTERVAL
        } else {
            self.sync.until_resync(Instant::now()).max(NUDGE_INTERVAL)
        }
    }
}
