//! Table-driven tests named by SPEC rule id.

use super::*;
use crate::config::{Spillover, ZonalAffinityConfig};
use crate::maglev::{build_table, MaglevBackend};
use sluice_core::ids::BackendId;

const P: Pool = Pool::Primary;
const F: Pool = Pool::Failover;

fn b(pool: Pool, healthy: bool, weight: u16) -> BackendView {
    BackendView {
        pool,
        healthy,
        weight,
        zone: None,
    }
}

fn fo(ratio: f64, drop: bool) -> PolicyParams {
    PolicyParams {
        failover: Some(FailoverPolicyConfig {
            failover_ratio: ratio,
            drop_traffic_if_unhealthy: drop,
            connection_drain_on_failover: true,
        }),
        ..Default::default()
    }
}

fn weighted(mut p: PolicyParams) -> PolicyParams {
    p.weighted = true;
    p
}

#[test]
fn el_1_unweighted_no_failover() {
    let p = PolicyParams::default();
    let cases: &[(&[BackendView], &[usize])] = &[
        (&[b(P, true, 1), b(P, false, 1), b(P, true, 1)], &[0, 2]),
        (&[b(P, false, 1), b(P, false, 1)], &[0, 1]),
        (&[], &[]),
    ];
    for (bs, want) in cases {
        assert_eq!(eligible(&p, bs).members, *want, "{bs:?}");
    }
}

#[test]
fn el_2_and_el_7_weighted_ranking() {
    let p = weighted(PolicyParams::default());
    let cases: &[(&[BackendView], &[usize])] = &[
        // (a) healthy & w>0
        (&[b(P, true, 3), b(P, false, 3), b(P, true, 0)], &[0]),
        // (b) unhealthy & w>0 beats healthy & w=0
        (&[b(P, false, 3), b(P, true, 0)], &[0]),
        // (c) healthy & w=0
        (&[b(P, false, 0), b(P, true, 0)], &[1]),
        // (d) unhealthy & w=0
        (&[b(P, false, 0), b(P, false, 0)], &[0, 1]),
    ];
    for (bs, want) in cases {
        assert_eq!(eligible(&p, bs).members, *want, "{bs:?}");
    }
}

#[test]
fn el_3_fo_1_failover_ordering() {
    // (ratio, backends, expected, case)
    let cases: &[(f64, &[BackendView], &[usize], &str)] = &[
        (
            0.5,
            &[b(P, false, 1), b(F, true, 1), b(F, false, 1)],
            &[1],
            "3.1 no healthy primary",
        ),
        (
            0.9,
            &[b(P, true, 1), b(P, false, 1), b(F, false, 1)],
            &[0],
            "3.2 no healthy failover",
        ),
        (
            0.0,
            &[b(P, true, 1), b(P, false, 1), b(P, false, 1), b(F, true, 1)],
            &[0],
            "3.3 ratio 0",
        ),
        (
            0.5,
            &[b(P, true, 1), b(P, false, 1), b(F, true, 1)],
            &[0],
            "3.4 1/2 >= 0.5",
        ),
        (
            0.6,
            &[b(P, true, 1), b(P, false, 1), b(F, true, 1), b(F, true, 1)],
            &[2, 3],
            "3.5 1/2 < 0.6",
        ),
    ];
    for (ratio, bs, want, case) in cases {
        let e = eligible(&fo(*ratio, false), bs);
        assert_eq!(e.members, *want, "{case}");
    }
}

#[test]
fn el_4_fo_2_no_healthy_backend_drop_traffic_if_unhealthy() {
    let bs = [b(P, false, 1), b(F, false, 1), b(P, false, 1)];
    let keep = eligible(&fo(0.0, false), &bs);
    assert_eq!(
        keep.members,
        vec![0, 2],
        "all primaries, failovers excluded"
    );
    assert_eq!(keep.pool, Some(P));
    let drop = eligible(&fo(0.0, true), &bs);
    assert!(drop.members.is_empty(), "drop_traffic_if_unhealthy");
    assert_eq!(drop.pool, None);
}

#[test]
fn el_5_weighted_failover_reads_healthy_as_healthy_and_weight_positive() {
    // Two primaries healthy but one at weight 0: 1 good of 2 → 0.5 < 0.75.
    let bs = [b(P, true, 5), b(P, true, 0), b(F, true, 2)];
    assert_eq!(eligible(&weighted(fo(0.75, false)), &bs).members, vec![2]);
    assert_eq!(eligible(&weighted(fo(0.5, false)), &bs).members, vec![0]);
    // Unweighted, the weight-0 primary counts as healthy: 2/2.
    assert_eq!(eligible(&fo(0.75, false), &bs).members, vec![0, 1]);
}

#[test]
fn el_6_weighted_no_good_backend() {
    let p = weighted(fo(0.0, false));
    let cases: &[(&[BackendView], &[usize])] = &[
        (&[b(F, false, 2), b(P, false, 2), b(P, true, 0)], &[1]),
        (&[b(F, false, 2), b(P, true, 0)], &[0]),
        (&[b(F, true, 0), b(P, true, 0), b(P, false, 0)], &[1]),
        (&[b(F, true, 0), b(P, false, 0)], &[0]),
        (&[b(F, false, 0), b(P, false, 0)], &[1]),
        (&[b(F, false, 0)], &[0]),
    ];
    for (bs, want) in cases {
        assert_eq!(eligible(&p, bs).members, *want, "{bs:?}");
    }
    let bs = [b(P, false, 2), b(P, true, 0)];
    assert!(eligible(&weighted(fo(0.0, true)), &bs).members.is_empty());
}

