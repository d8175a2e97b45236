//! Zonal affinity (SPEC §6): the modified eligible set for a client zone.

use super::{BackendView, Eligible, PolicyParams};
use crate::config::Spillover;

/// ZA-2 … ZA-7: the set the hash uses for a client in `client_zone`
/// (None: an incompatible client, ZA-3 → the original set).
pub fn zonal_set(
    params: &PolicyParams,
    backends: &[BackendView],
    original: &Eligible,
    client_zone: Option<usize>,
) -> Vec<usize> {
    let (Some(zone), Some(pool)) = (client_zone, original.pool) else {
        return original.members.clone();
    };
    if params.zonal.spillover == Spillover::ZonalAffinityDisabled {
        return original.members.clone(); // ZA-1 default.
    }
    // ZA-2: the match test covers the whole configured pool the original
    // set was drawn from; ZA-4: matched = those of them in the client's zone.
    let matched: Vec<usize> = backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.pool == pool && b.zone == Some(zone))
        .map(|(i, _)| i)
        .collect();
    if matched.is_empty() {
        return original.members.clone(); // ZA-3: no match.
    }
    let intersection: Vec<usize> = matched
        .iter()
        .copied()
        .filter(|i| original.members.binary_search(i).is_ok())
        .collect();
    match params.zonal.spillover {
        Spillover::ZonalAffinityDisabled => original.members.clone(),
        // ZA-5: stay in zone even when every zonal backend is unhealthy.
        Spillover::ZonalAffinityStayWithinZone => {
            if intersection.is_empty() {
                matched
            } else {
                intersection
            }
        }
        Spillover::ZonalAffinitySpillCrossZone => {
            let ratio = params.zonal.spillover_ratio;
            let computed = intersection.len() as f64 / matched.len() as f64;
            // ZA-6 (r = 0: any survivor keeps traffic in zone) and ZA-7.
            let keep = !intersection.is_empty() && (ratio == 0.0 || computed >= ratio);
            if keep {
                intersection
            } else {
                original.members.clone()
            }
        }
    }
}

/// Every client variant of a service, in snapshot order: index 0 is the
/// no-zone client, index 1 + z the client in zone z (`ServiceState.tables`).
pub fn client_variants(
    params: &PolicyParams,
    backends: &[BackendView],
    original: &Eligible,
    zones: usize,
) -> Vec<Vec<usize>> {
    std::iter::once(None)
        .chain((0..zones).map(Some))
        .map(|z| zonal_set(params, backends, original, z))
        .collect()
}
