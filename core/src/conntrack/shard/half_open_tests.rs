//! Half-open entries (SYN floods; CT-1, CT-5): their own
//! timeout, eviction before failure (oldest first, never an established
//! entry), the bound on the work of an insert into a full bucket pair, and
//! the shard's invariants under random SYN, completion, data and expiry.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

impl Shard {
    /// The shard's invariants: every entry repeats its slot's stored
    /// signature (half-open mark included), `live` counts the occupied
    /// slots, and every entry sits in one of its key's two buckets under
    /// its key's signature.
    fn check_invariants(&self) -> Result<(), String> {
        let mut live = 0;
        for (slot, e) in self.entries.iter().enumerate() {
            let stored = self.sigs[slot / SLOTS].0[slot % SLOTS];
            if e.sig != stored {
                return Err(format!("slot {slot}: entry {:#x} array {stored:#x}", e.sig));
            }
            if stored == 0 {
                continue;
            }
            live += 1;
            let (sig, b1, b2) = self.candidates(self.hash(&e.key));
            if stored & !HALF_OPEN != sig {
                return Err(format!("slot {slot}: signature is not its key's"));
            }
            if slot / SLOTS != b1 && slot / SLOTS != b2 {
                return Err(format!("slot {slot}: outside its key's buckets"));
            }
        }
        if live != self.live {
            return Err(format!("live {} but {live} occupied", self.live));
        }
        Ok(())
    }
}

fn key(i: u64) -> TrackKey {
    TrackKey {
        src: [0, 0x0a00_0000 | i],
        dst: [0, 0xcb00_710a],
        meta: ((1024 + i % 60_000) << 16) | 80 | (6 << 32) | (2 << 40),
    }
}

const IDLE: u32 = 60_000;
const HALF_OPEN_MS: u32 = 5_000;

/// What a SYN (half-open, short timeout) or another packet writes.
fn put(s: &mut Shard, i: u64, syn: bool, at: u64) -> Result<usize, Full> {
    let e = if syn {
        Entry::new(key(i), BackendId(i as u32), 0, Millis(at), HALF_OPEN_MS).half_open()
    } else {
        Entry::new(key(i), BackendId(i as u32), 0, Millis(at), IDLE)
    };
    let h = s.hash(&e.key);
    s.upsert(e, h, Millis(at))
}

/// A packet of `i` hitting its entry, as `session` refreshes it.
fn hit(s: &mut Shard, i: u64, syn: bool, at: u64) -> bool {
    let k = key(i);
    let h = s.hash(&k);
    let Some(slot) = s.lookup(&k, h, Millis(at)) else {
        return false;
    };
    s.refresh(slot, BackendId(i as u32), 0, Millis(at), IDLE, syn);
    true
}

fn present(s: &Shard, i: u64) -> Option<&Entry> {
    let k = key(i);
    s.find(&k, s.hash(&k)).and_then(|slot| s.entry(slot))
}

#[test]
fn a_half_open_entry_lives_for_its_own_timeout_until_a_non_syn_completes_it() {
    let mut s = Shard::with_capacity_and_seed(1024, 3);
    for i in 0..3 {
        put(&mut s, i, true, 0).unwrap();
        assert!(present(&s, i).unwrap().is_half_open());
    }
    // 1: the handshake's ACK completes it; 2: a retransmitted SYN keeps
    // it half-open (and its short timeout).
    assert!(hit(&mut s, 1, false, 100));
    assert!(hit(&mut s, 2, true, 1_000));
    assert!(!present(&s, 1).unwrap().is_half_open());
    assert_eq!(present(&s, 1).unwrap().idle_timeout_ms, IDLE);
    assert!(present(&s, 2).unwrap().is_half_open());
    s.check_invariants().unwrap();

    let lookup = |s: &mut Shard, i: u64, at: u64| {
        let k = key(i);
        let h = s.hash(&k);
        s.lookup(&k, h, Millis(at)).is_some()
    };
    assert!(
        !lookup(&mut s, 0, u64::from(HALF_OPEN_MS)),
        "SYN only: gone after 5 s"
    );
    assert!(lookup(&mut s, 2, u64::from(HALF_OPEN_MS) + 999));
    assert!(!lookup(&mut s, 2, 1_000 + u64::from(HALF_OPEN_MS)));
    assert!(
        lookup(&mut s, 1, 100 + u64::from(IDLE) - 1),
        "completed: idle timeout"
    );
    assert_eq!(s.counters.expirations, 2);
    s.check_invariants().unwrap();

    // A sweep reclaims half-open entries by their own timeout too.
    put(&mut s, 7, true, 70_000).unwrap();
    put(&mut s, 8, false, 70_000).unwrap();
    let freed = s.sweep(Millis(70_000 + u64::from(HALF_OPEN_MS)), s.slots());
    assert_eq!(freed, 2, "entry 7 and the long-idle entry 1");
    assert!(present(&s, 8).is_some());
    s.check_invariants().unwrap();
}

