//! Validated config + health → [`ForwardingState`] snapshot (AP-2, MG-5).
//!
//! Per service: the backends' current health and weight (health checks,
//! HC-*) feed the eligibility policy (EL-*, FO-*), whose original set is
//! turned into one table per client-zone variant (ZA-*): `tables[0]` for
//! clients in no zone, `tables[1 + z]` for zone z, only when zonal affinity
//! is on (otherwise one table serves everyone, `ServiceState::table_for`
//! falls back to it). [`PolicyMemory`] carries what must survive between
//! builds: pool epochs (CT-11), backends draining after removal (CT-10),
//! each service's tables and backend views. A full build
//! ([`build_forwarding_state_with`]) is O(backends) and builds only the
//! tables whose inputs changed; a health change ([`rebuild_services`])
//! patches the last snapshot for the services it touches.

use std::collections::{HashMap, HashSet};

use ahash::AHashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use sluice_core::backend::{BackendState, Egress};
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::port::PortState;
use sluice_core::rules::{ForwardingRule, RuleTable};
use sluice_core::service::{ConnectionTracking, ServiceState};
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::RuleCounters;
use sluice_core::time::Millis;
use sluice_core::zones::{Zone, ZoneMap};

use crate::config::{BackendServiceConfig, Config, Fragments, LocalityLbPolicy, Pool, Spillover};
use crate::health::{backend_status, ProbeStatuses};
use crate::policy::{client_variants, eligible, BackendView, PolicyParams};

pub use backend_ids::BackendIds;
pub use changed::{changed_in_place, rebuild_changed_services};
use members::members;
use table_cache::{TableCache, TableInputs};
pub use what_if::assume_unhealthy;

mod backend_ids;
mod changed;
mod members;
mod quic_lb;
mod table_cache;
mod what_if;

/// What the health checks currently say, and what a build must remember.
#[derive(Debug, Default)]
pub struct BuildInputs<'a> {
    /// Probe states (None: no health checking; every backend healthy).
    pub health: Option<&'a ProbeStatuses>,
    /// The dataplane clock now (draining deadlines, CT-10).
    pub now: Millis,
    /// Egress learned from the kernel per backend address (None: no
    /// exception path, so only static `mac =` backends are reachable).
    pub neighbours: Option<&'a HashMap<IpAddr, Egress>>,
    /// The rule table of a configuration whose forwarding rules are the
    /// same as this one's (equal, in the same order): kept instead of
    /// built again from 100,000 rules. Rule counter slots are per name
    /// and never move, so the kept table is the one a build would make.
    pub rules: Option<Arc<RuleTable>>,
}

impl<'a> BuildInputs<'a> {
    /// Inputs of a build that knows the probe states `health` and nothing
    /// else (clock at 0, no neighbours learned).
    pub fn with_health(health: &'a ProbeStatuses) -> Self {
        Self {
            health: Some(health),
            ..Self::default()
        }
    }
}

/// State that outlives one build.
#[derive(Debug, Default)]
pub struct PolicyMemory {
    /// Per service name: last non-empty active pool and its epoch (CT-11).
    pools: AHashMap<String, (Pool, u32)>,
    /// Per service of the last build (config order): its name and its
    /// backends' states in config order, to notice removals (CT-10).
    live: Vec<(String, Vec<BackendState>)>,
    /// Removed backends still draining: service name and state with deadline.
    draining: HashMap<BackendId, (String, BackendState)>,
    /// Each service's tables of the last build, shared while unchanged.
    tables: TableCache,
    /// Per service (config order), its backends' views at the last build,
    /// when every backend had an id; health changes patch them.
    views: Vec<Vec<BackendView>>,
    /// Each rule name's per-rule counter slot, kept for the process's life
    /// so that a rule's packet count only rises across reloads.
    rule_slots: AHashMap<String, u16>,
    /// Each QUIC-LB service's routing, shared while unchanged, and the
    /// server IDs of removed backends while they drain.
    quic: quic_lb::QuicMemory,
}

