//! Snapshot building under health (publish.rs + policy): per-zone tables
//! (ZA-*), pool epochs (CT-11, FO-1), draining of removed backends (CT-10),
//! EL-4 drop, and stable ids across reloads.

use controlplane::config::{load_str, Config};
use controlplane::health::{probe_key, ProbeStatuses};
use controlplane::publish::{build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory};
use controlplane::synthetic::probe_status;
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;

fn cfg(services: &str) -> Config {
    let text = format!(
        r#"
[dataplane]
[[dataplane.port]]
name = "a"
device = "net_null0"
address = "192.0.2.1/24"
[[zone]]
name = "z1"
client_subnets = ["10.1.0.0/16"]
[[zone]]
name = "z2"
client_subnets = ["10.2.0.0/16"]
[[health_check]]
name = "hc"
type = "TCP"
port = 80
{services}
"#
    );
    load_str(&text, "t.toml").unwrap_or_else(|d| panic!("{d}"))
}

fn health(c: &Config, unhealthy: &[&str]) -> ProbeStatuses {
    let hc = &c.health_checks[0];
    c.backend_services
        .iter()
        .flat_map(|s| s.backends.iter())
        .map(|b| {
            let healthy = !unhealthy.contains(&b.address.to_string().as_str());
            (probe_key(hc, b.address), probe_status(healthy))
        })
        .collect()
}

struct Builder {
    ids: BackendIds,
    memory: PolicyMemory,
    generation: u64,
}

impl Builder {
    fn new() -> Self {
        Self {
            ids: BackendIds::new(),
            memory: PolicyMemory::default(),
            generation: 0,
        }
    }
    fn build(&mut self, c: &Config, unhealthy: &[&str], now: u64) -> ForwardingState {
        let h = health(c, unhealthy);
        self.generation += 1;
        let inputs = BuildInputs {
            health: Some(&h),
            now: Millis(now),
            neighbours: None,
            rules: None,
        };
        build_forwarding_state_with(
            c,
            &[],
            &mut self.ids,
            &mut self.memory,
            &inputs,
            self.generation,
        )
        .0
    }
}

fn owners(st: &ForwardingState, table: usize) -> Vec<String> {
    let mut v: Vec<String> = st.services[0].tables[table]
        .slots
        .iter()
        .map(|id| st.backend(*id).unwrap().address.to_string())
        .collect();
    v.sort();
    v.dedup();
    v
}

const ZONAL: &str = r#"
[[backend_service]]
name = "web"
maglev_table_size = 251
health_check = "hc"
zonal_affinity = { spillover = "ZONAL_AFFINITY_SPILL_CROSS_ZONE", spillover_ratio = 0.8 }
backend = [
  { address = "192.0.2.10", zone = "z1" }, { address = "192.0.2.11", zone = "z1" },
  { address = "192.0.2.20", zone = "z2" }, { address = "192.0.2.21", zone = "z2" },
]
"#;

/// ZA-7/ZA-8 in the snapshot: tables[0] for no-zone clients, tables[1+z].
#[test]
fn za_7_snapshot_has_one_table_per_client_zone() {
    let c = cfg(ZONAL);
    let st = Builder::new().build(&c, &["192.0.2.21"], 0);
    let svc = &st.services[0];
    assert_eq!(svc.tables.len(), 3);
    assert_eq!(owners(&st, 0).len(), 3, "no zone: all eligible");
    assert_eq!(
        owners(&st, 1),
        vec!["192.0.2.10", "192.0.2.11"],
        "z1: 2/2 ≥ 0.8"
    );
    assert_eq!(owners(&st, 2).len(), 3, "z2: 1/2 < 0.8 → original");
    assert_eq!(st.zones.zones.len(), 2);
}

const FAILOVER: &str = r#"
[[backend_service]]
name = "web"
maglev_table_size = 251
health_check = "hc"
connection_draining_timeout = "10s"
failover_policy = { failover_ratio = 0.5, drop_traffic_if_unhealthy = true }
backend = [
  { address = "192.0.2.10" }, { address = "192.0.2.11" },
  { address = "192.0.2.30", failover = true },
]
"#;

