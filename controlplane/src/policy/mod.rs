//! Eligibility (SPEC §4, EL-1 … EL-7, FO-1/FO-2) and zonal affinity
//! (SPEC §6, ZA-1 … ZA-10): pure functions from the backends' current
//! health and weight to the sets the Maglev tables are built from.
//!
//! Everything here works on indices into the service's backend list, so the
//! caller keeps ids, addresses and egress data; the policy never allocates
//! anything but the index vectors it returns.

mod zonal;

pub use zonal::{client_variants, zonal_set};

use crate::config::{FailoverPolicyConfig, Pool};

/// What the policy needs to know about one backend right now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BackendView {
    pub pool: Pool,
    pub healthy: bool,
    /// Effective weight: the health check's reported weight under
    /// `WEIGHTED_MAGLEV`, the configured weight otherwise.
    pub weight: u16,
    /// Index into the config's zones.
    pub zone: Option<usize>,
}

/// A service's policy settings.
#[derive(Copy, Clone, Debug, PartialEq, Default)]
pub struct PolicyParams {
    /// `locality_lb_policy = WEIGHTED_MAGLEV` (EL-2, EL-5, EL-6).
    pub weighted: bool,
    /// Present → EL-3 … EL-6, absent → EL-1/EL-2.
    pub failover: Option<FailoverPolicyConfig>,
    pub zonal: crate::config::ZonalAffinityConfig,
}

/// The original eligible set (SPEC §6 vocabulary) of a service.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Eligible {
    /// Indices into the service's backends, ascending.
    pub members: Vec<usize>,
    /// The pool the set is drawn from (ZA-2, CT-11); None when empty.
    pub pool: Option<Pool>,
}

/// EL-1 … EL-7: the original eligible set.
pub fn eligible(params: &PolicyParams, backends: &[BackendView]) -> Eligible {
    let pick = |pred: &dyn Fn(&BackendView) -> bool| -> Vec<usize> {
        backends
            .iter()
            .enumerate()
            .filter(|(_, b)| pred(b))
            .map(|(i, _)| i)
            .collect()
    };
    let first_non_empty = |tiers: &[&dyn Fn(&BackendView) -> bool]| -> Vec<usize> {
        tiers
            .iter()
            .map(|t| pick(*t))
            .find(|s| !s.is_empty())
            .unwrap_or_default()
    };
    let members = match (&params.failover, params.weighted) {
        // EL-1.
        (None, false) => first_non_empty(&[&|b| b.healthy, &|_| true]),
        // EL-2 with the EL-7 ranking.
        (None, true) => first_non_empty(&[
            &|b| b.healthy && b.weight > 0,
            &|b| !b.healthy && b.weight > 0,
            &|b| b.healthy && b.weight == 0,
            &|b| !b.healthy && b.weight == 0,
        ]),
        (Some(fo), weighted) => {
            // EL-5: under weights, "healthy" reads "healthy and weight > 0".
            let good = |b: &BackendView| b.healthy && (!weighted || b.weight > 0);
            if backends.iter().any(good) {
                el3(fo, backends, &good)
            } else if fo.drop_traffic_if_unhealthy {
                // EL-4 / EL-6: nothing is eligible, new connections drop.
                Vec::new()
            } else if !weighted {
                // EL-4: all primaries, failover backends excluded.
                pick(&|b| b.pool == Pool::Primary)
            } else {
                // EL-6.
                use Pool::{Failover as F, Primary as P};
                first_non_empty(&[
                    &|b| b.pool == P && !b.healthy && b.weight > 0,
                    &|b| b.pool == F && !b.healthy && b.weight > 0,
                    &|b| b.pool == P && b.healthy && b.weight == 0,
                    &|b| b.pool == F && b.healthy && b.weight == 0,
                    &|b| b.pool == P && !b.healthy && b.weight == 0,
                    &|b| b.pool == F && !b.healthy && b.weight == 0,
                ])
            }
        }
    };
    let pool = members.first().map(|&i| backends[i].pool);
    Eligible { members, pool }
}

/// EL-3 (and EL-5 through `good`), given at least one good backend.
fn el3(
    fo: &FailoverPolicyConfig,
    backends: &[BackendView],
    good: &dyn Fn(&BackendView) -> bool,
) -> Vec<usize> {
    let of = |pool: Pool| -> Vec<usize> {
        backends
            .iter()
            .enumerate()
            .filter(|(_, b)| b.pool == pool && good(b))
            .map(|(i, _)| i)
            .collect()
    };
    let primaries = of(Pool::Primary);
    let failovers = of(Pool::Failover);
    if primaries.is_empty() {
        return failovers; // EL-3.1
    }
    if failovers.is_empty() || fo.failover_ratio == 0.0 {
        return primaries; // EL-3.2, EL-3.3
    }
    // The denominator is all configured primaries (EL-5).
    let all_primaries = backends.iter().filter(|b| b.pool == Pool::Primary).count();
    if primaries.len() as f64 / all_primaries as f64 >= fo.failover_ratio {
        primaries // EL-3.4
    } else {
        failovers // EL-3.5
    }
}

#[cfg(test)]
mod tests;