impl PolicyMemory {
    /// The counter slot of rule `name`: its own from an earlier build, else
    /// the next free one (`RuleCounters::NONE` once all are taken).
    fn rule_slot(&mut self, name: &str) -> u16 {
        if let Some(&slot) = self.rule_slots.get(name) {
            return slot;
        }
        let next = self.rule_slots.len();
        if next >= RuleCounters::SLOTS {
            return RuleCounters::NONE;
        }
        let slot = next as u16;
        self.rule_slots.insert(name.to_string(), slot);
        slot
    }

    /// Maglev tables built so far: a build that reuses a service's tables
    /// adds nothing.
    pub fn tables_built(&self) -> u64 {
        self.tables.built()
    }

    /// QUIC-LB routings built so far: a build that reuses a service's
    /// routing adds nothing.
    pub fn quic_routings_built(&self) -> u64 {
        self.quic.built()
    }

    /// Adds a backend of service `name` that is draining (CT-10) though
    /// this process never had it configured: the process before it was
    /// draining it at its stop (the conntrack hand-off). The next build
    /// lists it like any removed backend until `b.draining_until`.
    pub fn add_draining(&mut self, name: &str, b: BackendState) {
        self.draining.insert(b.id, (name.to_string(), b));
    }

    /// Earliest draining deadline, so the control loop rebuilds then.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.draining
            .values()
            .filter_map(|(_, b)| b.draining_until)
            .min()
    }
}

/// What a build decided per service, for metrics and `sluice status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceReport {
    pub name: String,
    /// Size of the modified eligible set per variant (0: no zone, 1 + z).
    pub eligible: Vec<usize>,
    pub active_pool: Option<Pool>,
    pub pool_epoch: u32,
    pub build_seconds: f64,
}

/// Builds the complete snapshot for `cfg` with every backend healthy and no
/// memory between builds (tests, benches, the first snapshot).
///
/// `port_macs[i]` is port i's own MAC, used when the config sets none.
pub fn build_forwarding_state(
    cfg: &Config,
    port_macs: &[[u8; 6]],
    ids: &mut BackendIds,
    generation: u64,
) -> ForwardingState {
    let mut memory = PolicyMemory::default();
    build_forwarding_state_with(
        cfg,
        port_macs,
        ids,
        &mut memory,
        &BuildInputs::default(),
        generation,
    )
    .0
}

