//! The table of one worker's conntrack shard: fixed capacity, open
//! addressing over buckets of [`SLOTS`] slots, two candidate buckets per key,
//! keyed hash with a per-process random seed.
//!
//! Layout: a signature array (one 64-byte line per bucket: 16 × `u32`,
//! 0 = empty) and an entry array (one 64-byte line per slot). Each key has
//! a home slot in its first bucket, chosen by its signature, which inserts
//! take when it is free; every entry repeats its slot's signature. So a
//! lookup first reads the home entry alone — one cache line, which the
//! worker requests a burst ahead, where nearly every key of a table that
//! is not full lives — and only when that is not the key reads at most two
//! signature lines and, per signature match, one entry line. In a shard
//! over a quarter full, where an eighth of the keys or more live away
//! from home, the burst requests a known key's first signature line with
//! its home entry, so that for those keys the entry they match is
//! requested a few packets ahead instead of the signature line.
//! Both arrays are allocated and written once at start (so no page fault
//! and no allocation ever happens on the packet path); nothing grows or
//! rehashes afterwards.
//!
//! Sizing: a shard built for `capacity` connections has
//! [`Shard::slots_for`]`(capacity)` slots — at least 1.25 × capacity,
//! rounded up to a power of two, so at most 80 % full when it holds its
//! capacity. A table filled to its last slots fails inserts (from ~92 % full)
//! and finds only half its keys in their home slot (see the tests); an
//! operator who configures a capacity expects that many connections to be
//! held, and held fast.
//!
//! Half-open entries (written by a SYN; no later packet of the connection
//! seen yet) carry [`HALF_OPEN`] in their stored signature, in the
//! signature array and the entry alike, and their service's short
//! `half_open_timeout`. They are what a SYN flood fills a table with, so a
//! full bucket pair gives one of them up to a new key (the oldest of at
//! most [`EVICTION_PROBES`]) before it fails. Every search ignores the
//! bit: a signature is 31 bits with bit 0 set. The first non-SYN packet
//! that hits the entry ([`Shard::refresh`]) clears it. A failed insert
//! reads a bounded number of lines: its two signature lines, at most
//! [`EVICTION_PROBES`] entries and [`RELOCATION_PROBES`] other buckets'
//! signature lines.

use crate::hash::fold_mul;
use crate::ids::BackendId;
use crate::time::Millis;

use super::TrackKey;

/// Slots per bucket: 16 signatures fill one cache line.
pub(crate) const SLOTS: usize = 16;

/// Bit of a stored signature (signature array and [`Entry`]) marking a
/// half-open entry. Never part of a key's signature.
pub(crate) const HALF_OPEN: u32 = 1 << 31;

/// Half-open entries of a full bucket pair whose age an insert compares
/// (one entry line each) before it evicts the oldest.
pub(crate) const EVICTION_PROBES: usize = 4;

/// Residents of a full bucket pair (half of them in each bucket) whose
/// other bucket an insert looks at for a free slot (one signature line
/// each): the cuckoo step, bounded.
pub(crate) const RELOCATION_PROBES: usize = 16;

/// One tracked flow. Exactly one cache line for IPv4 and IPv6 keys alike.
#[repr(C, align(64))]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Entry {
    pub key: TrackKey,
    /// The backend's stable id: never an index into a snapshot (CT-7).
    pub backend: BackendId,
    /// The service's `pool_epoch` when the entry was written (CT-11).
    pub pool_epoch: u32,
    /// When the entry expires (CT-5): its last packet's time plus
    /// `idle_timeout_ms`, kept as one deadline so that a lookup's expiry
    /// test is one compare.
    pub expires: Millis,
    /// The service's idle timeout when last matched (CT-5); kept here so
    /// the sweep needs no snapshot.
    pub idle_timeout_ms: u32,
    /// Copy of the slot's stored signature (0: free; [`HALF_OPEN`] set for
    /// a half-open entry), so a home-slot hit needs no signature line. The
    /// shard keeps it equal to the signature array.
    sig: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() <= 64);

