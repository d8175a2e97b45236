//! A worker's per-backend counters take 32 MiB of address space (one for
//! every index a backend id can have) but memory only where indexes are
//! in use: the allocation is zeroed by the kernel page by page, never
//! written whole. Alone in its test binary so that no other test's
//! allocations move the process's resident size while it measures.

use sluice_core::stats::WorkerStats;
use sluice_core::BackendId;

/// The process's resident set, in KiB (`/proc/self/statm`, in pages).
fn resident_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm's resident field");
    pages * 4
}

#[test]
fn backend_counters_take_memory_only_for_indexes_in_use() {
    let before = resident_kib();
    let workers: Vec<_> = (0..4).map(|_| WorkerStats::new()).collect();
    // Three indexes far apart in each worker: three pages each.
    for w in &workers {
        for index in [0, 500_000, BackendId::INDEXES as u32 - 1] {
            w.backend_opened(BackendId::new(index, 1), 1, 1500, true);
        }
    }
    let grown = resident_kib().saturating_sub(before);
    for w in &workers {
        assert_eq!(w.backend_packets.get(500_000), 1);
        assert_eq!(w.backend_packets.bytes(BackendId::INDEXES - 1), 1500);
    }
    // Written whole, four workers' counters would be 128 MiB.
    assert!(
        grown < 16 * 1024,
        "four workers' stats grew the resident set by {grown} KiB"
    );
}
