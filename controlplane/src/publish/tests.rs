use std::collections::BTreeMap;

use super::*;
use crate::config::load_str;
use crate::health::probe_key;
use crate::synthetic::{all_healthy, big_config, probe_status};

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
connection_tracking = { idle_timeout = "90s", half_open_timeout = "3s" }
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
    assert_eq!(web.tracking.half_open_timeout_ms, 3_000);
    // Default 5 s; never above idle_timeout.
    assert_eq!(st.services[1].tracking.half_open_timeout_ms, 5_000);
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

/// Ids survive reloads while a backend exists; a re-added backend gets
/// a new id (its old index is not free while a snapshot may name it).
#[test]
fn backend_ids_are_stable_across_reloads() {
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

/// A health flip rebuilds the tables of the one service it touches;
/// every other service's tables are the very same `Arc`s in the next
/// snapshot (before: every event rebuilt every service).
#[test]
fn a_health_event_rebuilds_only_the_touched_service() {
    let c = cfg(&big_config(300, 10, 251));
    let hc = &c.health_checks[0];
    let mut health = all_healthy(&c);
    let mut ids = BackendIds::new();
    let mut memory = PolicyMemory::default();
    let mut build = |health: &ProbeStatuses, generation| {
        let inputs = BuildInputs::with_health(health);
        build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &inputs, generation).0
    };
    let first = build(&health, 1);
    assert_eq!(first.services.len(), 300);
    let touched = c.backend_services[123].backends[4].address;
    health.insert(probe_key(hc, touched), probe_status(false));
    let second = build(&health, 2);
    for (i, (a, b)) in first.services.iter().zip(&second.services).enumerate() {
        let same = Arc::ptr_eq(&a.tables[0], &b.tables[0]);
        assert_eq!(same, i != 123, "service {i}");
    }
    let id = second.services[123].backends[4];
    assert!(second.services[123].tables[0]
        .slots
        .iter()
        .all(|&s| s != id));
    assert!(!second.backend(id).unwrap().healthy);
}

/// The count of tables built: one per touched service, none for a
/// publish that changes no eligibility (a neighbour's MAC).
#[test]
fn tables_built_counts_only_changed_services() {
    let c = cfg(&big_config(50, 4, 251));
    let hc = &c.health_checks[0];
    let mut health = all_healthy(&c);
    let mut ids = BackendIds::new();
    let mut memory = PolicyMemory::default();
    let inputs = BuildInputs::with_health(&health);
    build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &inputs, 1);
    assert_eq!(memory.tables_built(), 50);
    build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &inputs, 2);
    assert_eq!(memory.tables_built(), 50, "nothing changed");
    let neighbours = HashMap::from([(
        c.backend_services[3].backends[0].address,
        Egress {
            port: 0,
            next_hop_mac: Some([2, 0, 0, 0, 0, 9]),
        },
    )]);
    let moved = BuildInputs {
        health: Some(&health),
        neighbours: Some(&neighbours),
        ..Default::default()
    };
    build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &moved, 3);
    assert_eq!(
        memory.tables_built(),
        50,
        "a neighbour update builds no table"
    );
    health.insert(
        probe_key(hc, c.backend_services[7].backends[0].address),
        probe_status(false),
    );
    let inputs = BuildInputs::with_health(&health);
    build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &inputs, 4);
    assert_eq!(memory.tables_built(), 51, "one service touched");
}