impl Entry {
    /// CT-5 on a hit, in the entry alone: its last time, and its idle
    /// timeout unless it is half-open. True for a half-open entry, which
    /// only [`Shard`]'s `establish` (its signature has a second copy)
    /// can make established.
    #[inline(always)]
    fn stamp(&mut self, now: Millis, idle_timeout_ms: u32) -> bool {
        if self.is_half_open() {
            self.expires = now.after(self.idle_timeout_ms);
            return true;
        }
        self.idle_timeout_ms = idle_timeout_ms;
        self.expires = now.after(idle_timeout_ms);
        false
    }

    pub fn new(
        key: TrackKey,
        backend: BackendId,
        pool_epoch: u32,
        last_seen: Millis,
        idle_timeout_ms: u32,
    ) -> Self {
        Self {
            key,
            backend,
            pool_epoch,
            expires: last_seen.after(idle_timeout_ms),
            idle_timeout_ms,
            sig: 0,
        }
    }

    /// The same entry, half-open: written by a SYN (its `idle_timeout_ms`
    /// is then the service's half-open timeout). The shard keeps the mark
    /// until a non-SYN packet refreshes the entry.
    pub fn half_open(mut self) -> Self {
        self.sig = HALF_OPEN;
        self
    }

    /// No packet but SYNs seen since the entry was written.
    #[inline]
    pub fn is_half_open(&self) -> bool {
        self.sig & HALF_OPEN != 0
    }

    #[inline]
    pub fn expired(&self, now: Millis) -> bool {
        now >= self.expires
    }

    /// The time of the last packet that matched (CT-5).
    #[inline]
    pub fn last_seen(&self) -> Millis {
        Millis(
            self.expires
                .0
                .saturating_sub(u64::from(self.idle_timeout_ms)),
        )
    }
}

#[repr(C, align(64))]
#[derive(Copy, Clone, Debug, Default)]
struct Sigs([u32; SLOTS]);

/// The bits of a bucket's slots (`SLOTS` of them).
const ALL_SLOTS: u32 = (1 << SLOTS) - 1;

impl Sigs {
    /// Bit i set where signature i equals `sig`, all sixteen compared at
    /// once (`sluice_platform::lanes_equal`). `sig` is a key's signature
    /// (without [`HALF_OPEN`]) or 0 (free slots).
    #[inline(always)]
    fn mask(&self, sig: u32) -> u32 {
        sluice_platform::lanes_equal(&self.0, !HALF_OPEN, sig)
    }

    /// Bit i set where slot i is occupied (its stored signature is not 0).
    #[inline(always)]
    fn occupied(&self) -> u32 {
        !sluice_platform::lanes_equal(&self.0, u32::MAX, 0) & ALL_SLOTS
    }

    /// Bit i set where slot i holds a half-open entry.
    #[inline]
    fn half_open(&self) -> u32 {
        !sluice_platform::lanes_equal(&self.0, HALF_OPEN, 0) & ALL_SLOTS
    }
}

/// Worker-local counters (plain integers: one owner). The worker copies
/// them into its shared stats block once per poll.
// Fields public for the conntrack tests (core/tests/conntrack_*.rs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub inserts: u64,
    pub hits: u64,
    pub misses: u64,
    pub expirations: u64,
    /// Inserts that found every candidate slot live and none half-open
    /// (table full): the flow is forwarded statelessly.
    pub insert_failed: u64,
    /// Half-open entries replaced by a new key in a full bucket pair.
    pub half_open_evicted: u64,
    pub reselected_unhealthy: u64,
}

/// Where a key's lookup starts, derived once from its hash
/// ([`Shard::home_of`]): its home slot and its signature. Only a hint —
/// every use compares the key — so a slot index past `u32::MAX` (never,
/// at any configurable capacity) would only send the lookup the long way.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Home {
    slot: u32,
    sig: u32,
}

impl Home {
    /// Slot 0 with no signature: matches no entry.
    pub(crate) const ZERO: Home = Home { slot: 0, sig: 0 };
}

/// No free, expired or half-open slot among the key's candidates.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Full;