/// Builds the complete snapshot for `cfg` under the current health.
pub fn build_forwarding_state_with(
    cfg: &Config,
    port_macs: &[[u8; 6]],
    ids: &mut BackendIds,
    memory: &mut PolicyMemory,
    inputs: &BuildInputs<'_>,
    generation: u64,
) -> (ForwardingState, Vec<ServiceReport>) {
    ids.retain_config(cfg);
    let ports: Vec<PortState> = cfg
        .dataplane
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| PortState {
            name: p.name.clone(),
            mac: p
                .mac
                .or_else(|| port_macs.get(i).copied())
                .unwrap_or_default(),
            ipv4: p.ipv4.and_then(|c| match c.addr {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            }),
            ipv6: p.ipv6.and_then(|c| match c.addr {
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => None,
            }),
            mtu: p.mtu,
            vlan: p.vlan,
        })
        .collect();

    let mut services = Vec::with_capacity(cfg.backend_services.len());
    let mut reports = Vec::with_capacity(cfg.backend_services.len());
    let mut backends: Vec<(BackendId, BackendState)> = Vec::new();
    let mut live = Vec::with_capacity(cfg.backend_services.len());
    update_draining(cfg, memory, inputs.now);
    let mut draining: HashMap<String, Vec<(BackendId, BackendState)>> = HashMap::new();
    for (id, (name, b)) in &memory.draining {
        draining
            .entry(name.clone())
            .or_default()
            .push((*id, b.clone()));
    }
    memory.views.clear();
    for (si, svc) in cfg.backend_services.iter().enumerate() {
        // Validation bounds the services to the id space; past it a service
        // gets no id and its rules are left out (no_rule), never another's.
        let Some(service_id) = ServiceId::from_index(si) else {
            break;
        };
        let m = members(cfg, svc, service_id, inputs, ids, |ids, id| {
            ids.mark(id, generation);
        });
        backends.extend(m.states.iter().map(|b| (b.id, b.clone())));
        let started = Instant::now();
        let (mut state, mut report) = service_state(cfg, svc, &m.ids, &m.views, memory);
        report.build_seconds = started.elapsed().as_secs_f64();
        memory.views.push(m.all_views);
        live.push((svc.name.clone(), m.states));
        // CT-10: removed backends keep their entries working until their
        // deadline; they stay listed (never in a table) until then.
        for (id, mut b) in draining.remove(svc.name.as_str()).unwrap_or_default() {
            ids.mark(id, generation);
            state.backends.push(id);
            b.service = service_id;
            backends.push((id, b));
        }
        state.quic_lb = quic_routing(svc, &state, &m.views, memory);
        services.push(state);
        reports.push(report);
    }
    ids.sweep(generation);
    let names: HashSet<&str> = cfg
        .backend_services
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    memory.tables.retain(|name| names.contains(name));
    let draining = &memory.draining;
    memory
        .quic
        .retain(|name| names.contains(name), |id| draining.contains_key(id));
    memory.live = live;

    let mut backend_table: Vec<Option<BackendState>> = vec![None; ids.high_water() as usize];
    for (id, state) in backends {
        if let Some(slot) = backend_table.get_mut(id.index()) {
            *slot = Some(state);
        }
    }

    let rules = match &inputs.rules {
        Some(kept) => Arc::clone(kept),
        None => Arc::new(rule_table(cfg, memory)),
    };

    let zones = ZoneMap {
        zones: cfg
            .zones
            .iter()
            .map(|z| Zone {
                name: z.name.clone(),
                subnets: z
                    .client_subnets
                    .iter()
                    .map(|c| (c.addr, c.prefix))
                    .collect(),
            })
            .collect(),
    };

    let mut state = ForwardingState {
        generation,
        rules,
        services,
        backends: backend_table,
        ports,
        zones,
        lane_backends: Default::default(),
        flow_seed: cfg
            .dataplane
            .flow_hash_key
            .as_ref()
            .map_or_else(Default::default, |k| {
                sluice_core::flow::FlowSeed::keyed(&k.0)
            }),
    };
    state.lane_backends = state.build_lane_backends();
    (state, reports)
}

/// One backend's new probe verdict: service index, position in the
/// service's `backend` list, healthy, reported weight (HC-7).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HealthChange {
    pub service: usize,
    pub position: usize,
    pub healthy: bool,
    pub weight: u16,
}