/// The health path (`rebuild_services` on the touched service) gives
/// the snapshot a full build gives, and shares every other table; its
/// lane records too (CT-8: the established lane keeps no entry on the
/// backends that went unhealthy).
#[test]
fn rebuilding_touched_services_equals_a_full_build() {
    let c = cfg(&big_config(40, 5, 251));
    let hc = &c.health_checks[0];
    let mut health = all_healthy(&c);
    let mut ids = BackendIds::new();
    let mut memory = PolicyMemory::default();
    let inputs = BuildInputs::with_health(&health);
    let (first, reports) = build_forwarding_state_with(&c, &[], &mut ids, &mut memory, &inputs, 1);
    let mut changes = Vec::new();
    for (position, b) in c.backend_services[9].backends[..3].iter().enumerate() {
        health.insert(probe_key(hc, b.address), probe_status(false));
        changes.push(HealthChange {
            service: 9,
            position,
            healthy: false,
            weight: 1,
        });
    }
    let inputs = BuildInputs::with_health(&health);
    let (fast, fast_reports) = rebuild_services(&first, &reports, &c, &mut memory, &changes, 2);
    let mut full_memory = PolicyMemory::default();
    let mut full_ids = BackendIds::new();
    let (full, full_reports) =
        build_forwarding_state_with(&c, &[], &mut full_ids, &mut full_memory, &inputs, 2);
    assert_eq!(fast.generation, 2);
    assert_eq!(fast_reports, {
        let mut r = full_reports;
        for (a, b) in r.iter_mut().zip(&fast_reports) {
            a.build_seconds = b.build_seconds;
        }
        r
    });
    for (i, (a, b)) in fast.services.iter().zip(&full.services).enumerate() {
        assert_eq!(a.tables, b.tables, "service {i}");
        assert_eq!(a.backends, b.backends, "service {i}");
        assert_eq!(
            Arc::ptr_eq(&a.tables[0], &first.services[i].tables[0]),
            i != 9
        );
    }
    for (a, b) in fast.backends.iter().zip(&full.backends) {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!((a.id, a.healthy, a.weight), (b.id, b.healthy, b.weight));
    }
    assert_eq!(
        fast.backends
            .iter()
            .flatten()
            .filter(|b| !b.healthy)
            .count(),
        3
    );
    assert_eq!(fast.lane_backends, full.lane_backends);
    assert_ne!(fast.lane_backends, first.lane_backends);
    let svc = sluice_core::ids::ServiceId(9);
    for id in &fast.services[9].backends[..3] {
        let record = fast.lane_backends.get(*id).expect("a record");
        let epoch = fast.services[9].pool_epoch;
        assert!(!record.keeps(svc, epoch, sluice_core::time::Millis(1)));
        let before = first.lane_backends.get(*id).expect("a record");
        assert!(before.keeps(
            svc,
            first.services[9].pool_epoch,
            sluice_core::time::Millis(1)
        ));
    }
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

/// A rule keeps its packet counter slot across reloads, whatever the
/// order of the rules or the rules removed; a new rule gets a new slot, a
/// rule added back its old one (`sluice_rule_packets_total` only rises).
#[test]
fn rules_keep_their_counter_slots_across_reloads() {
    let mut ids = BackendIds::new();
    let mut memory = PolicyMemory::default();
    let health = crate::health::ProbeStatuses::default();
    let inputs = BuildInputs::with_health(&health);
    let mut slots = |text: &str, generation| {
        let st = build_forwarding_state_with(
            &cfg(text),
            &[],
            &mut ids,
            &mut memory,
            &inputs,
            generation,
        )
        .0;
        st.rules
            .rules()
            .map(|r| (r.name.clone(), r.counter))
            .collect::<BTreeMap<_, _>>()
    };
    let first = slots(CFG, 1);
    assert_eq!(first, BTreeMap::from([("r1".into(), 0), ("r2".into(), 1)]));
    // r1 removed, r3 added before r2.
    let r1 = CFG.find("[[forwarding_rule]]\nname = \"r1\"").unwrap();
    let r2 = CFG.find("[[forwarding_rule]]\nname = \"r2\"").unwrap();
    let r3 =
        "[[forwarding_rule]]\nname = \"r3\"\nvip = \"203.0.113.12\"\nbackend_service = \"web\"\n";
    let second = format!("{}{r3}{}", &CFG[..r1], &CFG[r2..]);
    assert_eq!(
        slots(&second, 2),
        BTreeMap::from([("r2".into(), 1), ("r3".into(), 2)])
    );
    assert_eq!(slots(CFG, 3), first, "r1 back in its slot");
}