fn zoned(pool: Pool, healthy: bool, zone: usize) -> BackendView {
    BackendView {
        zone: Some(zone),
        ..b(pool, healthy, 1)
    }
}

fn spill(ratio: f64) -> PolicyParams {
    PolicyParams {
        zonal: ZonalAffinityConfig {
            spillover: Spillover::ZonalAffinitySpillCrossZone,
            spillover_ratio: ratio,
        },
        ..Default::default()
    }
}

#[test]
fn za_3_za_4_za_8_worked_example() {
    // 10 primaries: 0..5 in zone 1, 5..10 in zone 2; healthy: all of zone 1,
    // three of zone 2.
    let bs: Vec<_> = (0..10)
        .map(|i| zoned(P, i < 8, if i < 5 { 1 } else { 2 }))
        .collect();
    let p = spill(0.8);
    let orig = eligible(&p, &bs);
    assert_eq!(orig.members.len(), 8);
    assert_eq!(zonal_set(&p, &bs, &orig, Some(1)), vec![0, 1, 2, 3, 4]);
    assert_eq!(zonal_set(&p, &bs, &orig, Some(2)), orig.members);
    // ZA-3: incompatible client → original.
    assert_eq!(zonal_set(&p, &bs, &orig, None), orig.members);
    let variants = client_variants(&p, &bs, &orig, 3);
    assert_eq!(variants.len(), 4);
    assert_eq!(variants[2], vec![0, 1, 2, 3, 4]);
}

#[test]
fn za_2_za_9_match_follows_the_eligible_pool() {
    // Zones A=0, B=1 primaries; C=2, D=3 failovers; client in A.
    let mut bs = vec![
        zoned(P, true, 0),
        zoned(P, true, 1),
        zoned(F, true, 2),
        zoned(F, true, 3),
    ];
    let mut p = spill(0.0);
    p.failover = fo(0.0, false).failover;
    let orig = eligible(&p, &bs);
    assert_eq!(orig.pool, Some(P));
    assert_eq!(zonal_set(&p, &bs, &orig, Some(0)), vec![0], "match in A");
    bs[0].healthy = false;
    bs[1].healthy = false;
    let orig = eligible(&p, &bs);
    assert_eq!(orig.pool, Some(F));
    assert_eq!(
        zonal_set(&p, &bs, &orig, Some(0)),
        vec![2, 3],
        "no match: failover pool"
    );
}

#[test]
fn za_5_stay_within_zone_even_when_unhealthy() {
    let bs = [zoned(P, false, 0), zoned(P, true, 1)];
    let p = PolicyParams {
        zonal: ZonalAffinityConfig {
            spillover: Spillover::ZonalAffinityStayWithinZone,
            spillover_ratio: 0.0,
        },
        ..Default::default()
    };
    let orig = eligible(&p, &bs);
    assert_eq!(zonal_set(&p, &bs, &orig, Some(0)), vec![0]);
    assert_eq!(zonal_set(&p, &bs, &orig, Some(1)), vec![1]);
}

#[test]
fn za_6_spill_ratio_zero_and_za_1_disabled() {
    let bs = [zoned(P, false, 0), zoned(P, true, 0), zoned(P, true, 1)];
    let p = spill(0.0);
    let orig = eligible(&p, &bs);
    assert_eq!(zonal_set(&p, &bs, &orig, Some(0)), vec![1], "1/2 survives");
    let bs2 = [zoned(P, false, 0), zoned(P, true, 1)];
    let orig2 = eligible(&p, &bs2);
    assert_eq!(
        zonal_set(&p, &bs2, &orig2, Some(0)),
        vec![1],
        "I empty → original"
    );
    let off = PolicyParams::default();
    assert_eq!(zonal_set(&off, &bs, &orig, Some(0)), vec![1, 2]);
}

fn shares(weights: &[u16]) -> Vec<f64> {
    let bs: Vec<_> = weights.iter().map(|&w| b(P, true, w)).collect();
    let p = weighted(PolicyParams::default());
    let e = eligible(&p, &bs);
    let mb: Vec<_> = e
        .members
        .iter()
        .map(|&i| MaglevBackend {
            id: BackendId(i as u32),
            key: format!("192.0.2.{i}"),
            weight: u32::from(bs[i].weight),
        })
        .collect();
    let t = build_table(&mb, 65537);
    let mut counts = vec![0usize; weights.len()];
    for s in t.slots.iter() {
        counts[s.0 as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / 65537.0).collect()
}

#[test]
fn mg_3_weights_1_4_and_0_2_6() {
    let s = shares(&[1, 4]);
    assert!(
        (s[0] - 0.20).abs() < 0.001 && (s[1] - 0.80).abs() < 0.001,
        "{s:?}"
    );
    let s = shares(&[0, 2, 6]);
    assert!(
        s[0] == 0.0 && (s[1] - 0.25).abs() < 0.001 && (s[2] - 0.75).abs() < 0.001,
        "{s:?}"
    );
}
