//! Per-worker counters: one writer (the worker), any number of readers (the
//! metrics scrape), no locked read-modify-write on the packet path.
//!
//! A [`Counter`] is an `AtomicU64` updated with a relaxed load + store: only
//! its owning worker writes it, so the pair cannot lose an update, and it
//! compiles to a plain `add` on x86. Readers may see a value one burst old.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::drop_reason::DropReason;

/// Maximum number of dataplane ports.
pub const MAX_PORTS: usize = 8;

/// A single-writer monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Must only be called by the counter's owning thread.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-backend counters of one worker, sized by the indexes in use: chunks
/// of [`BackendCounters::CHUNK`] counters, each allocated by the control
/// plane ([`BackendCounters::cover`]) before it publishes a snapshot with
/// an index in it, so the worker never allocates and every index a
/// snapshot can name has its counter. A packet for an index without one
/// (a snapshot built without `cover`, tests) is counted in `uncounted`,
/// never lost silently.
#[derive(Debug)]
pub struct BackendCounters {
    chunks: Box<[std::sync::OnceLock<Box<[Counter]>>]>,
    pub uncounted: Counter,
}

impl Default for BackendCounters {
    fn default() -> Self {
        Self {
            chunks: (0..crate::BackendId::INDEXES / Self::CHUNK)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            uncounted: Counter::default(),
        }
    }
}

impl BackendCounters {
    /// Counters per chunk (32 KiB).
    pub const CHUNK: usize = 4096;

    /// Makes sure indexes `0..len` have counters (control plane).
    pub fn cover(&self, len: usize) {
        for chunk in self.chunks.iter().take(len.div_ceil(Self::CHUNK)) {
            chunk.get_or_init(|| (0..Self::CHUNK).map(|_| Counter::default()).collect());
        }
    }

    /// Number of indexes with counters.
    pub fn covered(&self) -> usize {
        self.chunks.iter().take_while(|c| c.get().is_some()).count() * Self::CHUNK
    }

    #[inline(always)]
    fn counter(&self, index: usize) -> Option<&Counter> {
        self.chunks
            .get(index / Self::CHUNK)?
            .get()?
            .get(index % Self::CHUNK)
    }

    /// Adds `n` to `index` (owning worker only).
    #[inline(always)]
    pub fn add(&self, index: usize, n: u64) {
        match self.counter(index) {
            Some(c) => c.add(n),
            None => self.uncounted.add(n),
        }
    }

    pub fn get(&self, index: usize) -> u64 {
        self.counter(index).map_or(0, Counter::get)
    }

    /// Zeroes `index` before it is given to another backend. Only once no
    /// published snapshot names the index any more: its worker no longer
    /// writes it, and the snapshot that hands it out again is published
    /// (release) after this store, so the worker's next add sees zero.
    pub fn reset(&self, index: usize) {
        if let Some(c) = self.counter(index) {
            c.0.store(0, Ordering::Relaxed);
        }
    }
}

/// A single-writer gauge (last value wins).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
pub struct PortCounters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
    /// Received here and handed to this port's TAP (AP-4).
    pub punted: Counter,
    /// Sent by the kernel on this port's TAP and transmitted here (AP-4).
    /// Not in `tx_packets`, so RX = TX + punted + drops holds per port.
    pub injected: Counter,
    /// Sent by the kernel on the TAP but refused by the port's TX queue.
    pub inject_failed: Counter,
}

/// The worker's conntrack shard as the scrape sees it (SPEC §3). The shard
/// counts in plain worker-local integers; the worker copies them here once
/// per poll, so these are monotonic except `entries`, `capacity` and
/// `slots`.
#[derive(Debug, Default)]
pub struct ConntrackStats {
    /// Occupied slots (expired entries not yet swept included).
    pub entries: Gauge,
    /// Connections the shard is sized for (`conntrack_capacity`).
    pub capacity: Gauge,
    /// Slots reserved for them (memory: 68 bytes each).
    pub slots: Gauge,
    pub inserts: Gauge,
    pub hits: Gauge,
    pub misses: Gauge,
    pub expirations: Gauge,
    /// New flows forwarded statelessly because every candidate slot was live
    /// and none half-open (table full).
    pub insert_failed: Gauge,
    /// Half-open entries replaced by a new flow in a full bucket pair.
    pub half_open_evicted: Gauge,
    /// Tracked packets moved off an unhealthy backend (CT-8).
    pub reselected_unhealthy: Gauge,
}