/// CT-11 / FO-1: the epoch moves on failover and on failback, not otherwise;
/// EL-4 with drop_traffic_if_unhealthy empties the table.
#[test]
fn ct_11_pool_epoch_counts_flips() {
    let c = cfg(FAILOVER);
    let mut b = Builder::new();
    let st = b.build(&c, &[], 0);
    assert_eq!(st.services[0].pool_epoch, 0);
    let st = b.build(&c, &["192.0.2.10"], 0);
    assert_eq!(
        (st.services[0].pool_epoch, owners(&st, 0).len()),
        (0, 1),
        "1/2 ≥ 0.5"
    );
    let st = b.build(&c, &["192.0.2.10", "192.0.2.11"], 0);
    assert_eq!(owners(&st, 0), vec!["192.0.2.30"]);
    assert_eq!(st.services[0].pool_epoch, 1, "failover");
    let st = b.build(&c, &["192.0.2.10", "192.0.2.11", "192.0.2.30"], 0);
    assert!(st.services[0].tables[0].slots.is_empty(), "EL-4 drop");
    assert_eq!(st.services[0].pool_epoch, 1);
    let st = b.build(&c, &[], 0);
    assert_eq!(st.services[0].pool_epoch, 2, "failback");
    assert!(st
        .backend(st.services[0].backends[0])
        .unwrap()
        .draining_until
        .is_none());
}

/// CT-10: a backend removed by reload keeps its id, listed as draining
/// until the deadline, out of every table; then it disappears. The kept
/// backends keep their ids (CT-7).
#[test]
fn ct_10_removed_backend_drains_until_its_deadline() {
    let c1 = cfg(FAILOVER);
    let mut b = Builder::new();
    let s1 = b.build(&c1, &[], 1_000);
    let (kept, gone) = (s1.services[0].backends[0], s1.services[0].backends[1]);
    let c2 = cfg(&FAILOVER.replace("{ address = \"192.0.2.11\" },", ""));
    let s2 = b.build(&c2, &[], 2_000);
    assert_eq!(s2.services[0].backends[0], kept);
    let d = s2.backend(gone).expect("still listed while draining");
    assert_eq!(d.draining_until, Some(Millis(12_000)));
    assert!(s2.services[0].backends.contains(&gone));
    assert!(s2.services[0].tables[0].slots.iter().all(|&s| s != gone));
    assert_eq!(b.memory.next_deadline(), Some(Millis(12_000)));
    let s3 = b.build(&c2, &[], 12_000);
    assert!(s3.backend(gone).is_none(), "deadline passed");
    assert_eq!(
        s3.services[0].backends,
        vec![kept, s2.services[0].backends[1]]
    );
}

/// `initial_state` (HC-3 extension): default UNHEALTHY, HEALTHY accepted,
/// a wrong spelling is reported with its position and a hint.
#[test]
fn hc_initial_state_config() {
    assert!(!cfg("").health_checks[0].initially_healthy);
    let text = |v: &str| {
        format!(
            "[dataplane]\n[[dataplane.port]]\nname = \"a\"\ndevice = \"net_null0\"\n\
             [[health_check]]\nname = \"hc\"\ntype = \"TCP\"\ninitial_state = \"{v}\"\n"
        )
    };
    let c = load_str(&text("HEALTHY"), "t.toml").unwrap_or_else(|d| panic!("{d}"));
    assert!(c.health_checks[0].initially_healthy);
    let err = load_str(&text("healthy"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.toml:8:") && err.contains("did you mean \"HEALTHY\""),
        "{err}"
    );
}

/// HC-6: an unhealthy backend owns no slot while a healthy one exists; its
/// snapshot entry says unhealthy (conntrack applies CT-8 from there).
#[test]
fn hc_6_unhealthy_backend_gets_no_new_connections() {
    let c = cfg(ZONAL);
    let st = Builder::new().build(&c, &["192.0.2.10"], 0);
    let sick = st.services[0]
        .backends
        .iter()
        .copied()
        .find(|&id| st.backend(id).unwrap().address.to_string() == "192.0.2.10")
        .unwrap();
    assert!(!st.backend(sick).unwrap().healthy);
    for t in &st.services[0].tables {
        assert!(t.slots.iter().all(|&s| s != sick));
    }
}

/// MG-1: the table size is the configured prime (655373 for large
/// services); the default is 65537; a non-prime is refused.
#[test]
fn mg_1_table_size_is_the_configured_prime() {
    let big = cfg(&ZONAL.replace("maglev_table_size = 251", "maglev_table_size = 655373"));
    let st = Builder::new().build(&big, &[], 0);
    assert_eq!(st.services[0].tables[0].slots.len(), 655_373);
    let default = cfg(&ZONAL.replace("maglev_table_size = 251\n", ""));
    assert_eq!(default.backend_services[0].maglev_table_size, 65_537);
    let text = ZONAL.replace("maglev_table_size = 251", "maglev_table_size = 65536");
    let err = std::panic::catch_unwind(|| cfg(&text));
    assert!(err.is_err(), "65536 is not prime");
}
