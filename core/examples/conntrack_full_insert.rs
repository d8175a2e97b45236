//! Cost of a conntrack insert into a full shard vs a normal insert (issue
//! 12, SYN floods), one thread, hand-timed (best of 5 runs):
//!
//! - `normal`: miss + insert of N keys into an empty shard sized for N
//!   (`upsert`, as a SYN does), per key;
//! - `full, established`: the same shard filled to its last slot with
//!   established entries, then 200,000 new keys, each of which fails
//!   (`table full`), per key;
//! - `full, half-open`: filled to its last slot with half-open (SYN-only)
//!   entries, then 200,000 new SYNs, each evicting one, per key.
//!
//! `cargo run --release -p sluice-core --example conntrack_full_insert`

use std::hint::black_box;
use std::time::Instant;

use sluice_core::conntrack::{Entry, Shard, TrackKey};
use sluice_core::ids::BackendId;
use sluice_core::time::Millis;

const N: usize = 1_000_000;
const PROBES: u64 = 200_000;

fn key(i: u64) -> TrackKey {
    TrackKey {
        src: [0, 0x0a00_0000 | (i >> 8)],
        dst: [0, 0xcb00_710a],
        meta: (i & 0xff) << 16 | 80 | (6 << 32) | (2 << 40),
    }
}

fn entry(i: u64, half_open: bool) -> Entry {
    let e = Entry::new(key(i), BackendId(1), 0, Millis(1), 60_000);
    if half_open {
        e.half_open()
    } else {
        e
    }
}

/// ns per `upsert` of keys `from..to`.
fn upserts(s: &mut Shard, from: u64, to: u64, half_open: bool) -> f64 {
    let t = Instant::now();
    for i in from..to {
        let e = entry(i, half_open);
        let h = s.hash(&e.key);
        let _ = black_box(s.upsert(e, h, Millis(2)));
    }
    t.elapsed().as_nanos() as f64 / (to - from) as f64
}

fn best(mut f: impl FnMut() -> f64) -> f64 {
    (0..5).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut s = Shard::with_capacity_and_seed(N, 42);
    let slots = s.slots() as u64;
    let normal = best(|| {
        s.clear();
        upserts(&mut s, 0, N as u64, false)
    });
    let mut full = |half_open: bool| {
        s.clear();
        // 4 × slots keys: every bucket pair ends up full.
        upserts(&mut s, 0, 4 * slots, half_open);
        assert_eq!(s.len() as u64, slots, "filled to the last slot");
        let mut next = 4 * slots;
        best(|| {
            next += PROBES;
            upserts(&mut s, next - PROBES, next, half_open)
        })
    };
    let established = full(false);
    let half_open = full(true);
    let c = s.counters;
    println!("shard for {N} connections ({slots} slots)");
    println!("normal insert:                {normal:6.1} ns");
    println!(
        "full, established (fails):    {established:6.1} ns = {:.1} x",
        established / normal
    );
    println!(
        "full, half-open (SYN flood):  {half_open:6.1} ns = {:.1} x   counters {c:?}",
        half_open / normal
    );
}