/// One worker's conntrack table.
pub struct Shard {
    sigs: Box<[Sigs]>,
    entries: Box<[Entry]>,
    /// The connections this shard was sized for (the configured capacity).
    capacity: usize,
    /// buckets − 1 (buckets is a power of two).
    mask: usize,
    keys: [u64; 6],
    /// [`Shard::hash`]'s keyed high halves of an IPv4 key (both 0),
    /// computed once.
    v4_high: u64,
    live: usize,
    cursor: usize,
    /// Whether the burst requests a known key's first signature line with
    /// its home entry ([`Shard::prefetch_home_at`]): once the shard is a
    /// quarter full, an eighth of its keys or more live away from home,
    /// and for them the line then arrives a stage earlier. Below that
    /// the second request costs the keys at home more than it saves the
    /// others. Set by the sweep, once a millisecond.
    prefetch_signatures: bool,
    pub counters: Counters,
    /// Lines a full bucket pair's insert read beyond its two signature
    /// lines (tests: the bound).
    #[cfg(test)]
    probed: std::cell::Cell<usize>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("capacity", &self.capacity)
            .field("slots", &self.slots())
            .field("live", &self.live)
            .field("counters", &self.counters)
            .finish()
    }
}

/// Six random words from the standard library's `RandomState`, which draws
/// its SipHash keys from the OS's random source once per thread.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x736c_7569_6365_4354);
    h.finish()
}

/// `n` default elements on transparent huge pages where the kernel gives
/// them (TLB misses otherwise dominate random lookups in a large table),
/// written here — at start — so no page is faulted in on the packet path.
fn table<T: Copy + Default>(n: usize) -> Box<[T]> {
    let mut v = Vec::with_capacity(n);
    sluice_platform::advise_huge_pages(&mut v);
    v.resize(n, T::default());
    v.into_boxed_slice()
}

