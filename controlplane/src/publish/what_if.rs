//! "What if these backends were unhealthy?" on a copy of a snapshot:
//! `sluice explain --unhealthy`, live (the published snapshot) and
//! offline (the snapshot built under assumed health) alike. The copy goes
//! through [`rebuild_services`], the path a probe's verdict takes in the
//! running appliance, so eligibility, failover (FO-*, with its CT-11
//! epoch) and the Maglev tables come out as they would after those
//! probes failed. Nothing is published: the caller owns the copy.

use std::collections::HashSet;
use std::net::IpAddr;

use sluice_core::snapshot::ForwardingState;

use super::{rebuild_services, HealthChange, PolicyMemory, ServiceReport};
use crate::config::Config;
use crate::policy::BackendView;

/// `state` (built from `cfg`, with `reports`) once every backend whose
/// address is in `addresses` turned unhealthy; the others keep their
/// health and weight. Services with no such backend keep their tables.
pub fn assume_unhealthy(
    state: &ForwardingState,
    reports: &[ServiceReport],
    cfg: &Config,
    addresses: &HashSet<IpAddr>,
) -> (ForwardingState, Vec<ServiceReport>) {
    let mut memory = memory_of(state, reports, cfg);
    let changes: Vec<HealthChange> = cfg
        .backend_services
        .iter()
        .enumerate()
        .flat_map(|(si, svc)| {
            let views = &memory.views;
            svc.backends
                .iter()
                .enumerate()
                .filter(|(_, b)| addresses.contains(&b.address))
                .filter_map(move |(position, _)| {
                    let view = views.get(si)?.get(position)?;
                    Some(HealthChange {
                        service: si,
                        position,
                        healthy: false,
                        weight: view.weight,
                    })
                })
        })
        .collect();
    rebuild_services(state, reports, cfg, &mut memory, &changes, state.generation)
}

/// The [`PolicyMemory`] a build of `state` left behind, as far as a health
/// change needs it: each configured backend's view (from its published
/// state) and each service's active pool and epoch (from `reports`). A
/// service whose last build had no pool (EL-4) starts again at epoch 0.
fn memory_of(state: &ForwardingState, reports: &[ServiceReport], cfg: &Config) -> PolicyMemory {
    let views = cfg
        .backend_services
        .iter()
        .zip(&state.services)
        .map(|(svc, published)| {
            svc.backends
                .iter()
                .zip(&published.backends)
                .map(|(b, &id)| {
                    let st = state.backend(id);
                    BackendView {
                        pool: b.pool,
                        healthy: st.is_none_or(|s| s.healthy),
                        weight: st.map_or(b.weight, |s| s.weight),
                        zone: b.zone,
                    }
                })
                .collect()
        })
        .collect();
    let pools: ahash::AHashMap<_, _> = reports
        .iter()
        .filter_map(|r| Some((r.name.clone(), (r.active_pool?, r.pool_epoch))))
        .collect();
    PolicyMemory {
        pools,
        views,
        ..PolicyMemory::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use crate::publish::{build_forwarding_state_with, BackendIds, BuildInputs};
    use crate::synthetic::{all_healthy, big_config};

    /// The what-if on a published snapshot equals what the running
    /// appliance's own health path (`rebuild_services` with the memory of
    /// its builds) makes of the same failures, and leaves the snapshot it
    /// was given as it was.
    #[test]
    fn what_if_equals_the_appliance_s_health_path() {
        let c = load_str(&big_config(10, 5, 251), "t").unwrap();
        let health = all_healthy(&c);
        let mut memory = PolicyMemory::default();
        let (published, reports) = build_forwarding_state_with(
            &c,
            &[],
            &mut BackendIds::new(),
            &mut memory,
            &BuildInputs::with_health(&health),
            1,
        );
        let down: HashSet<IpAddr> = c.backend_services[4].backends[..2]
            .iter()
            .map(|b| b.address)
            .collect();
        let (what_if, what_if_reports) = assume_unhealthy(&published, &reports, &c, &down);
        let changes: Vec<HealthChange> = (0..2)
            .map(|position| HealthChange {
                service: 4,
                position,
                healthy: false,
                weight: 1,
            })
            .collect();
        let (real, real_reports) =
            rebuild_services(&published, &reports, &c, &mut memory, &changes, 1);
        for (i, (a, b)) in what_if.services.iter().zip(&real.services).enumerate() {
            assert_eq!(a.tables, b.tables, "service {i}");
            assert_eq!(a.pool_epoch, b.pool_epoch, "service {i}");
        }
        for (a, b) in what_if_reports.iter().zip(&real_reports) {
            assert_eq!(
                (&a.eligible, a.active_pool, a.pool_epoch),
                (&b.eligible, b.active_pool, b.pool_epoch)
            );
        }
        let unhealthy =
            |s: &ForwardingState| s.backends.iter().flatten().filter(|b| !b.healthy).count();
        assert_eq!(unhealthy(&what_if), 2);
        assert_eq!(unhealthy(&published), 0, "the given snapshot is untouched");
        assert_ne!(what_if.services[4].tables, published.services[4].tables);
    }
}
