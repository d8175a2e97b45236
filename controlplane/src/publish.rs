//! Validated config + health → [`ForwardingState`] snapshot (AP-2, MG-5).
//!
//! Per service: the backends' current health and weight (health checks,
//! HC-*) feed the eligibility policy (EL-*, FO-*), whose original set is
//! turned into one table per client-zone variant (ZA-*): `tables[0]` for
//! clients in no zone, `tables[1 + z]` for zone z, only when zonal affinity
//! is on (otherwise one table serves everyone, `ServiceState::table_for`
//! falls back to it). [`PolicyMemory`] carries what must survive between
//! builds: pool epochs (CT-11) and backends draining after removal (CT-10).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use dataplane::rules::{ForwardingRule, RuleTable};
use dataplane::snapshot::{
    BackendId, BackendState, ConnectionTracking, Egress, ForwardingState, MaglevTable, Millis,
    PortState, ServiceId, ServiceState, Zone, ZoneMap,
};

use crate::config::{BackendServiceConfig, Config, LocalityLbPolicy, Pool, Spillover};
use crate::health::{probe_key, ProbeKey, ProbeStatus};
use crate::maglev::{build_table, MaglevBackend};
use crate::policy::{client_variants, eligible, BackendView, PolicyParams};

/// Stable backend ids, keyed by (service name, backend address).
///
/// An id survives reloads for as long as its backend stays in the config,
/// so conntrack entries holding it stay valid (CT-7). Ids are never reused:
/// a conntrack entry naming a removed backend must not silently start
/// pointing at a new one.
#[derive(Debug, Default)]
pub struct BackendIds {
    ids: HashMap<(String, IpAddr), BackendId>,
    next: u32,
}

impl BackendIds {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of a backend, allocating a fresh one if it has none.
    pub fn get_or_assign(&mut self, service: &str, address: IpAddr) -> BackendId {
        let next = &mut self.next;
        *self
            .ids
            .entry((service.to_string(), address))
            .or_insert_with(|| {
                let id = BackendId(*next);
                *next += 1;
                id
            })
    }

    pub fn get(&self, service: &str, address: IpAddr) -> Option<BackendId> {
        self.ids.get(&(service.to_string(), address)).copied()
    }

    /// One past the highest id ever allocated: the length the snapshot's
    /// backend table needs.
    pub fn high_water(&self) -> u32 {
        self.next
    }

    /// Number of live ids.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Forgets every id not in `cfg`, so a backend that is removed and
    /// later re-added gets a new id.
    fn retain_config(&mut self, cfg: &Config) {
        self.ids.retain(|(svc, addr), _| {
            cfg.service(svc)
                .is_some_and(|s| s.backends.iter().any(|b| b.address == *addr))
        });
    }
}

/// What the health checks currently say, and what a build must remember.
#[derive(Debug, Default)]
pub struct BuildInputs<'a> {
    /// Probe states (None: no health checking; every backend healthy).
    pub health: Option<&'a HashMap<ProbeKey, ProbeStatus>>,
    /// The dataplane clock now (draining deadlines, CT-10).
    pub now: Millis,
    /// Egress learned from the kernel per backend address (None: no
    /// exception path, so only static `mac =` backends are reachable).
    pub neighbours: Option<&'a HashMap<IpAddr, Egress>>,
}

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

/// State that outlives one build.
#[derive(Debug, Default)]
pub struct PolicyMemory {
    /// Per service name: last non-empty active pool and its epoch (CT-11).
    pools: HashMap<String, (Pool, u32)>,
    /// Backends of the last build, to notice removals (CT-10).
    live: HashMap<BackendId, (String, BackendState)>,
    /// Removed backends still draining: service name and state with deadline.
    draining: HashMap<BackendId, (String, BackendState)>,
}