/// Applies `changes` to `prev`, the snapshot built last from the same
/// `cfg`, rebuilding only the services they touch, and the lane records
/// of their backends (health and pool decide what the established lane
/// keeps). Everything else — other services and their tables, rules,
/// ports, egress, prebuilt headers (health changes none of them) — is
/// `prev`'s. The cost is a copy of the backend table plus, per touched
/// service, its eligibility, table and records: no probe lookups, no
/// hashing per backend.
pub fn rebuild_services(
    prev: &ForwardingState,
    prev_reports: &[ServiceReport],
    cfg: &Config,
    memory: &mut PolicyMemory,
    changes: &[HealthChange],
    generation: u64,
) -> (ForwardingState, Vec<ServiceReport>) {
    let mut state = prev.clone();
    state.generation = generation;
    let mut reports = prev_reports.to_vec();
    let mut dirty = std::collections::BTreeSet::new();
    for c in changes {
        let (Some(svc), Some(old)) = (
            cfg.backend_services.get(c.service),
            prev.services.get(c.service),
        ) else {
            continue;
        };
        let (Some(view), Some(&id)) = (
            memory
                .views
                .get_mut(c.service)
                .and_then(|v| v.get_mut(c.position)),
            old.backends.get(c.position),
        ) else {
            continue;
        };
        view.healthy = c.healthy;
        if svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev {
            view.weight = c.weight;
        }
        if let Some(Some(st)) = state.backends.get_mut(id.index()) {
            st.healthy = view.healthy;
            st.weight = view.weight;
            let live = memory.live.get_mut(c.service).and_then(|(_, states)| {
                match states.get(c.position) {
                    Some(s) if s.id == id => states.get_mut(c.position),
                    _ => states.iter_mut().find(|s| s.id == id),
                }
            });
            if let Some(live) = live {
                live.clone_from(st);
            }
        }
        dirty.insert(c.service);
    }
    for &si in &dirty {
        let svc = &cfg.backend_services[si];
        let old = &prev.services[si];
        let configured = svc.backends.len().min(old.backends.len());
        let members = &old.backends[..configured];
        let member_views: Vec<_> = svc
            .backends
            .iter()
            .zip(memory.views[si].iter().copied())
            .collect();
        let started = Instant::now();
        let (mut next, mut report) = service_state(cfg, svc, members, &member_views, memory);
        report.build_seconds = started.elapsed().as_secs_f64();
        // Draining backends (CT-10) stay listed after the configured ones.
        next.backends.extend_from_slice(&old.backends[configured..]);
        let active = memory.pools.get(&svc.name).map(|&(p, _)| p);
        next.quic_lb = memory.quic.repool(svc, old, &next, active, &state.backends);
        state.services[si] = next;
        if let Some(r) = reports.get_mut(si) {
            *r = report;
        }
    }
    // CT-8, CT-11: the lane keeps no entry on a backend that went
    // unhealthy or left the service's active pool.
    state.refresh_lane_backends(dirty);
    (state, reports)
}

/// Moves backends that left the config into the draining set (CT-10) and
/// forgets those whose deadline passed or whose service is gone.
/// Runs before the services are built, so a backend drains from the very
/// snapshot that no longer has it in the config.
fn update_draining(cfg: &Config, memory: &mut PolicyMemory, now: Millis) {
    let services: HashMap<&str, &BackendServiceConfig> = cfg
        .backend_services
        .iter()
        .map(|s| (s.name.as_str(), &**s))
        .collect();
    for (name, states) in std::mem::take(&mut memory.live) {
        let Some(svc) = services.get(name.as_str()) else {
            continue; // the whole service left: nothing can look it up
        };
        drain_removed(&name, states, svc, now, &mut memory.draining);
    }
    memory.draining.retain(|_, (name, b)| {
        services.contains_key(name.as_str()) && b.draining_until.is_some_and(|d| d > now)
    });
}

/// Moves the backends of `states` (service `name`'s at the last build)
/// that `svc` no longer lists into `draining` (CT-10), when it drains.
fn drain_removed(
    name: &str,
    states: Vec<BackendState>,
    svc: &BackendServiceConfig,
    now: Millis,
    draining: &mut HashMap<BackendId, (String, BackendState)>,
) {
    // The common case, a service the reload did not touch: the same
    // addresses in the same order.
    let unchanged = states.len() == svc.backends.len()
        && states
            .iter()
            .zip(&svc.backends)
            .all(|(s, b)| s.address == b.address);
    let timeout = millis(svc.connection_draining_timeout);
    if unchanged || timeout == 0 {
        return;
    }
    let listed: HashSet<IpAddr> = svc.backends.iter().map(|b| b.address).collect();
    for mut b in states {
        if !listed.contains(&b.address) {
            b.draining_until = Some(Millis(now.0.saturating_add(timeout)));
            draining.insert(b.id, (name.to_string(), b));
        }
    }
}

/// `state`'s QUIC-LB routing: `svc`'s configurations over the backends
/// `state` lists, `configured` (with their views) first, then those
/// draining (CT-10).
fn quic_routing(
    svc: &BackendServiceConfig,
    state: &ServiceState,
    configured: &[(&crate::config::BackendConfig, BackendView)],
    memory: &mut PolicyMemory,
) -> Option<Arc<sluice_core::quic_lb::QuicLbRouting>> {
    let active = memory.pools.get(&svc.name).map(|&(p, _)| p);
    let listed = quic_lb::Listed {
        ids: &state.backends,
        configured,
        removed: &memory.draining,
    };
    memory.quic.routing(svc, &listed, active)
}