/// A new SYN for a key whose entry is established makes it half-open
/// again (CT-1: a new connection on the same 5-tuple).
#[test]
fn a_syn_over_an_established_entry_makes_it_half_open() {
    let mut s = Shard::with_capacity_and_seed(1024, 4);
    put(&mut s, 5, false, 0).unwrap();
    assert!(!present(&s, 5).unwrap().is_half_open());
    put(&mut s, 5, true, 10).unwrap();
    assert!(present(&s, 5).unwrap().is_half_open());
    put(&mut s, 5, false, 20).unwrap();
    assert!(!present(&s, 5).unwrap().is_half_open());
    assert_eq!(s.len(), 1);
    s.check_invariants().unwrap();
}

/// One bucket (capacity 1: 16 slots, both candidates the same bucket):
/// 12 established entries and 4 half-open ones of different ages. Each
/// new key replaces the oldest half-open entry; once none is left the
/// insert fails, and no established entry is ever replaced.
#[test]
fn a_full_bucket_gives_up_its_oldest_half_open_entry_never_an_established_one() {
    let mut s = Shard::with_capacity_and_seed(1, 9);
    assert_eq!(s.slots(), SLOTS);
    for i in 0..12 {
        put(&mut s, i, false, 0).unwrap();
    }
    for (i, at) in [(12, 10), (13, 5), (14, 20), (15, 15)] {
        put(&mut s, i, true, at).unwrap();
    }
    assert_eq!(s.len(), SLOTS);
    let mut evicted = Vec::new();
    for n in 0..4 {
        let before: Vec<u64> = (12..16).filter(|&i| present(&s, i).is_some()).collect();
        put(&mut s, 100 + n, n % 2 == 0, 30).unwrap();
        let gone: Vec<u64> = before
            .into_iter()
            .filter(|&i| present(&s, i).is_none())
            .collect();
        assert_eq!(gone.len(), 1);
        evicted.extend(gone);
        s.check_invariants().unwrap();
    }
    // 100 and 102 are half-open themselves but younger than every
    // original one.
    assert_eq!(evicted, [13, 12, 15, 14], "oldest first");
    assert_eq!(s.counters.half_open_evicted, 4);
    // Left: 12 established, 101 and 103, and 100 and 102 half-open.
    put(&mut s, 200, false, 31).unwrap();
    put(&mut s, 201, false, 31).unwrap();
    assert!(present(&s, 100).is_none() && present(&s, 102).is_none());
    assert_eq!(s.counters.half_open_evicted, 6);
    assert_eq!(
        put(&mut s, 202, true, 32),
        Err(Full),
        "nothing half-open left"
    );
    assert_eq!(s.counters.insert_failed, 1);
    for i in (0..12).chain([101, 103, 200, 201]) {
        assert!(present(&s, i).is_some(), "established {i} kept");
    }
    s.check_invariants().unwrap();
}

/// A bucket pair full of half-open entries and expired ones: an expired
/// probe is taken first, and counted as an expiration.
#[test]
fn an_expired_half_open_entry_is_reclaimed_before_a_live_one_is_evicted() {
    let mut s = Shard::with_capacity_and_seed(1, 2);
    for i in 0..15 {
        put(&mut s, i, false, 0).unwrap();
    }
    put(&mut s, 15, true, 0).unwrap();
    let before = s.counters;
    put(&mut s, 16, true, u64::from(HALF_OPEN_MS)).unwrap();
    assert!(present(&s, 15).is_none());
    assert_eq!(s.counters.expirations, before.expirations + 1);
    assert_eq!(s.counters.half_open_evicted, before.half_open_evicted);
    s.check_invariants().unwrap();
}