impl PolicyMemory {
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
        })
        .collect();

    let mut services = Vec::with_capacity(cfg.backend_services.len());
    let mut reports = Vec::with_capacity(cfg.backend_services.len());
    let mut backends: Vec<(BackendId, BackendState)> = Vec::new();
    let mut live = HashMap::new();
    update_draining(cfg, memory, inputs.now);
    for (si, svc) in cfg.backend_services.iter().enumerate() {
        let service_id = ServiceId(si as u16);
        let mut members = Vec::with_capacity(svc.backends.len());
        let views = backend_views(cfg, svc, inputs);
        for (b, view) in svc.backends.iter().zip(&views) {
            let id = ids.get_or_assign(&svc.name, b.address);
            members.push(id);
            let egress = egress_of(cfg, b, inputs.neighbours);
            let state = BackendState {
                id,
                service: service_id,
                address: b.address,
                healthy: view.healthy,
                weight: view.weight,
                pool: b.pool,
                draining_until: None,
                egress,
            };
            live.insert(id, (svc.name.clone(), state.clone()));
            backends.push((id, state));
        }
        let started = Instant::now();
        let (mut state, mut report) = service_state(cfg, svc, &members, &views, memory);
        report.build_seconds = started.elapsed().as_secs_f64();
        // CT-10: removed backends keep their entries working until their
        // deadline; they stay listed (never in a table) until then.
        for (id, (name, b)) in &memory.draining {
            if *name == svc.name {
                state.backends.push(*id);
                let mut b = b.clone();
                b.service = service_id;
                backends.push((*id, b));
            }
        }
        services.push(state);
        reports.push(report);
    }
    memory.live = live;

    let high_water = ids
        .high_water()
        .max(backends.iter().map(|(id, _)| id.0 + 1).max().unwrap_or(0));
    let mut backend_table: Vec<Option<BackendState>> = vec![None; high_water as usize];
    for (id, state) in backends {
        backend_table[id.0 as usize] = Some(state);
    }

    let rules = cfg
        .forwarding_rules
        .iter()
        .map(|r| ForwardingRule {
            name: r.name.clone(),
            vip: r.vip,
            protocol: r.protocol,
            ports: r.ports,
            service: ServiceId(r.backend_service as u16),
        })
        .collect();

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
        rules: RuleTable::new(rules),
        services,
        backends: backend_table,
        ports,
        zones,
        outer_headers: Default::default(),
        flow_seed: cfg
            .dataplane
            .flow_hash_key
            .as_ref()
            .map_or_else(Default::default, |k| dataplane::flow::FlowSeed::keyed(&k.0)),
    };
    state.outer_headers = dataplane::outer_header::OuterHeaders::build(&state);
    (state, reports)
}

/// Moves backends that left the config into the draining set (CT-10) and
/// forgets those whose deadline passed or whose service is gone.
/// Runs before the services are built, so a backend drains from the very
/// snapshot that no longer has it in the config.
fn update_draining(cfg: &Config, memory: &mut PolicyMemory, now: Millis) {
    for (id, (name, mut b)) in std::mem::take(&mut memory.live) {
        let still = cfg
            .service(&name)
            .is_some_and(|s| s.backends.iter().any(|x| x.address == b.address));
        if still {
            continue;
        }
        let Some(svc) = cfg.service(&name) else {
            continue; // the whole service left: nothing can look it up
        };
        let timeout = millis(svc.connection_draining_timeout);
        if timeout > 0 {
            b.draining_until = Some(Millis(now.0.saturating_add(timeout)));
            memory.draining.insert(id, (name, b));
        }
    }
    memory.draining.retain(|_, (name, b)| {
        cfg.service(name).is_some() && b.draining_until.is_some_and(|d| d > now)
    });
}

