//! Which VIPs the appliance can serve (AP-6): the per-VIP decision behind
//! the announcement, a pure function of the configuration and the
//! published snapshot.
//!
//! A VIP is servable when a service one of its rules points to sends new
//! connections to a backend that is healthy, not draining and whose next
//! hop is known. The eligible set is what the service's no-zone Maglev
//! table holds (SPEC §4, failover and weights included). EL-1/EL-2/EL-4/
//! EL-6 fall back to unhealthy backends when none is healthy: the
//! dataplane still sends to them, but that is no reason to draw traffic
//! from routers, so such a VIP is withdrawn while another appliance that
//! sees a healthy backend keeps announcing it. A VIP whose rules point to
//! several services is announced while any of them is servable: one
//! service's outage does not take the others' traffic off the appliance.
//!
//! After a start (or a reload that adds a service) a service is not
//! servable until its health has *settled*: every backend's probe has
//! reached a verdict ([`has_verdict`]), healthy or unhealthy. Until then its eligible set holds only the backends that proved
//! themselves first, and its table differs from the other appliances'
//! (MG-2 holds for equal eligible sets only): flows that ECMP moves to the
//! restarted appliance would reach other backends and be reset. Settling
//! is remembered per service, so a backend added later by a reload does
//! not withdraw a VIP.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;
use sluice_core::snapshot::ForwardingState;

use crate::config::Config;
use crate::health::{backend_probe_keys, ProbeStatus, ProbeStatuses};

/// Why a VIP is or is not announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Servable,
    /// None of the VIP's services has a healthy eligible backend.
    NoHealthyBackend {
        services: Vec<String>,
    },
    /// A service of the VIP still waits for its first health verdicts.
    HealthNotSettled {
        service: String,
    },
    /// No `[[bgp.peer]]` of the VIP's address family.
    NoPeerOfFamily,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Servable => f.write_str("servable"),
            Verdict::NoHealthyBackend { services } => write!(
                f,
                "no healthy backend is eligible (service {})",
                services.join(", ")
            ),
            Verdict::HealthNotSettled { service } => write!(
                f,
                "waiting for the first health verdicts of service {service}"
            ),
            Verdict::NoPeerOfFamily => f.write_str("no BGP peer of its address family"),
        }
    }
}

/// The distinct backends of each service's no-zone table, kept while the
/// table is the same `Arc` (a publish that does not change a service's
/// eligible set reuses its table): the O(M) pass runs once per table built.
#[derive(Debug, Default)]
pub struct TableMembers {
    by_service: HashMap<String, (Arc<MaglevTable>, Vec<BackendId>)>,
    /// Services whose health has settled once.
    settled: HashSet<String>,
}

impl TableMembers {
    fn members(&mut self, service: &str, table: &Arc<MaglevTable>) -> &[BackendId] {
        let fresh = self
            .by_service
            .get(service)
            .is_some_and(|(t, _)| Arc::ptr_eq(t, table));
        if !fresh {
            let mut ids: Vec<BackendId> = table.slots.to_vec();
            ids.sort_unstable_by_key(|id| id.0);
            ids.dedup();
            self.by_service
                .insert(service.to_string(), (Arc::clone(table), ids));
        }
        self.by_service.get(service).map_or(&[], |(_, ids)| ids)
    }

    /// Forgets services no longer configured.
    fn retain(&mut self, cfg: &Config) {
        let configured = |name: &String| cfg.backend_services.iter().any(|s| &s.name == name);
        self.by_service.retain(|name, _| configured(name));
        self.settled.retain(configured);
    }

