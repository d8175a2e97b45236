//! Placement: home slots.

use super::*;

fn key(i: u64) -> TrackKey {
    TrackKey {
        src: [0, 0x0a00_0000 | i],
        dst: [0, 0xcb00_710a],
        meta: ((1024 + i % 60_000) << 16) | 80 | (6 << 32) | (2 << 40),
    }
}

/// Share of `n` inserted keys found in their home slot (one line).
fn at_home(s: &Shard, n: u64) -> f64 {
    let home = (0..n)
        .filter(|&i| {
            let k = key(i);
            let (sig, b1) = s.sig_and_bucket(s.hash(&k));
            let e = &s.entries[Shard::home(b1, sig)];
            e.sig & !HALF_OPEN == sig && e.key == k
        })
        .count();
    home as f64 / n as f64
}

/// Home slots (a CT-3 hit in one line): nearly every key of a table a
/// tenth full is found in its home slot, three in four of a half-full
/// one (a shard at its configured capacity, `slots_for`, is at most
/// 80 % full) and about half the keys of a 95 %-full one (by chance
/// it would be 1 in 16); every key stays
/// findable. Guards the placement, which lookups do not depend on for
/// correctness, only for speed.
#[test]
fn most_keys_live_in_their_home_slot() {
    for (fill, want) in [(0.1, 0.9), (0.5, 0.7), (0.8, 0.55), (0.95, 0.45)] {
        let mut s = Shard::with_capacity_and_seed(1 << 15, 7);
        assert_eq!(s.slots(), 1 << 16);
        let n = (fill * s.slots() as f64) as u64;
        let mut stored = 0;
        for i in 0..n {
            let k = key(i);
            let h = s.hash(&k);
            stored += u64::from(
                s.insert_absent(
                    Entry::new(k, BackendId(1), 0, Millis(1), 60_000),
                    h,
                    Millis(1),
                )
                .is_ok(),
            );
        }
        let share = at_home(&s, n);
        eprintln!("fill {fill}: {share:.3} at home, {stored} of {n} stored");
        assert!(share >= want, "fill {fill}: {share:.3} at home");
        for i in 0..n {
            let k = key(i);
            let h = s.hash(&k);
            assert!(s.lookup(&k, h, Millis(2)).is_some() || stored < n);
        }
    }
}

/// The signature line requested with the home entry (CT-3's lookahead):
/// off while a quarter of the slots or fewer hold entries, on above, as
/// the once-a-millisecond sweep finds it; off again when expiry empties
/// the shard.
#[test]
fn signature_lines_are_requested_early_only_in_a_shard_over_a_quarter_full() {
    let mut s = Shard::with_capacity_and_seed(1 << 12, 3);
    let quarter = (s.slots() / 4) as u64;
    let insert = |s: &mut Shard, range: std::ops::Range<u64>| {
        for i in range {
            let k = key(i);
            let h = s.hash(&k);
            assert!(s
                .insert_absent(
                    Entry::new(k, BackendId(1), 0, Millis(1), 1_000),
                    h,
                    Millis(1)
                )
                .is_ok());
        }
    };
    insert(&mut s, 0..quarter);
    s.sweep(Millis(2), 0);
    assert!(!s.prefetch_signatures, "{} of {} slots", s.len(), s.slots());
    insert(&mut s, quarter..quarter + 1);
    s.sweep(Millis(2), 0);
    assert!(s.prefetch_signatures, "{} of {} slots", s.len(), s.slots());
    // Every entry lapses (CT-5) and a whole sweep frees it.
    s.sweep(Millis(5_000), s.slots());
    assert!(s.is_empty());
    assert!(!s.prefetch_signatures);
}