/// Current health and effective weight of each backend of `svc`.
fn backend_views(
    cfg: &Config,
    svc: &BackendServiceConfig,
    inputs: &BuildInputs<'_>,
) -> Vec<BackendView> {
    let weighted = svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev;
    let check = svc.health_check.map(|i| &cfg.health_checks[i]);
    svc.backends
        .iter()
        .map(|b| {
            let status = check
                .zip(inputs.health)
                .and_then(|(hc, h)| h.get(&probe_key(hc, b.address)));
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

fn service_state(
    cfg: &Config,
    svc: &BackendServiceConfig,
    members: &[BackendId],
    views: &[BackendView],
    memory: &mut PolicyMemory,
) -> (ServiceState, ServiceReport) {
    let params = PolicyParams {
        weighted: svc.locality_lb_policy == LocalityLbPolicy::WeightedMaglev,
        failover: svc.failover_policy,
        zonal: svc.zonal_affinity,
    };
    let original = eligible(&params, views);
    // Without zonal affinity every client gets the no-zone table.
    let zones = if svc.zonal_affinity.spillover == Spillover::ZonalAffinityDisabled {
        0
    } else {
        cfg.zones.len()
    };
    let variants = client_variants(&params, views, &original, zones);
    let mut tables: Vec<MaglevTable> = Vec::with_capacity(variants.len());
    for (v, set) in variants.iter().enumerate() {
        // Zones whose set equals an earlier one share its table's content.
        if let Some(same) = variants[..v].iter().position(|s| s == set) {
            let t = tables[same].clone();
            tables.push(t);
            continue;
        }
        let backends: Vec<MaglevBackend> = set
            .iter()
            .map(|&i| MaglevBackend {
                id: members[i],
                key: svc.backends[i].address.to_string(),
                weight: u32::from(views[i].weight),
            })
            .collect();
        tables.push(build_table(&backends, svc.maglev_table_size));
    }

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
            idle_timeout_ms: millis(tracking.idle_timeout),
        },
        draining_timeout_ms: millis(svc.connection_draining_timeout),
        drain_on_failover: svc
            .failover_policy
            .is_none_or(|f| f.connection_drain_on_failover),
        pool_epoch: epoch,
        tables,
        backends: members.to_vec(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    const CFG: &str = r#"
[dataplane]
[[dataplane.port]]
name = "a"
device = "net_null0"
address = "192.0.2.1/24"
[[dataplane.port]]
name = "b"
device = "net_null1"
mac = "02:00:00:00:00:bb"
address = "198.51.100.1/24"

[[backend_service]]
name = "web"
maglev_table_size = 251
connection_tracking = { idle_timeout = "90s" }
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "198.51.100.11", weight = 3 },
  { address = "203.0.113.99", failover = true },
]
[[backend_service]]
name = "empty"

[[forwarding_rule]]
name = "r1"
vip = "203.0.113.10"
ports = "80"
backend_service = "web"
[[forwarding_rule]]
name = "r2"
vip = "203.0.113.11"
protocol = "UDP"
backend_service = "empty"
"#;

    fn cfg(text: &str) -> Config {
        load_str(text, "t").unwrap_or_else(|d| panic!("{d}"))
    }

    #[test]
    fn builds_ports_rules_services_and_backends() {
        let c = cfg(CFG);
        let mut ids = BackendIds::new();
        let st = build_forwarding_state(&c, &[[2, 0, 0, 0, 0, 0xaa], [9; 6]], &mut ids, 7);
        assert_eq!(st.generation, 7);
        assert_eq!(st.ports[0].mac, [2, 0, 0, 0, 0, 0xaa]);
        assert_eq!(st.ports[1].mac, [2, 0, 0, 0, 0, 0xbb], "config MAC wins");
        assert_eq!(st.ports[0].ipv4, Some("192.0.2.1".parse().unwrap()));
        let web = &st.services[0];
        assert_eq!(web.tracking.idle_timeout_ms, 90_000);
        assert_eq!(web.backends.len(), 3);
        assert_eq!(web.tables.len(), 1);
        assert_eq!(web.tables[0].slots.len(), 251);
        let failover = ids.get("web", "203.0.113.99".parse().unwrap()).unwrap();
        assert!(
            web.tables[0].slots.iter().all(|&s| s != failover),
            "failover backends stay out of the table while a primary exists"
        );
        let b1 = st.backend(web.backends[1]).unwrap();
        assert_eq!(b1.egress.port, 1, "on port b's subnet");
        assert_eq!(b1.weight, 3);
        assert_eq!(b1.egress.next_hop_mac, None);
        let b0 = st.backend(web.backends[0]).unwrap();
        assert_eq!(
            b0.egress,
            Egress {
                port: 0,
                next_hop_mac: Some([2, 0, 0, 0, 0, 0x10])
            }
        );
        let b2 = st.backend(failover).unwrap();
        assert_eq!(
            (b2.pool, b2.egress.port),
            (Pool::Failover, 0),
            "off-link → port 0"
        );
        assert!(st.services[1].tables[0].slots.is_empty());
        let r = st
            .rules
            .lookup("203.0.113.11".parse().unwrap(), 17, Some(53))
            .unwrap();
        assert_eq!(r.service, ServiceId(1));
        assert!(st
            .rules
            .lookup("203.0.113.10".parse().unwrap(), 6, Some(80))
            .is_ok());
    }

    /// Ids survive reloads while a backend exists and are never reused.
    #[test]
    fn backend_ids_are_stable_and_never_reused() {
        let c1 = cfg(CFG);
        let mut ids = BackendIds::new();
        let s1 = build_forwarding_state(&c1, &[], &mut ids, 1);
        let kept = s1.services[0].backends[0];
        let gone = s1.services[0].backends[1];
        let c2 = cfg(&CFG.replace("  { address = \"198.51.100.11\", weight = 3 },\n", ""));
        let s2 = build_forwarding_state(&c2, &[], &mut ids, 2);
        assert_eq!(s2.services[0].backends[0], kept);
        assert!(s2.backend(gone).is_none());
        let s3 = build_forwarding_state(&c1, &[], &mut ids, 3);
        let readded = s3.services[0].backends[1];
        assert_ne!(readded, gone, "a re-added backend gets a fresh id");
        assert!(readded.0 >= 3);
        assert_eq!(s3.services[0].backends[0], kept);
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn failover_pool_used_when_there_is_no_primary() {
        let text = CFG
            .replace(
                "{ address = \"192.0.2.10\", mac = \"02:00:00:00:00:10\" }",
                "{ address = \"192.0.2.10\", failover = true }",
            )
            .replace(
                "{ address = \"198.51.100.11\", weight = 3 }",
                "{ address = \"198.51.100.11\", failover = true }",
            );
        let mut ids = BackendIds::new();
        let st = build_forwarding_state(&cfg(&text), &[], &mut ids, 1);
        assert_eq!(st.services[0].tables[0].slots.len(), 251);
        assert!(st.services[0].drain_on_failover, "CT-11 default");
    }
}