    /// Whether service `si` of `cfg` has settled (see the module doc);
    /// remembered once true. A service without a health check has.
    fn settled(&mut self, cfg: &Config, si: usize, health: Option<&ProbeStatuses>) -> bool {
        let svc = &cfg.backend_services[si];
        if self.settled.contains(&svc.name) {
            return true;
        }
        let settled = match (svc.health_check.map(|i| &cfg.health_checks[i]), health) {
            (Some(hc), Some(health)) => svc.backends.iter().all(|b| {
                backend_probe_keys(cfg, si, hc, b.address).all(|key| {
                    health
                        .get(&key)
                        .is_some_and(|st| has_verdict(st, hc.unhealthy_threshold))
                })
            }),
            // Checked, but no probe status yet: the checker has just started.
            (Some(_), None) => false,
            (None, _) => true,
        };
        if settled {
            self.settled.insert(svc.name.clone());
        }
        settled
    }
}

/// Whether a probe's state is a verdict rather than where it started:
/// healthy after a probe (an initially unhealthy backend is healthy only
/// once it passed `healthy_threshold` probes), or unhealthy after
/// `unhealthy_threshold` consecutive failures. A backend that failed its
/// first probes (its neighbour not yet resolved) and then passes is still
/// undecided until it turns healthy.
fn has_verdict(st: &ProbeStatus, unhealthy_threshold: u32) -> bool {
    if st.state.healthy {
        st.probes > 0
    } else {
        st.state.consecutive_failures >= unhealthy_threshold
    }
}

/// The verdict for every VIP of `cfg`'s rules, in rule order; `health`
/// is the probes' status (None: no health checker runs).
pub fn decide(
    cfg: &Config,
    snap: &ForwardingState,
    health: Option<&ProbeStatuses>,
    members: &mut TableMembers,
) -> Vec<(IpAddr, Verdict)> {
    members.retain(cfg);
    let mut out: Vec<(IpAddr, Verdict)> = Vec::new();
    for rule in &cfg.forwarding_rules {
        if out.iter().any(|(vip, _)| *vip == rule.vip) {
            continue;
        }
        if cfg.bgp.as_ref().is_some_and(|b| !b.has_peer_for(rule.vip)) {
            out.push((rule.vip, Verdict::NoPeerOfFamily));
            continue;
        }
        let mut services: Vec<String> = Vec::new();
        let mut servable = false;
        let mut unsettled = None;
        for r in cfg.forwarding_rules.iter().filter(|r| r.vip == rule.vip) {
            let Some(name) = cfg.backend_services.get(r.backend_service).map(|s| &s.name) else {
                continue;
            };
            if services.contains(name) {
                continue;
            }
            services.push(name.clone());
            if !members.settled(cfg, r.backend_service, health) {
                unsettled.get_or_insert_with(|| name.clone());
                continue;
            }
            servable |= service_servable(snap, name, members);
        }
        let verdict = match (servable, unsettled) {
            (true, _) => Verdict::Servable,
            (false, Some(service)) => Verdict::HealthNotSettled { service },
            (false, None) => Verdict::NoHealthyBackend { services },
        };
        out.push((rule.vip, verdict));
    }
    out
}

