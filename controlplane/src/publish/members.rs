//! A service's backends as a build sees them: each one's id, current
//! health and effective weight, state, and where its packets leave.

use super::*;

/// Where packets for backend `b` leave: a static `mac =` wins (on the port
/// whose subnet holds the backend); otherwise what the kernel resolved;
/// otherwise unresolved (counted drops until it is).
fn egress_of(
    cfg: &Config,
    b: &crate::config::BackendConfig,
    neighbours: Option<&HashMap<IpAddr, Egress>>,
) -> Egress {
    let on_link = || {
        cfg.dataplane
            .ports
            .iter()
            .position(|p| p.on_link(b.address))
            .unwrap_or(0) as u16
    };
    match (b.mac, neighbours.and_then(|n| n.get(&b.address))) {
        (Some(mac), _) => Egress {
            port: on_link(),
            next_hop_mac: Some(mac),
        },
        (None, Some(learned)) => *learned,
        (None, None) => Egress {
            port: on_link(),
            next_hop_mac: None,
        },
    }
}

/// A service's configured backends as a build sees them.
pub(super) struct Members<'c> {
    /// Those with an id, in configuration order.
    pub ids: Vec<BackendId>,
    /// Their configuration and view.
    pub views: Vec<(&'c crate::config::BackendConfig, BackendView)>,
    /// Their states.
    pub states: Vec<BackendState>,
    /// Every configured backend's view (what health changes patch).
    pub all_views: Vec<BackendView>,
}

/// `svc`'s backends with their ids (assigned to new ones; `mark` records
/// each in the build), views and states.
pub(super) fn members<'c>(
    cfg: &Config,
    svc: &'c BackendServiceConfig,
    service_id: ServiceId,
    inputs: &BuildInputs<'_>,
    ids: &mut BackendIds,
    mut mark: impl FnMut(&mut BackendIds, BackendId),
) -> Members<'c> {
    let all_views = backend_views(cfg, svc, usize::from(service_id.0), inputs);
    let mut m = Members {
        ids: Vec::with_capacity(svc.backends.len()),
        views: Vec::with_capacity(svc.backends.len()),
        states: Vec::with_capacity(svc.backends.len()),
        all_views: Vec::new(),
    };
    for (b, view) in svc.backends.iter().zip(&all_views) {
        let Some(id) = ids.get_or_assign(&svc.name, b.address) else {
            // Unreachable: the config's backend limit and the reload
            // check (`Controller::apply`) keep enough ids free.
            crate::error!(
                "sluice: no backend id left for {} of service {:?}; it gets no traffic",
                b.address,
                svc.name
            );
            continue;
        };
        mark(ids, id);
        m.ids.push(id);
        m.views.push((b, *view));
        m.states.push(BackendState {
            id,
            service: service_id,
            address: b.address,
            healthy: view.healthy,
            weight: view.weight,
            pool: b.pool,
            draining_until: None,
            egress: egress_of(cfg, b, inputs.neighbours),
        });
    }
    m.all_views = all_views;
    m
}

/// Current health and effective weight of each backend of `svc`.
fn backend_views(
    cfg: &Config,
    svc: &BackendServiceConfig,
    si: usize,
    inputs: &BuildInputs<'_>,
) -> Vec<BackendView> {
    let weighted = svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev;
    let check = svc.health_check.map(|i| &cfg.health_checks[i]);
    svc.backends
        .iter()
        .map(|b| {
            let status = check
                .zip(inputs.health)
                .and_then(|(hc, h)| backend_status(h, cfg, si, hc, b.address));
            let healthy = match (check, inputs.health, status) {
                (None, _, _) | (_, None, _) => true,
                (Some(_), Some(_), Some(s)) => s.state.healthy,
                (Some(hc), Some(_), None) => hc.initially_healthy,
            };
            // HC-7: under WEIGHTED_MAGLEV the probe's last reported weight
            // (initially 1); otherwise the configured static weight.
            let weight = if weighted {
                status.map_or(1, |s| s.state.weight)
            } else {
                b.weight
            };
            BackendView {
                pool: b.pool,
                healthy,
                weight,
                zone: b.zone,
            }
        })
        .collect()
}
