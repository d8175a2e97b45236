//! A reload's build when it changed some services in place (AP-5): the
//! published snapshot with only those services built again. At 10,000
//! services a full build looks up every backend's id, probe state and
//! draining state; a reload that changed one weight needs one service's.
//! What it gives is what a full build of the same configuration gives
//! (the tests build both ways and compare).

use super::*;

/// The services of `new` that differ from `old`'s, when a reload changed
/// only services, in place: the same services by name at the same
/// positions (a service's position is its id and what rules name), the
/// same ports, zones, health checks and flow key (what a service's state
/// or the snapshot depends on besides the service). Unchanged services
/// are the same items (`Arc`): `config::Loader` keeps the items of
/// tables whose text did not change. None when the reload changed more,
/// or a quarter of the services or more (a full build then costs about
/// the same).
pub fn changed_in_place(old: &Config, new: &Config) -> Option<Vec<usize>> {
    if old.dataplane != new.dataplane
        || old.zones != new.zones
        || old.health_checks != new.health_checks
        || old.backend_services.len() != new.backend_services.len()
    {
        return None;
    }
    let mut changed = Vec::new();
    for (i, (a, b)) in old
        .backend_services
        .iter()
        .zip(&new.backend_services)
        .enumerate()
    {
        if Arc::ptr_eq(a, b) {
            continue;
        }
        if a.name != b.name || ServiceId::from_index(i).is_none() {
            return None;
        }
        changed.push(i);
    }
    (changed.len() < new.backend_services.len().div_ceil(4)).then_some(changed)
}

/// The snapshot of `cfg` built from `prev`, the published one (with its
/// reports), whose configuration differs from `cfg` only in the services
/// `changed` ([`changed_in_place`]): those services are built again
/// (ids, draining, views, tables), everything else is `prev`'s. None,
/// having changed nothing, when the memory of the last build does not
/// cover every service or a draining deadline has passed (a full build
/// does what is due).
#[allow(clippy::too_many_arguments)]
pub fn rebuild_changed_services(
    prev: &ForwardingState,
    prev_reports: &[ServiceReport],
    cfg: &Config,
    changed: &[usize],
    ids: &mut BackendIds,
    memory: &mut PolicyMemory,
    inputs: &BuildInputs<'_>,
    generation: u64,
) -> Option<(ForwardingState, Vec<ServiceReport>)> {
    let n = cfg.backend_services.len();
    let covered = prev.services.len() == n
        && prev_reports.len() == n
        && memory.views.len() == n
        && memory.live.len() == n
        && changed
            .iter()
            .all(|&si| si < n && ServiceId::from_index(si).is_some());
    if !covered || memory.next_deadline().is_some_and(|d| d <= inputs.now) {
        return None;
    }
    let mut state = prev.clone();
    state.generation = generation;
    state.rules = match &inputs.rules {
        Some(kept) => Arc::clone(kept),
        None => Arc::new(rule_table(cfg, memory)),
    };
    let mut reports = prev_reports.to_vec();
    for &si in changed {
        let svc = &cfg.backend_services[si];
        let Some(service_id) = ServiceId::from_index(si) else {
            continue; // checked above
        };
        ids.retain_service(svc);
        let (name, last) = std::mem::take(&mut memory.live[si]);
        drain_removed(&name, last, svc, inputs.now, &mut memory.draining);
        let m = members(cfg, svc, service_id, inputs, ids, |ids, id| {
            ids.keep(id, generation);
        });
        let before = std::mem::take(&mut state.services[si].backends);
        for id in &before {
            if let Some(slot) = state.backends.get_mut(id.index()) {
                *slot = None;
            }
        }
        let started = Instant::now();
        let (mut next, mut report) = service_state(cfg, svc, &m.ids, &m.views, memory);
        report.build_seconds = started.elapsed().as_secs_f64();
        for b in &m.states {
            put(&mut state.backends, b.clone());
        }
        // CT-10: removed backends listed after the configured ones until
        // their deadline, in the order a full build lists them.
        for (&id, (_, b)) in memory.draining.iter().filter(|(_, (s, _))| *s == svc.name) {
            ids.keep(id, generation);
            next.backends.push(id);
            let mut b = b.clone();
            b.service = service_id;
            put(&mut state.backends, b);
        }
        next.quic_lb = quic_routing(svc, &next, &m.views, memory);
        let listed: HashSet<BackendId> = next.backends.iter().copied().collect();
        for id in before {
            if !listed.contains(&id) {
                ids.leave(id, generation);
            }
        }
        memory.views[si] = m.all_views;
        memory.live[si] = (svc.name.clone(), m.states);
        state.services[si] = next;
        reports[si] = report;
    }
    state.backends.resize(ids.high_water() as usize, None);
    state.lane_backends = state.build_lane_backends();
    Some((state, reports))
}

/// `b` at its id's place in the backend table.
fn put(table: &mut Vec<Option<BackendState>>, b: BackendState) {
    let i = b.id.index();
    if table.len() <= i {
        table.resize(i + 1, None);
    }
    table[i] = Some(b);
}

#[cfg(test)]
mod tests;