/// Whether the published state sends new connections of `service` to a
/// healthy, non-draining backend with a known next hop.
fn service_servable(snap: &ForwardingState, service: &str, members: &mut TableMembers) -> bool {
    let Some(table) = snap
        .services
        .iter()
        .find(|s| s.name == service)
        .and_then(|s| s.tables.first())
    else {
        return false;
    };
    members.members(service, table).iter().any(|&id| {
        snap.backend(id).is_some_and(|b| {
            b.healthy && b.draining_until.is_none() && b.egress.next_hop_mac.is_some()
        })
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::health::{probe_key, InitialState, ProbeStatus};
    use crate::publish::{build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory};

    const CFG: &str = r#"
[dataplane]
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"
tap = "sl-up"

[[health_check]]
name = "http"
type = "HTTP"
port = 80

[[backend_service]]
name = "web"
health_check = "http"
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
  { address = "192.0.2.12", mac = "02:00:00:00:00:12", failover = true },
]

[[backend_service]]
name = "alt"
health_check = "http"
failover_policy = { drop_traffic_if_unhealthy = true }
backend = [ { address = "192.0.2.20", mac = "02:00:00:00:00:20" } ]

[[backend_service]]
name = "dns"
backend = [ { address = "192.0.2.30", mac = "02:00:00:00:00:30" } ]

[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
backend_service = "web"

[[forwarding_rule]]
name = "alt"
vip = "203.0.113.20"
backend_service = "alt"

[[forwarding_rule]]
name = "alt-dns"
vip = "203.0.113.20"
protocol = "UDP"
ports = "53"
backend_service = "dns"

[[forwarding_rule]]
name = "v6"
vip = "2001:db8:1::10"
backend_service = "dns"

[bgp]
asn = 65001
[[bgp.peer]]
name = "tor"
address = "192.0.2.1"
asn = 65000
"#;

    fn cfg(text: &str) -> Config {
        crate::config::load_str(text, "t.toml").unwrap_or_else(|d| panic!("{d}"))
    }

    /// Health per backend address (missing: healthy).
    fn verdicts(cfg: &Config, down: &[&str]) -> Vec<(String, Verdict)> {
        let hc = &cfg.health_checks[0];
        let health: ProbeStatuses = cfg
            .backend_services
            .iter()
            .flat_map(|s| &s.backends)
            .map(|b| {
                let mut st = ProbeStatus::new(InitialState::Healthy);
                st.state.healthy = !down.contains(&b.address.to_string().as_str());
                st.probes = 3;
                st.state.consecutive_failures = if st.state.healthy { 0 } else { 3 };
                (probe_key(hc, b.address), st)
            })
            .collect();
        let inputs = BuildInputs {
            health: Some(&health),
            ..BuildInputs::default()
        };
        let (snap, _) = build_forwarding_state_with(
            cfg,
            &[[2, 0, 0, 0, 0, 1]],
            &mut BackendIds::new(),
            &mut PolicyMemory::default(),
            &inputs,
            1,
        );
        decide(cfg, &snap, Some(&health), &mut TableMembers::default())
            .into_iter()
            .map(|(vip, v)| (vip.to_string(), v))
            .collect()
    }

    fn servable(v: &[(String, Verdict)], vip: &str) -> bool {
        v.iter()
            .find(|(a, _)| a == vip)
            .is_some_and(|(_, v)| *v == Verdict::Servable)
    }

    /// AP-6 with EL-1/EL-3: a VIP is announced while its eligible set holds
    /// a healthy backend — the failover pool included — and withdrawn when
    /// only the all-unhealthy fallback remains.
    #[test]
    fn ap_6_el_3_a_vip_is_servable_while_a_healthy_backend_is_eligible() {
        let c = cfg(CFG);
        let all_up = verdicts(&c, &[]);
        assert!(servable(&all_up, "203.0.113.10"));
        // Primaries down: the failover backend serves (EL-3 rule 1).
        let failover = verdicts(&c, &["192.0.2.10", "192.0.2.11"]);
        assert!(servable(&failover, "203.0.113.10"), "{failover:?}");
        // Everything down: EL-4 sends to all primaries, unhealthy.
        let none = verdicts(&c, &["192.0.2.10", "192.0.2.11", "192.0.2.12"]);
        assert_eq!(
            none[0],
            (
                "203.0.113.10".into(),
                Verdict::NoHealthyBackend {
                    services: vec!["web".into()]
                }
            )
        );
    }

    /// EL-4 (drop_traffic_if_unhealthy: empty set) withdraws a VIP only when
    /// none of its services can serve: 203.0.113.20 keeps its DNS rule.
    #[test]
    fn ap_6_el_4_a_vip_stays_while_any_of_its_services_serves() {
        let c = cfg(CFG);
        let v = verdicts(&c, &["192.0.2.20"]);
        assert!(servable(&v, "203.0.113.20"), "{v:?}");
        let only_alt = cfg(&CFG.replace(
            "name = \"alt-dns\"\nvip = \"203.0.113.20\"",
            "name = \"alt-dns\"\nvip = \"203.0.113.21\"",
        ));
        let v = verdicts(&only_alt, &["192.0.2.20"]);
        assert_eq!(
            v[1],
            (
                "203.0.113.20".into(),
                Verdict::NoHealthyBackend {
                    services: vec!["alt".into()]
                }
            )
        );
    }

    #[test]
    fn a_vip_without_a_peer_of_its_family_is_not_announced() {
        let v = verdicts(&cfg(CFG), &[]);
        let v6 = v.iter().find(|(a, _)| a == "2001:db8:1::10").unwrap();
        assert_eq!(v6.1, Verdict::NoPeerOfFamily);
    }

    /// An unresolved next hop (AP-4) cannot serve: the dataplane drops
    /// its packets.
    #[test]
    fn an_unresolved_next_hop_is_not_servable() {
        let c = cfg(&CFG.replace(", mac = \"02:00:00:00:00:30\"", "").replace(
            "name = \"alt-dns\"\nvip = \"203.0.113.20\"",
            "name = \"alt-dns\"\nvip = \"203.0.113.30\"",
        ));
        let v = verdicts(&c, &[]);
        assert!(!servable(&v, "203.0.113.30"), "{v:?}");
        assert!(servable(&v, "203.0.113.10"), "{v:?}");
    }

    /// AP-6: after a start, a VIP waits until every backend of its service
    /// has had its first verdict (here: one backend proved healthy, two not
    /// probed enough yet), then stays announced when a reload adds a
    /// backend that has not.
    #[test]
    fn ap_6_a_restarted_appliance_waits_for_settled_health() {
        let c = cfg(CFG);
        let hc = &c.health_checks[0];
        let mut health = ProbeStatuses::default();
        // .11 failed its first probe, then passed one: undecided. .12
        // failed twice of the three it takes: undecided.
        for (addr, probes, healthy, failures) in [
            ("192.0.2.10", 2, true, 0),
            ("192.0.2.11", 2, false, 0),
            ("192.0.2.12", 2, false, 2),
            ("192.0.2.20", 3, true, 0),
        ] {
            let mut st = ProbeStatus::new(InitialState::Unhealthy);
            st.probes = probes;
            st.state.healthy = healthy;
            st.state.consecutive_failures = failures;
            health.insert(probe_key(hc, addr.parse().unwrap()), st);
        }
        let inputs = BuildInputs {
            health: Some(&health),
            ..BuildInputs::default()
        };
        let (snap, _) = build_forwarding_state_with(
            &c,
            &[[2, 0, 0, 0, 0, 1]],
            &mut BackendIds::new(),
            &mut PolicyMemory::default(),
            &inputs,
            1,
        );
        let mut memory = TableMembers::default();
        let v = decide(&c, &snap, Some(&health), &mut memory);
        assert_eq!(
            v[0].1,
            Verdict::HealthNotSettled {
                service: "web".into()
            }
        );
        assert_eq!(v[1].1, Verdict::Servable, "alt has settled: {v:?}");
        let key = |a: &str| probe_key(hc, a.parse().unwrap());
        health.get_mut(&key("192.0.2.11")).unwrap().state.healthy = true;
        let v = decide(&c, &snap, Some(&health), &mut memory);
        assert!(matches!(v[0].1, Verdict::HealthNotSettled { .. }), "{v:?}");
        health
            .get_mut(&key("192.0.2.12"))
            .unwrap()
            .state
            .consecutive_failures = 3;
        let v = decide(&c, &snap, Some(&health), &mut memory);
        assert_eq!(v[0].1, Verdict::Servable);
        // A reload adds a backend nobody probed yet: still announced.
        let more = cfg(&CFG.replace(
            "  { address = \"192.0.2.12\"",
            "  { address = \"192.0.2.13\", mac = \"02:00:00:00:00:13\" },\n  { address = \"192.0.2.12\"",
        ));
        let v = decide(&more, &snap, Some(&health), &mut memory);
        assert_eq!(v[0].1, Verdict::Servable, "{v:?}");
    }
}