impl ConntrackStats {
    /// Copies the shard's counters (one owner: the worker).
    #[inline]
    pub fn publish(&self, shard: &crate::conntrack::Shard) {
        let c = &shard.counters;
        self.entries.set(shard.len() as u64);
        self.capacity.set(shard.capacity() as u64);
        self.slots.set(shard.slots() as u64);
        self.inserts.set(c.inserts);
        self.hits.set(c.hits);
        self.misses.set(c.misses);
        self.expirations.set(c.expirations);
        self.insert_failed.set(c.insert_failed);
        self.half_open_evicted.set(c.half_open_evicted);
        self.reselected_unhealthy.set(c.reselected_unhealthy);
    }
}

/// Everything one worker counts. Allocated once at start; the metrics thread
/// holds an `Arc` to every worker's block and sums them at scrape time.
#[derive(Debug)]
pub struct WorkerStats {
    pub ports: [PortCounters; MAX_PORTS],
    pub drops: [Counter; DropReason::COUNT],
    /// Tracked packets handed to the worker owning their key (steering).
    pub steered_out: Counter,
    /// Tracked packets received from other workers (steering).
    pub steered_in: Counter,
    /// RX polls skipped because a peer's steering ring was full
    /// (backpressure: the packets wait in the port's RX queue).
    pub steering_backpressure: Counter,
    /// ICMP errors the worker answered with (AP-3: fragmentation needed /
    /// packet too big), sent back out of the receive port.
    pub icmp_replies: Counter,
    /// Received packets sent on as IP fragments (AP-3: oversize IPv4
    /// without DF), each counted once here.
    pub fragmented: Counter,
    /// Fragments made of them, every one handed to a TX queue: counted in
    /// `tx_packets` once the driver takes it, else under `tx_queue_full`.
    /// So RX = TX + punted + drops − (fragments − fragmented).
    pub fragments: Counter,
    /// Packets sent per backend, by [`crate::BackendId::index`].
    pub backend_packets: BackendCounters,
    /// Generation of the snapshot the worker last loaded.
    pub snapshot_generation: Gauge,
    /// Number of poll-loop iterations (bursts attempted).
    pub polls: Counter,
    pub conntrack: ConntrackStats,
}

impl WorkerStats {
    pub fn new() -> CachePadded<Self> {
        CachePadded::new(Self {
            ports: Default::default(),
            drops: Default::default(),
            steered_out: Counter::default(),
            steered_in: Counter::default(),
            steering_backpressure: Counter::default(),
            icmp_replies: Counter::default(),
            fragmented: Counter::default(),
            fragments: Counter::default(),
            backend_packets: BackendCounters::default(),
            snapshot_generation: Gauge::default(),
            polls: Counter::default(),
            conntrack: ConntrackStats::default(),
        })
    }

    #[inline(always)]
    pub fn count_drop(&self, reason: DropReason, n: u64) {
        self.drops[reason.index()].add(n);
    }

    #[inline(always)]
    pub fn backend(&self, id: crate::BackendId, n: u64) {
        self.backend_packets.add(id.index(), n);
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_sum() {
        let s = WorkerStats::new();
        s.count_drop(DropReason::NoRule, 2);
        s.count_drop(DropReason::NotForUs, 3);
        s.backend_packets.cover(4);
        s.backend(crate::BackendId(3), 5);
        s.backend(crate::BackendId(9000), 5); // no counter yet: uncounted
        assert_eq!(s.total_drops(), 5);
        assert_eq!(s.backend_packets.get(3), 5);
        assert_eq!(s.backend_packets.uncounted.get(), 5);
    }

    /// Counters follow the indexes in use, past 65,536, and a reused index
    /// starts from zero.
    #[test]
    fn backend_counters_cover_every_index_in_use() {
        let s = WorkerStats::new();
        assert_eq!(s.backend_packets.covered(), 0);
        s.backend_packets.cover(70_001);
        assert!(s.backend_packets.covered() >= 70_001);
        s.backend(crate::BackendId::new(70_000, 1), 7);
        assert_eq!(s.backend_packets.get(70_000), 7);
        assert_eq!(s.backend_packets.uncounted.get(), 0);
        s.backend_packets.reset(70_000);
        s.backend(crate::BackendId::new(70_000, 2), 1);
        assert_eq!(s.backend_packets.get(70_000), 1);
        let last = crate::BackendId::INDEXES - 1;
        s.backend_packets.cover(last + 1);
        s.backend(crate::BackendId::new(last as u32, 4095), 1);
        assert_eq!(s.backend_packets.get(last), 1);
    }
}
