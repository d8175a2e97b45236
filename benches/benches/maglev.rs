//! Maglev table build time (MG-1): the credit-paced weighted
//! builder against the paper's Pseudocode 1, N = 10, 100, 1000 backends at
//! M = 65537 and 655373, in the same run so the ratio is meaningful.
//!
//! Pseudocode 1 materialises the N×M permutation matrix (8 bytes an entry):
//! N = 1000 at M = 655373 would need 5.2 GB, so that one pair is skipped.
//! `weighted` is the same builder with weights spread over 1..=1000.

use controlplane::maglev::{build_table, build_table_reference_pseudocode1, MaglevBackend};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice_core::ids::BackendId;

fn backends(n: u32) -> Vec<MaglevBackend> {
    (0..n)
        .map(|i| MaglevBackend {
            id: BackendId(i),
            key: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            weight: 1,
        })
        .collect()
}

/// The same backends with weights spread over 1..=1000 (HC-7's range).
fn weighted(n: u32) -> Vec<MaglevBackend> {
    let mut bs = backends(n);
    for (i, b) in bs.iter_mut().enumerate() {
        b.weight = 1 + (i as u32 * 379) % 1000;
    }
    bs
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("maglev_build");
    g.sample_size(10);
    g.measurement_time(std::time::Duration::from_secs(3));
    g.warm_up_time(std::time::Duration::from_millis(500));
    for m in [65537u32, 655373] {
        for n in [10u32, 100, 1000] {
            let bs = backends(n);
            let id = format!("N={n}/M={m}");
            g.bench_with_input(BenchmarkId::new("credit_paced", &id), &bs, |b, bs| {
                b.iter(|| build_table(bs, m))
            });
            let ws = weighted(n);
            g.bench_with_input(BenchmarkId::new("weighted", &id), &ws, |b, ws| {
                b.iter(|| build_table(ws, m))
            });
            if u64::from(n) * u64::from(m) <= 100_000_000 {
                g.bench_with_input(BenchmarkId::new("pseudocode1", &id), &bs, |b, bs| {
                    b.iter(|| build_table_reference_pseudocode1(bs, m))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
