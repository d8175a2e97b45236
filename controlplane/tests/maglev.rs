//! Maglev table builder: balance (MG-3), minimal disruption (MG-4),
//! determinism (MG-2) and equivalence with the paper's Pseudocode 1.

use controlplane::maglev::{
    build_table, build_table_reference_pseudocode1, MaglevBackend, Permutations,
};
use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;

const M: u32 = 65537;

fn backend(i: u32, weight: u32) -> MaglevBackend {
    MaglevBackend {
        id: BackendId(i),
        key: format!("192.0.2.{}", 10 + i),
        weight,
    }
}

fn equal(n: u32) -> Vec<MaglevBackend> {
    (0..n).map(|i| backend(i, 1)).collect()
}

fn shares(t: &MaglevTable, ids: u32) -> Vec<f64> {
    let mut counts = vec![0usize; ids as usize];
    for s in t.slots.iter() {
        counts[s.0 as usize] += 1;
    }
    counts
        .iter()
        .map(|&c| c as f64 / t.slots.len() as f64)
        .collect()
}

/// Fraction of slots whose owner changed between `a` and `b`, counting only
/// slots that `a` gave to a backend other than `changed`.
fn moved_excluding(a: &MaglevTable, b: &MaglevTable, changed: BackendId) -> f64 {
    let moved = a
        .slots
        .iter()
        .zip(b.slots.iter())
        .filter(|(x, y)| **x != changed && x != y)
        .count();
    moved as f64 / a.slots.len() as f64
}

/// MG-3: unweighted, each of N backends owns ≈ 1/N.
#[test]
fn mg_3_unweighted_balance() {
    for n in [3u32, 10, 100] {
        let t = build_table(&equal(n), M);
        assert_eq!(t.slots.len(), M as usize);
        let s = shares(&t, n);
        let max = s.iter().cloned().fold(0.0, f64::max);
        let ratio = max * f64::from(n);
        println!("MG-3 N={n}: max share / ideal = {ratio:.5}");
        assert!(ratio < 1.001, "N={n}: {s:?}");
    }
}

/// MG-3: weights 1:4 → 20/80 and 0:2:6 → 0/25/75, within 0.1 percentage point.
#[test]
fn mg_3_weighted_shares_match_the_seed_examples() {
    let t = build_table(&[backend(0, 1), backend(1, 4)], M);
    let s = shares(&t, 2);
    println!("MG-3 weights 1:4 → {:.4} / {:.4}", s[0], s[1]);
    assert!(
        (s[0] - 0.20).abs() < 0.001 && (s[1] - 0.80).abs() < 0.001,
        "{s:?}"
    );

    let t = build_table(&[backend(0, 0), backend(1, 2), backend(2, 6)], M);
    let s = shares(&t, 3);
    println!(
        "MG-3 weights 0:2:6 → {:.4} / {:.4} / {:.4}",
        s[0], s[1], s[2]
    );
    assert_eq!(s[0], 0.0);
    assert!(
        (s[1] - 0.25).abs() < 0.001 && (s[2] - 0.75).abs() < 0.001,
        "{s:?}"
    );

    // 1000:1 still gives the light backend its share (≈ 1/1001).
    let t = build_table(&[backend(0, 1000), backend(1, 1)], M);
    let s = shares(&t, 2);
    assert!((s[1] - 1.0 / 1001.0).abs() < 0.0002, "{s:?}");
}

/// MG-4: removing one backend moves its own slots plus a small slack.
#[test]
fn mg_4_removing_a_backend_moves_little_else() {
    for (n, slack_limit) in [(3u32, 0.005), (10, 0.01), (50, 0.02)] {
        let before = build_table(&equal(n), M);
        let removed = BackendId(n / 2);
        let rest: Vec<_> = equal(n).into_iter().filter(|b| b.id != removed).collect();
        let after = build_table(&rest, M);
        let own = shares(&before, n)[removed.0 as usize];
        let extra = moved_excluding(&before, &after, removed);
        println!(
            "MG-4 N={n}: removed backend owned {own:.4}; other slots moved: {extra:.4} (ideal 0)"
        );
        assert!(after.slots.iter().all(|&s| s != removed));
        assert!(extra < slack_limit, "N={n}: {extra}");
    }
}

/// MG-4: adding a backend and re-weighting one also disturb little else.
#[test]
fn mg_4_adding_and_reweighting_move_little_else() {
    let before = build_table(&equal(10), M);
    let after = build_table(&equal(11), M);
    let extra = moved_excluding(&after, &before, BackendId(10));
    println!("MG-4 add 11th backend: other slots moved {extra:.4} (ideal 0)");
    assert!(extra < 0.01, "{extra}");

    let mut reweighted = equal(10);
    reweighted[4].weight = 2;
    let after = build_table(&reweighted, M);
    let s = shares(&after, 10);
    let changed_moved = before
        .slots
        .iter()
        .zip(after.slots.iter())
        .filter(|(x, y)| x != y && **y != BackendId(4))
        .count() as f64
        / f64::from(M);
    println!(
        "MG-4 re-weight one backend 1→2: its share {:.4} (ideal {:.4}); slots moved between others {changed_moved:.4}",
        s[4],
        2.0 / 11.0
    );
    assert!((s[4] - 2.0 / 11.0).abs() < 0.001);
    assert!(changed_moved < 0.01, "{changed_moved}");
}