/// The rule table of `cfg`'s forwarding rules (FR-1/FR-2), each with its
/// counter slot.
fn rule_table(cfg: &Config, memory: &mut PolicyMemory) -> RuleTable {
    let rules = cfg
        .forwarding_rules
        .iter()
        .filter_map(|r| {
            Some(ForwardingRule {
                name: r.name.clone(),
                vip: r.vip,
                protocol: r.protocol,
                ports: r.ports,
                service: ServiceId::from_index(r.backend_service)?,
                counter: memory.rule_slot(&r.name),
            })
        })
        .collect();
    RuleTable::new(rules)
}

fn service_state(
    cfg: &Config,
    svc: &BackendServiceConfig,
    members: &[BackendId],
    member_views: &[(&crate::config::BackendConfig, BackendView)],
    memory: &mut PolicyMemory,
) -> (ServiceState, ServiceReport) {
    let params = PolicyParams {
        weighted: svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev,
        failover: svc.failover_policy,
        zonal: svc.zonal_affinity,
    };
    let views: Vec<BackendView> = member_views.iter().map(|(_, v)| *v).collect();
    let original = eligible(&params, &views);
    // Without zonal affinity every client gets the no-zone table.
    let zones = if svc.zonal_affinity.spillover == Spillover::ZonalAffinityDisabled {
        0
    } else {
        cfg.zones.len()
    };
    let variants = client_variants(&params, &views, &original, zones);
    let inputs: TableInputs = variants
        .iter()
        .map(|set| {
            set.iter()
                .map(|&i| (members[i], u32::from(views[i].weight)))
                .collect()
        })
        .collect();
    // Addresses are looked up only when a table is built.
    let addresses = std::cell::OnceCell::new();
    let key = |id: BackendId| {
        let by_id: &HashMap<BackendId, IpAddr> = addresses.get_or_init(|| {
            members
                .iter()
                .zip(member_views)
                .map(|(&id, (b, _))| (id, b.address))
                .collect()
        });
        by_id.get(&id).map(IpAddr::to_string).unwrap_or_default()
    };
    let tables: Vec<Arc<MaglevTable>> =
        memory
            .tables
            .tables(&svc.name, svc.maglev_table_size, members, inputs, key);

    // CT-11: the epoch moves on every primary↔failover flip. An empty set
    // (EL-4 drop) is no pool; the flip is counted when traffic resumes.
    let epoch = match (memory.pools.get(&svc.name).copied(), original.pool) {
        (Some((last, e)), Some(now)) if last != now => e.wrapping_add(1),
        (Some((_, e)), _) => e,
        (None, _) => 0,
    };
    if let Some(p) = original.pool {
        memory.pools.insert(svc.name.clone(), (p, epoch));
    }

    let tracking = &svc.connection_tracking;
    let state = ServiceState {
        name: svc.name.clone(),
        encapsulation: svc.encapsulation,
        affinity: svc.session_affinity,
        tracking: ConnectionTracking {
            mode: tracking.tracking_mode,
            persistence: tracking.persistence,
            idle_timeout_ms: entry_millis(tracking.idle_timeout),
            half_open_timeout_ms: entry_millis(tracking.half_open_timeout),
        },
        draining_timeout_ms: millis(svc.connection_draining_timeout),
        drain_on_failover: svc
            .failover_policy
            .is_none_or(|f| f.connection_drain_on_failover),
        follow_fragments: svc.fragments == Fragments::FollowFlow,
        pool_epoch: epoch,
        tables,
        backends: members.to_vec(),
        quic_lb: None,
    };
    let report = ServiceReport {
        name: svc.name.clone(),
        eligible: variants.iter().map(Vec::len).collect(),
        active_pool: original.pool,
        pool_epoch: epoch,
        build_seconds: 0.0,
    };
    (state, report)
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A conntrack timeout in the milliseconds an entry keeps (u32): longer
/// than ~49.7 days is held at that.
fn entry_millis(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
