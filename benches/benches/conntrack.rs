//! Conntrack shard vs DPDK's `rte_hash` (the peer), same 40-byte keys,
//! same slot counts, one thread:
//!
//! - `hit`: lookup of 32 present keys (random order) per iteration;
//! - `fill`: miss + insert, measured as filling an empty table with N keys
//!   (the average over loads 0 … N/slots), per key.
//!
//! Sizes 100k and 1M entries; 10M with `CONNTRACK_BENCH_10M=1` (≈ 1.1 GB
//! for the shard and as much EAL memory for rte_hash). After criterion,
//! prints ns/op for both and the ratio shard / rte_hash, and bytes per entry.
//!
//! `cargo bench -p sluice-benches --bench conntrack`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use dataplane::dpdk::rte_hash::RteHash;
use dataplane::dpdk::Eal;
use sluice_core::conntrack::{Entry, Shard, TrackKey};
use sluice_core::ids::BackendId;
use sluice_core::time::Millis;

const BATCH: usize = 32;

fn key(i: u64) -> TrackKey {
    // IPv4 5-tuple-shaped: client address and port vary, VIP fixed.
    TrackKey {
        src: [0, 0x0a00_0000 | (i >> 8)],
        dst: [0, 0xcb00_710a],
        meta: (i & 0xff) << 16 | 80 | (6 << 32) | (2 << 40),
    }
}

fn bytes(k: &TrackKey) -> [u8; 40] {
    let mut out = [0u8; 40];
    for (chunk, w) in out
        .chunks_exact_mut(8)
        .zip([k.src[0], k.src[1], k.dst[0], k.dst[1], k.meta])
    {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    out
}

fn entry(k: TrackKey) -> Entry {
    Entry::new(k, BackendId(1), 0, Millis(1), 60_000)
}

fn fill_shard(s: &mut Shard, keys: &[TrackKey]) {
    for k in keys {
        let h = s.hash(k);
        let _ = s.insert_absent(entry(*k), h, Millis(1));
    }
}

fn fill_rte(t: &mut RteHash<40>, keys: &[[u8; 40]]) {
    for k in keys {
        let _ = t.insert(k, 1);
    }
}

/// A fixed pseudo-random order over 0..n (xorshift), for lookups.
fn order(n: usize, len: usize) -> Vec<usize> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        })
        .collect()
}

struct Row {
    n: usize,
    shard_hit: f64,
    rte_hit: f64,
    shard_fill: f64,
    rte_fill: f64,
}

fn per_op(d: Duration, ops: usize) -> f64 {
    d.as_nanos() as f64 / ops as f64
}

fn run_size(c: &mut Criterion, eal: &Eal, n: usize) -> Row {
    // A shard sized for N connections, as the worker builds it; rte_hash
    // gets the same number of slots.
    let mut shard = Shard::with_capacity_and_seed(n, 42);
    let slots = shard.slots();
    let keys: Vec<TrackKey> = (0..n as u64).map(key).collect();
    let kb: Vec<[u8; 40]> = keys.iter().map(bytes).collect();
    let mut rte = RteHash::<40>::new(eal, &format!("ct_bench_{n}"), slots as u32)
        .expect("rte_hash_create (EAL memory: -m)");

    // Fill once, timed by hand (the ratio below), then by criterion.
    let t = Instant::now();
    fill_shard(&mut shard, &keys);
    let shard_fill = per_op(t.elapsed(), n);
    let t = Instant::now();
    fill_rte(&mut rte, &kb);
    let rte_fill = per_op(t.elapsed(), n);
    assert_eq!(shard.len(), n, "shard holds every key");
    assert_eq!(rte.len(), n, "rte_hash holds every key");

    let idx = order(n, 1 << 16);
    let mut g = c.benchmark_group(format!("conntrack_{}k", n / 1000));
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut at = 0usize;
    g.bench_function("hit/shard", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                at = (at + 1) & 0xffff;
                let k = &keys[idx[at]];
                let h = shard.hash(k);
                black_box(shard.lookup(k, h, Millis(2)));
            }
        })
    });
    g.bench_function("hit/rte_hash", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                at = (at + 1) & 0xffff;
                black_box(rte.get(&kb[idx[at]]));
            }
        })
    });
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.bench_function("fill/shard", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                shard.clear();
                let t = Instant::now();
                fill_shard(&mut shard, &keys);
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
    // rte_hash has no cheap reset here (rte_hash_reset is not wrapped), so
    // its fill is the one timed above; the shard's first fill is too, for
    // a like-for-like ratio.

    // Hit, by hand, for the printed ratio.
    let reps = 2_000_000;
    let t = Instant::now();
    for i in 0..reps {
        let k = &keys[idx[i & 0xffff]];
        let h = shard.hash(k);
        black_box(shard.lookup(k, h, Millis(2)));
    }
    let shard_hit = per_op(t.elapsed(), reps);
    let t = Instant::now();
    for i in 0..reps {
        black_box(rte.get(&kb[idx[i & 0xffff]]));
    }
    let rte_hit = per_op(t.elapsed(), reps);
    Row {
        n,
        shard_hit,
        rte_hit,
        shard_fill,
        rte_fill,
    }
}

fn main() {
    let prefix = format!("--file-prefix=sluice-bench-ct-{}", std::process::id());
    let big = std::env::var_os("CONNTRACK_BENCH_10M").is_some();
    let mem = if big { "4096" } else { "2048" };
    let args: Vec<String> = [
        "--no-huge",
        "-m",
        mem,
        "--no-pci",
        "--log-level=error",
        &prefix,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let eal = Eal::init(&args).expect("EAL init");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut sizes = vec![100_000, 1_000_000];
    if big {
        sizes.push(10_000_000);
    }
    let rows: Vec<Row> = sizes.iter().map(|&n| run_size(&mut c, &eal, n)).collect();
    c.final_summary();
    println!(
        "\nconntrack: {} bytes per slot (64-byte entry + 4-byte signature); slots = Shard::slots_for(N) = next_pow2(1.25 × N)",
        Shard::bytes_per_slot()
    );
    println!(
        "entries  | hit ns: shard / rte_hash = ratio | miss+insert ns: shard / rte_hash = ratio"
    );
    for r in &rows {
        println!(
            "{:>8} | {:6.1} / {:6.1} = {:.2} | {:6.1} / {:6.1} = {:.2}",
            r.n,
            r.shard_hit,
            r.rte_hit,
            r.shard_hit / r.rte_hit,
            r.shard_fill,
            r.rte_fill,
            r.shard_fill / r.rte_fill
        );
    }
    drop(eal);
    let _ = std::fs::remove_dir_all(format!(
        "/var/run/dpdk/sluice-bench-ct-{}",
        std::process::id()
    ));
}