/// MG-2: pinned slots: if the permutation hash, the seeds or the filling
/// order change, deployed appliances would disagree with upgraded ones.
#[test]
fn mg_2_table_is_pinned() {
    let t = build_table(&equal(3), 251);
    let first: Vec<u32> = t.slots.iter().take(16).map(|b| b.0).collect();
    assert_eq!(first, PINNED_FIRST_16, "{first:?}");
    let t = build_table(&[backend(0, 1), backend(1, 4)], M);
    let probe: Vec<u32> = [0usize, 1, 2, 1000, 30000, 65536]
        .iter()
        .map(|&i| t.slots[i].0)
        .collect();
    assert_eq!(probe, PINNED_WEIGHTED, "{probe:?}");
    // The whole table, not just a few slots.
    let words: Vec<u64> = t.slots.iter().map(|b| u64::from(b.0)).collect();
    let digest = sluice_core::hash::stable_hash_words(0, &words);
    assert_eq!(digest, PINNED_WEIGHTED_DIGEST, "{digest}");
}

const PINNED_FIRST_16: [u32; 16] = [2, 1, 2, 2, 1, 1, 2, 1, 2, 2, 2, 1, 0, 0, 2, 0];
const PINNED_WEIGHTED: [u32; 6] = [0, 1, 1, 1, 1, 1];
const PINNED_WEIGHTED_DIGEST: u64 = 7_893_816_456_505_695_549;

/// MG-2: the output depends on the set, not on the input order.
#[test]
fn mg_2_input_order_does_not_matter() {
    let mut bs: Vec<_> = (0..20).map(|i| backend(i, 1 + i % 4)).collect();
    let a = build_table(&bs, M);
    bs.reverse();
    assert_eq!(a, build_table(&bs, M));
    bs.swap(3, 17);
    bs.swap(0, 9);
    assert_eq!(a, build_table(&bs, M));
}

/// With equal weights the builder is the paper's Pseudocode 1 over the
/// backends in key order.
#[test]
fn equal_weights_match_reference_pseudocode_1() {
    for n in [1u32, 2, 7, 31] {
        let mut bs = equal(n);
        bs.sort_by(|a, b| a.key.cmp(&b.key));
        for size in [251u32, 65537] {
            assert_eq!(
                build_table(&bs, size),
                build_table_reference_pseudocode1(&bs, size),
                "N={n} M={size}"
            );
        }
    }
}

#[test]
fn empty_and_all_zero_weight_inputs() {
    assert!(build_table(&[], M).slots.is_empty());
    assert!(build_table_reference_pseudocode1(&[], M).slots.is_empty());
    // EL-2 (c)/(d): when the policy hands over only weight-0 backends, they
    // share the table rather than blackholing traffic.
    let t = build_table(&[backend(0, 0), backend(1, 0)], 251);
    let s = shares(&t, 2);
    assert!((s[0] - 0.5).abs() < 0.01, "{s:?}");
}

/// MG-2: tables from kept permutations (the control plane's health path)
/// are `build_table`'s, bit for bit, for any subset and weights, whatever
/// the members' order.
#[test]
fn mg_2_kept_permutations_build_the_same_tables() {
    let members: Vec<MaglevBackend> = (0..200).map(|i| backend(i, 1)).collect();
    let mut ids: Vec<BackendId> = members.iter().map(|b| b.id).collect();
    ids.reverse();
    let key = |id: BackendId| members[id.0 as usize].key.clone();
    let perms = Permutations::new(&ids, key, 4099);
    assert!(perms.fits(&ids, 4099) && !perms.fits(&ids, 251));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..30 {
        let mut chosen: Vec<MaglevBackend> = Vec::new();
        for b in &members {
            let (pick, weight) = (next() % 3 != 0, (next() % 8) as u32);
            if pick {
                chosen.push(MaglevBackend {
                    weight: if round % 5 == 0 { 0 } else { weight },
                    ..b.clone()
                });
            }
        }
        let eligible: Vec<(BackendId, u32)> = chosen.iter().map(|b| (b.id, b.weight)).collect();
        assert_eq!(
            perms.table(&eligible),
            build_table(&chosen, 4099),
            "round {round}"
        );
    }
    assert!(perms.table(&[]).slots.is_empty());
}