impl Shard {
    /// A shard sized to hold `capacity` connections, with a random hash
    /// seed.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self::with_capacity_and_seed(capacity, random_seed())
    }

    /// Slots reserved for `capacity` connections: 1.25 × capacity rounded
    /// up to a power of two (at least one bucket).
    pub const fn slots_for(capacity: usize) -> usize {
        let want = capacity.saturating_add(capacity / 4);
        let want = if want < SLOTS { SLOTS } else { want };
        want.next_power_of_two()
    }

    /// Deterministic seed: tests and benchmarks only. Production shards
    /// must not be predictable (hash flooding), and need not agree across
    /// appliances (unlike the flow hash): a shard is private to a worker.
    pub fn with_capacity_and_seed(capacity: usize, seed: u64) -> Self {
        let slots = Self::slots_for(capacity);
        let buckets = slots / SLOTS;
        // splitmix64 expands the seed into the six key words.
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) | 1
        };
        let keys = [next(), next(), next(), next(), next(), next()];
        Self {
            sigs: table(buckets),
            entries: table(slots),
            capacity,
            mask: buckets - 1,
            keys,
            v4_high: fold_mul(keys[0], keys[1]) ^ keys[4],
            live: 0,
            cursor: 0,
            prefetch_signatures: false,
            counters: Counters::default(),
            #[cfg(test)]
            probed: std::cell::Cell::new(0),
        }
    }

    /// Empties the table (benchmarks, tests; not for the packet path: it
    /// writes every signature line).
    pub fn clear(&mut self) {
        self.sigs.fill(Sigs::default());
        self.entries.fill(Entry::default());
        self.live = 0;
        self.cursor = 0;
    }

    /// The connections this shard was sized for (it may hold more, up to
    /// its slots, minus the few a full bucket pair cannot place).
    // Public for core/tests/conntrack_capacity.rs.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of slots: [`Shard::slots_for`] the capacity.
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// Occupied slots, including expired entries not reclaimed yet.
    pub fn len(&self) -> usize {
        self.live
    }

    // Public for the conntrack tests (core/tests/conntrack_*.rs).
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Bytes of table memory per slot (signature + entry).
    pub const fn bytes_per_slot() -> usize {
        std::mem::size_of::<Entry>() + std::mem::size_of::<u32>()
    }

    /// The keyed hash: folded multiplies of key words XORed with secret
    /// words (the foldhash/ahash-fallback construction). Without the seed an
    /// attacker cannot aim keys at one bucket. Its spread of structured
    /// keys, and of keys aimed at one bucket under another seed, is
    /// tested in `hash_tests`.
    #[inline(always)]
    pub fn hash(&self, k: &TrackKey) -> u64 {
        // The addresses' high halves pair up: 0 in an IPv4 key, whose
        // product is then the shard's constant.
        let high = if k.src[0] | k.dst[0] == 0 {
            self.v4_high
        } else {
            fold_mul(k.src[0] ^ self.keys[0], k.dst[0] ^ self.keys[1]) ^ self.keys[4]
        };
        let low = fold_mul(k.src[1] ^ self.keys[2], k.dst[1] ^ self.keys[3]);
        let h = fold_mul(high ^ k.meta, low ^ self.keys[5]);
        // Bucket (low bits) and signature (high bits) must be independent;
        // one more multiply spreads every input bit over both (without
        // it, one client's source ports fill buckets unevenly:
        // `hash_tests`).
        fold_mul(h, 0x9e37_79b9_7f4a_7c15)
    }

    /// Signature and first bucket: all a home-slot lookup needs.
    #[inline(always)]
    fn sig_and_bucket(&self, h: u64) -> (u32, usize) {
        (
            (((h >> 32) as u32) | 1) & !HALF_OPEN,
            (h as usize) & self.mask,
        )
    }

    /// Signature and both candidate buckets.
    #[inline]
    fn candidates(&self, h: u64) -> (u32, usize, usize) {
        let (sig, b1) = self.sig_and_bucket(h);
        // Derived from the signature alone (bits independent of b1's).
        let b2 = self.other_bucket(b1, sig);
        (sig, b1, b2)
    }

    /// The slot in bucket `b1` that a key with signature `sig` takes when
    /// it is free (the signature's bit 0 is always set; bits 1–4 pick).
    #[inline(always)]
    fn home(b1: usize, sig: u32) -> usize {
        b1 * SLOTS + ((sig >> 1) as usize % SLOTS)
    }

    /// Burst pass 1: start loading `h`'s home entry — the only line a hit
    /// in its home slot reads. `likely_new` (a SYN, CT-1): the key is
    /// probably absent, which only the signature lines can tell, so the
    /// first one is requested too.
    #[inline(always)]
    pub(crate) fn prefetch_home(&self, h: u64, likely_new: bool) {
        let (sig, b1) = self.sig_and_bucket(h);
        if let Some(e) = self.entries.get(Self::home(b1, sig)) {
            sluice_platform::prefetch_read(e);
        }
        if likely_new {
            if let Some(s) = self.sigs.get(b1) {
                sluice_platform::prefetch_read(s);
            }
        }
    }

    /// Lookahead step 1, a few packets before `h`'s lookup (the lines of
    /// [`Shard::prefetch_home`] have arrived by then): whether the lookup
    /// will need more than its home entry — the key lives elsewhere, or
    /// is likely new — and if so, the next line it will read is requested
    /// (the first signature line; for a likely new key, whose signature
    /// line is here already, the entries it matches or else the second
    /// signature line).
    #[inline]
    pub(crate) fn check_home(&self, h: u64, likely_new: bool) -> bool {
        if likely_new {
            self.prefetch_matches(h);
            return false;
        }
        self.check_home_of_known(h)
    }

    /// The home slot and signature of hash `h`.
    #[inline(always)]
    pub(crate) fn home_of(&self, h: u64) -> Home {
        let (sig, b1) = self.sig_and_bucket(h);
        Home {
            slot: Self::home(b1, sig) as u32,
            sig,
        }
    }

    /// [`Shard::prefetch_home`] of a key that is not likely new, from its
    /// [`Home`].
    #[inline(always)]
    pub(crate) fn prefetch_home_at(&self, home: Home) {
        if let Some(e) = self.entries.get(home.slot as usize) {
            sluice_platform::prefetch_read(e);
        }
        if self.prefetch_signatures {
            if let Some(s) = self.sigs.get(home.slot as usize / SLOTS) {
                sluice_platform::prefetch_read(s);
            }
        }
    }

    /// [`Shard::check_home_of_known`] from the key's [`Home`] (`h`: its
    /// hash, for the signature line when it is away). When
    /// [`Shard::prefetch_home_at`] requested that line already, step 2's
    /// work is done here (the entries it matches are requested) and no
    /// step 2 is needed.
    #[inline(always)]
    pub(crate) fn check_home_at(&self, home: Home, h: u64) -> bool {
        let at_home = self
            .entries
            .get(home.slot as usize)
            .is_some_and(|e| e.sig & !HALF_OPEN == home.sig);
        if at_home {
            return false;
        }
        if self.prefetch_signatures {
            self.prefetch_matches(h);
            return false;
        }
        if let Some(s) = self.sigs.get((h as usize) & self.mask) {
            sluice_platform::prefetch_read(s);
        }
        true
    }

    /// The established lane's hit, from the key's [`Home`] as well as its
    /// hash: the key's live entry (as [`Shard::lookup`] finds it) is given
    /// to `keep`, which returns what the caller makes of the packet and
    /// the idle timeout the entry is refreshed with, or None to leave the
    /// entry as it is. When it keeps it, a hit is counted and the entry
    /// refreshed (CT-5: its time and timeout; a half-open entry is
    /// completed, as any non-SYN packet completes it), through the one
    /// reference `keep` read.
    #[inline(always)]
    pub(crate) fn keep_hit_at<R>(
        &mut self,
        key: &TrackKey,
        h: u64,
        home: Home,
        now: Millis,
        keep: impl FnOnce(&Entry) -> Option<(R, u32)>,
    ) -> Option<R> {
        let home_slot = home.slot as usize;
        // A key at home is read and refreshed through the one reference
        // its check took. (`keep` is called from one place only: twice,
        // the compiler puts it out of line.)
        let (slot, e) = match self.entries.get_mut(home_slot) {
            Some(e) if e.sig & !HALF_OPEN == home.sig && e.key == *key && !e.expired(now) => {
                (home_slot, e)
            }
            _ => {
                let slot = self.lookup_away(key, h, now)?;
                (slot, self.entries.get_mut(slot)?)
            }
        };
        let (kept, idle_timeout_ms) = keep(e)?;
        self.counters.hits += 1;
        if e.stamp(now, idle_timeout_ms) {
            self.establish(slot, idle_timeout_ms);
        }
        Some(kept)
    }

    /// [`Shard::check_home`] for a key that is not likely new (not a SYN):
    /// the established lane's lookahead.
    #[inline(always)]
    pub(crate) fn check_home_of_known(&self, h: u64) -> bool {
        let (sig, b1) = self.sig_and_bucket(h);
        let at_home = self
            .entries
            .get(Self::home(b1, sig))
            .is_some_and(|e| e.sig & !HALF_OPEN == sig);
        if !at_home {
            if let Some(s) = self.sigs.get(b1) {
                sluice_platform::prefetch_read(s);
            }
        }
        !at_home
    }

    /// Lookahead step 2 (the first signature line has arrived): the entry
    /// lines whose signature matches `h`'s, or else the second bucket's
    /// signature line. Out of line, as [`Shard::find`].
    #[inline(never)]
    pub(crate) fn prefetch_matches(&self, h: u64) {
        let (sig, b1, b2) = self.candidates(h);
        let Some(sigs) = self.sigs.get(b1) else {
            return;
        };
        let mut m = sigs.mask(sig);
        if m == 0 {
            if let Some(s) = self.sigs.get(b2) {
                sluice_platform::prefetch_read(s);
            }
        }
        while m != 0 {
            if let Some(e) = self.entries.get(b1 * SLOTS + m.trailing_zeros() as usize) {
                sluice_platform::prefetch_read(e);
            }
            m &= m - 1;
        }
    }

    /// The slot holding `key`, whose hash is `h`. Out of line: a key
    /// away from its home slot is the rare case, and inlined into the
    /// burst function it cost the packets at home more in that
    /// function's register assignment than the call costs the others.
    #[inline(never)]
    fn find(&self, key: &TrackKey, h: u64) -> Option<usize> {
        let (sig, b1) = self.sig_and_bucket(h);
        let home = Self::home(b1, sig);
        if self
            .entries
            .get(home)
            .is_some_and(|e| e.sig & !HALF_OPEN == sig && e.key == *key)
        {
            return Some(home);
        }
        let b2 = self.other_bucket(b1, sig);
        for b in [b1, b2] {
            let Some(sigs) = self.sigs.get(b) else {
                continue;
            };
            let mut m = sigs.mask(sig);
            while m != 0 {
                let slot = b * SLOTS + m.trailing_zeros() as usize;
                m &= m - 1;
                if self.entries.get(slot).is_some_and(|e| e.key == *key) {
                    return Some(slot);
                }
            }
            if b1 == b2 {
                break;
            }
        }
        None
    }

    /// The live entry for `key` (CT-3). An expired one (CT-5: a timestamp
    /// compare) is reclaimed on the spot and reported as a miss.
    ///
    /// A live key in its home slot — nearly every hit, and the only line
    /// the burst's lookahead requested for it — is answered inline; any
    /// other case (away from home, absent, expired) takes
    /// [`Shard::lookup_away`], out of line, which decides it from scratch.
    #[inline(always)]
    pub fn lookup(&mut self, key: &TrackKey, h: u64, now: Millis) -> Option<usize> {
        match self.lookup_home(key, h, now) {
            Some(home) => Some(home),
            None => self.lookup_away(key, h, now),
        }
    }

    /// The home slot of `key` when it holds the key's live entry: the
    /// common hit, one line, answered without a signature line. None says
    /// nothing about the key (it may be away from home, absent or expired:
    /// [`Shard::lookup`] decides those).
    #[inline(always)]
    fn lookup_home(&self, key: &TrackKey, h: u64, now: Millis) -> Option<usize> {
        let (sig, b1) = self.sig_and_bucket(h);
        let home = Self::home(b1, sig);
        self.entries
            .get(home)
            .is_some_and(|e| e.sig & !HALF_OPEN == sig && e.key == *key && !e.expired(now))
            .then_some(home)
    }

    /// [`Shard::lookup`] in full: every slot the key may hold.
    #[inline(never)]
    fn lookup_away(&mut self, key: &TrackKey, h: u64, now: Millis) -> Option<usize> {
        let slot = self.find(key, h)?;
        if self.entries.get(slot)?.expired(now) {
            self.free(slot);
            self.counters.expirations += 1;
            return None;
        }
        Some(slot)
    }

    // Public for core/tests/conntrack_capacity.rs.
    #[inline]
    pub fn entry(&self, slot: usize) -> Option<&Entry> {
        self.entries.get(slot)
    }

    /// Records a hit on `slot` (CT-5 refresh; CT-7/CT-8/CT-11: the backend
    /// and pool epoch now in force). The key and signature stay. A
    /// half-open entry stays half-open (and keeps its short timeout) while
    /// only SYNs hit it (`syn`); any other packet completes it.
    #[inline]
    pub(crate) fn refresh(
        &mut self,
        slot: usize,
        backend: BackendId,
        pool_epoch: u32,
        now: Millis,
        idle_timeout_ms: u32,
        syn: bool,
    ) {
        if let Some(e) = self.entries.get_mut(slot) {
            e.backend = backend;
            e.pool_epoch = pool_epoch;
        }
        self.stamp(slot, now, idle_timeout_ms, !syn);
    }

    /// CT-5 on a hit: the entry's last time and idle timeout; a half-open
    /// entry keeps its short one unless `complete` makes it established.
    #[inline(always)]
    fn stamp(&mut self, slot: usize, now: Millis, idle_timeout_ms: u32, complete: bool) {
        if let Some(e) = self.entries.get_mut(slot) {
            if e.stamp(now, idle_timeout_ms) && complete {
                self.establish(slot, idle_timeout_ms);
            }
        }
    }

    /// Half-open → established: clears [`HALF_OPEN`] in both copies of
    /// the stored signature and gives the entry the idle timeout.
    #[cold]
    fn establish(&mut self, slot: usize, idle_timeout_ms: u32) {
        if let Some(e) = self.entries.get_mut(slot) {
            e.sig &= !HALF_OPEN;
            e.expires = e.last_seen().after(idle_timeout_ms);
            e.idle_timeout_ms = idle_timeout_ms;
        }
        if let Some(s) = self.stored_sig(slot) {
            *s &= !HALF_OPEN;
        }
    }

    fn stored_sig(&mut self, slot: usize) -> Option<&mut u32> {
        self.sigs
            .get_mut(slot / SLOTS)
            .and_then(|b| b.0.get_mut(slot % SLOTS))
    }

    fn free(&mut self, slot: usize) {
        if let Some(s) = self.stored_sig(slot) {
            if *s != 0 {
                *s = 0;
                self.live -= 1;
            }
        }
        if let Some(e) = self.entries.get_mut(slot) {
            e.sig = 0;
        }
    }

    /// Stores `entry` under `h`: overwrites the key's slot if present
    /// (half-open or not as `entry` is), else inserts it as
    /// [`Shard::insert_absent`] does.
    pub fn upsert(&mut self, entry: Entry, h: u64, now: Millis) -> Result<usize, Full> {
        if let Some(slot) = self.find(&entry.key, h) {
            let stored = self
                .entries
                .get(slot)
                .map_or(0, |e| (e.sig & !HALF_OPEN) | (entry.sig & HALF_OPEN));
            self.write(slot, stored, entry);
            return Ok(slot);
        }
        self.insert_absent(entry, h, now)
    }

    /// Like [`Shard::upsert`] for a key known to be absent (just missed):
    /// takes the key's home slot if free, else a free slot of its first
    /// bucket, then of its second; else reclaims its home slot if expired;
    /// else, reading at most `EVICTION_PROBES` entries, an expired one
    /// or the oldest half-open one (when the pair holds half-open entries,
    /// only those are read); else moves one of at most
    /// `RELOCATION_PROBES` residents to its other bucket. `Full` when
    /// none of that frees a slot (the caller forwards statelessly; counted
    /// as `insert_failed`).
    pub fn insert_absent(&mut self, entry: Entry, h: u64, now: Millis) -> Result<usize, Full> {
        let (sig, b1, b2) = self.candidates(h);
        let home = Self::home(b1, sig);
        let home_free = self
            .sigs
            .get(b1)
            .and_then(|b| b.0.get(home % SLOTS))
            .is_some_and(|&s| s == 0);
        let slot = match (home_free.then_some(home))
            .or_else(|| self.empty_slot(b1))
            .or_else(|| self.empty_slot(b2))
        {
            Some(slot) => slot,
            None => match self.reclaim(home, b1, b2, sig, now) {
                Some(slot) => slot,
                None => {
                    self.counters.insert_failed += 1;
                    return Err(Full);
                }
            },
        };
        self.write(slot, sig | (entry.sig & HALF_OPEN), entry);
        self.live += 1;
        self.counters.inserts += 1;
        Ok(slot)
    }

    /// Writes `entry` into `slot` with the stored signature `stored`
    /// (signature array and entry alike).
    fn write(&mut self, slot: usize, stored: u32, entry: Entry) {
        if let Some(s) = self.stored_sig(slot) {
            *s = stored;
        }
        if let Some(e) = self.entries.get_mut(slot) {
            *e = Entry {
                sig: stored,
                ..entry
            };
        }
    }

    /// The other candidate bucket of a key with signature `sig` in `b`
    /// (the XOR makes the relation symmetric).
    #[inline]
    fn other_bucket(&self, b: usize, sig: u32) -> usize {
        (b ^ (u64::from(sig).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize) & self.mask
    }

    fn empty_slot(&self, b: usize) -> Option<usize> {
        let m = self.sigs.get(b)?.mask(0);
        (m != 0).then(|| b * SLOTS + m.trailing_zeros() as usize)
    }

    /// Incremental expiry (CT-5): examines about `slots` slots from a
    /// rotating cursor and frees the expired ones. Returns how many it freed.
    pub fn sweep(&mut self, now: Millis, slots: usize) -> usize {
        let buckets = slots.div_ceil(SLOTS).min(self.sigs.len());
        let mut freed = 0;
        for _ in 0..buckets {
            let b = self.cursor & self.mask;
            self.cursor = self.cursor.wrapping_add(1);
            let Some(sigs) = self.sigs.get_mut(b) else {
                continue;
            };
            // The bucket's occupied slots from one compare of its line:
            // a table sized for its capacity is mostly empty, and a slot
            // at a time cost ~8 instructions each.
            let mut occupied = sigs.occupied();
            while occupied != 0 {
                let i = occupied.trailing_zeros() as usize;
                occupied &= occupied - 1;
                if let (Some(s), Some(e)) = (
                    sigs.0.get_mut(i),
                    self.entries
                        .get_mut(b * SLOTS + i)
                        .filter(|e| e.expired(now)),
                ) {
                    e.sig = 0;
                    *s = 0;
                    freed += 1;
                }
            }
        }
        self.live -= freed;
        self.counters.expirations += freed as u64;
        self.prefetch_signatures = self.live * 4 > self.entries.len();
        freed
    }
}

mod handoff;
mod reclaim;

#[cfg(test)]
mod half_open_tests;
#[cfg(test)]
mod hash_tests;

#[cfg(test)]
mod tests;