/// The bound on a failed or evicting insert (a failed insert
/// cost ~7 normal ones, reading up to 32 other buckets' signature lines
/// and 32 entries): a full shard of established entries reads at most
/// `RELOCATION_PROBES` + `EVICTION_PROBES` more lines per insert (other
/// buckets' signature lines, entries read for expiry), one of half-open
/// entries at most `EVICTION_PROBES`, beyond the key's own lines.
#[test]
fn an_insert_into_a_full_pair_reads_a_bounded_number_of_lines() {
    for syn in [false, true] {
        let mut s = Shard::with_capacity_and_seed(4096, 11);
        let slots = s.slots() as u64;
        for i in 0..4 * slots {
            let _ = put(&mut s, i, syn, 0);
        }
        assert_eq!(s.len() as u64, slots, "filled to the last slot");
        let before = s.counters;
        let mut most = 0;
        for i in 4 * slots..4 * slots + 10_000 {
            s.probed.set(0);
            let r = put(&mut s, i, true, 1);
            most = most.max(s.probed.get());
            assert_eq!(r.is_ok(), syn, "evicts a half-open entry, else fails");
        }
        let bound = if syn {
            EVICTION_PROBES
        } else {
            RELOCATION_PROBES + EVICTION_PROBES
        };
        assert!(most <= bound, "syn table {syn}: {most} lines");
        assert_eq!(s.len() as u64, slots);
        if syn {
            assert_eq!(
                s.counters.half_open_evicted - before.half_open_evicted,
                10_000
            );
        } else {
            assert_eq!(s.counters.insert_failed - before.insert_failed, 10_000);
        }
        s.check_invariants().unwrap();
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A SYN of flow i (CT-1: always written).
    Syn(u64),
    /// A non-SYN packet of flow i: hit and refresh, or miss and insert.
    Packet(u64),
    /// A retransmitted SYN hitting flow i's entry.
    SynAgain(u64),
    Advance(u64),
    Sweep(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..700u64).prop_map(Op::Syn),
        3 => (0..700u64).prop_map(Op::Packet),
        1 => (0..700u64).prop_map(Op::SynAgain),
        1 => (0..4_000u64).prop_map(Op::Advance),
        1 => (1..200usize).prop_map(Op::Sweep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random SYNs (more flows than slots), completions, data, time and
    /// sweeps: the invariants hold after every step, and an established
    /// entry disappears only by its idle timeout (a half-open entry is
    /// replaced only by its own flow's SYN, its timeout or an eviction).
    #[test]
    fn invariants_hold_and_established_entries_survive_floods(ops in prop::collection::vec(op(), 1..600)) {
        let mut s = Shard::with_capacity_and_seed(200, 5);
        let mut now = 0u64;
        // Established flows the shard holds, with their last packet.
        let mut established: HashMap<u64, u64> = HashMap::new();
        for o in ops {
            match o {
                Op::Syn(i) => {
                    established.remove(&i);
                    let _ = put(&mut s, i, true, now);
                }
                Op::Packet(i) => {
                    if hit(&mut s, i, false, now) {
                        established.insert(i, now);
                    } else {
                        let k = key(i);
                        let h = s.hash(&k);
                        let e = Entry::new(k, BackendId(i as u32), 0, Millis(now), IDLE);
                        if s.insert_absent(e, h, Millis(now)).is_ok() {
                            established.insert(i, now);
                        }
                    }
                }
                Op::SynAgain(i) => {
                    hit(&mut s, i, true, now);
                    if let Some(seen) = established.get_mut(&i) {
                        *seen = now;
                    }
                }
                Op::Advance(ms) => now += ms,
                Op::Sweep(n) => {
                    s.sweep(Millis(now), n);
                }
            }
            s.check_invariants().map_err(TestCaseError::fail)?;
            established.retain(|_, seen| now - *seen < u64::from(IDLE));
            for (&i, &seen) in &established {
                let e = present(&s, i);
                prop_assert!(e.is_some_and(|e| !e.is_half_open() && e.last_seen() == Millis(seen)),
                    "established flow {} lost or changed: {:?}", i, e);
            }
        }
    }
}
