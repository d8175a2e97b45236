//! Validated config → [`ForwardingState`] snapshot (AP-2, MG-5).
//!
//! Health checking does not exist yet, so every backend counts as healthy
//! and the one table per service covers all primaries (or all failover
//! backends when there is no primary). Full eligibility (EL-*), zonal table
//! variants (ZA-*), draining of removed backends (CT-10) and pool epochs
//! (CT-11) arrive with the policy module; the snapshot layout already has
//! room for them.

use std::collections::HashMap;
use std::net::IpAddr;

use dataplane::rules::{ForwardingRule, RuleTable};
use dataplane::snapshot::{
    BackendId, BackendState, ConnectionTracking, Egress, ForwardingState, PortState, ServiceId,
    ServiceState, Zone, ZoneMap,
};

use crate::config::{BackendServiceConfig, Config, Pool};
use crate::maglev::{build_table, MaglevBackend};

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

/// Builds the complete snapshot for `cfg`.
///
/// `port_macs[i]` is port i's own MAC, used when the config sets none.
pub fn build_forwarding_state(
    cfg: &Config,
    port_macs: &[[u8; 6]],
    ids: &mut BackendIds,
    generation: u64,
) -> ForwardingState {
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
    let mut backends: Vec<(BackendId, BackendState)> = Vec::new();
    for (si, svc) in cfg.backend_services.iter().enumerate() {
        let service_id = ServiceId(si as u16);
        let mut members = Vec::with_capacity(svc.backends.len());
        for b in &svc.backends {
            let id = ids.get_or_assign(&svc.name, b.address);
            members.push(id);
            let egress_port = cfg
                .dataplane
                .ports
                .iter()
                .position(|p| p.on_link(b.address))
                .unwrap_or(0);
            backends.push((
                id,
                BackendState {
                    id,
                    service: service_id,
                    address: b.address,
                    healthy: true,
                    weight: b.weight,
                    pool: b.pool,
                    draining_until: None,
                    egress: Egress {
                        port: egress_port as u16,
                        next_hop_mac: b.mac,
                    },
                },
            ));
        }
        services.push(service_state(svc, &members));
    }

    let mut backend_table: Vec<Option<BackendState>> = vec![None; ids.high_water() as usize];
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

    ForwardingState {
        generation,
        rules: RuleTable::new(rules),
        services,
        backends: backend_table,
        ports,
        zones,
    }
}

fn service_state(svc: &BackendServiceConfig, members: &[BackendId]) -> ServiceState {
    // Until health checks exist every backend is healthy, so EL-1/EL-3
    // reduce to "the primaries, or the failover pool if there are none".
    let any_primary = svc.backends.iter().any(|b| b.pool == Pool::Primary);
    let eligible: Vec<MaglevBackend> = svc
        .backends
        .iter()
        .zip(members)
        .filter(|(b, _)| !any_primary || b.pool == Pool::Primary)
        .map(|(b, &id)| MaglevBackend {
            id,
            key: b.address.to_string(),
            weight: u32::from(b.weight),
        })
        .collect();
    let tracking = &svc.connection_tracking;
    ServiceState {
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
        pool_epoch: 0,
        tables: vec![build_table(&eligible, svc.maglev_table_size)],
        backends: members.to_vec(),
    }
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
