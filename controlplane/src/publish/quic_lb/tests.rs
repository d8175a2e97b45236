//! The routing a build gives a QUIC-LB service: each server ID to its
//! backend's id, draining backends until their deadline, the inactive
//! pool, config rotation over reloads, and sharing while nothing changes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use sluice_core::ids::BackendId;
use sluice_core::quic_lb::{CidCodec, CidLengths, Decision, Fallback, QuicLbRouting, Server};
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;

use crate::config::{Config, Loader};
use crate::health::{probe_key, ProbeStatuses};
use crate::publish::*;
use crate::synthetic::{all_healthy, probe_status};

const KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];

fn key_hex() -> String {
    KEY.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file with a QUIC-LB service "quic" (backends 192.0.2.`host`, each
/// with its extra keys; `quic` its quic_lb tables), a service "other"
/// without QUIC-LB, both health-checked, and four more services without
/// rules (a reload that changes one service of six builds it alone).
fn render(backends: &[(u8, &str)], quic: &str) -> String {
    let mut t = String::from(
        "[dataplane]\n[[dataplane.port]]\nname = \"lan\"\ndevice = \"net_null0\"\n\
         address = \"192.0.2.1/24\"\n\n[[health_check]]\nname = \"tcp\"\ntype = \"TCP\"\n\
         port = 443\n\n[[backend_service]]\nname = \"quic\"\nmaglev_table_size = 251\n\
         health_check = \"tcp\"\nconnection_draining_timeout = \"30s\"\n\
         failover_policy = { failover_ratio = 0.5 }\nbackend = [\n",
    );
    for (host, extra) in backends {
        let _ = writeln!(
            t,
            "  {{ address = \"192.0.2.{host}\", mac = \"02:00:00:00:00:{host:02x}\"{extra} }},"
        );
    }
    t.push_str("]\n");
    t.push_str(quic);
    t.push_str(
        "\n[[backend_service]]\nname = \"other\"\nmaglev_table_size = 251\nhealth_check = \"tcp\"\n\
         backend = [\n  { address = \"192.0.2.50\", mac = \"02:00:00:00:00:50\" },\n]\n\n\
         [[forwarding_rule]]\nname = \"quic-vip\"\nvip = \"203.0.113.10\"\nprotocol = \"UDP\"\n\
         ports = \"443\"\nbackend_service = \"quic\"\n\n[[forwarding_rule]]\nname = \"other-vip\"\n\
         vip = \"203.0.113.11\"\nports = \"80\"\nbackend_service = \"other\"\n",
    );
    for i in 0..4 {
        let _ = write!(
            t,
            "\n[[backend_service]]\nname = \"f{i}\"\nmaglev_table_size = 251\nbackend = [\n  \
             {{ address = \"192.0.2.{}\", mac = \"02:00:00:00:00:01\" }},\n]\n",
            60 + i
        );
    }
    t
}

fn plain(config_id: u8) -> String {
    format!(
        "[[backend_service.quic_lb]]\nconfig_id = {config_id}\nserver_id_length = 3\nnonce_length = 6\n"
    )
}

fn encrypted(config_id: u8) -> String {
    plain(config_id) + &format!("key = \"{}\"\n", key_hex())
}

/// `quic_server_id = "0a0b<n>"` and, for config 1, `c0c0<n>`.
fn ids(n: u8) -> String {
    format!(", quic_server_id = \"0a0b{n:02x}\", quic_server_ids = {{ \"1\" = \"c0c0{n:02x}\" }}")
}

/// A short-header packet whose connection ID carries `sid` in config
/// `config_id` (encrypted with [`KEY`] when `key`).
fn packet(config_id: u8, key: bool, sid: [u8; 3]) -> Vec<u8> {
    let codec = CidCodec::new(
        CidLengths::new(config_id, 3, 6).unwrap(),
        key.then_some(KEY),
    );
    let cid = codec.encode(0x0c, &sid, &[1, 2, 3, 4, 5, 6]).unwrap();
    let mut p = vec![0x40];
    p.extend_from_slice(cid.as_bytes());
    p.extend_from_slice(&[0xee; 24]);
    p
}

fn address(st: &ForwardingState, id: BackendId) -> String {
    st.backend(id)
        .map_or("gone".into(), |b| b.address.to_string())
}

fn id_of(st: &ForwardingState, ip: &str) -> BackendId {
    let ip: IpAddr = ip.parse().unwrap();
    st.backends
        .iter()
        .flatten()
        .find(|b| b.address == ip && b.draining_until.is_none())
        .map(|b| b.id)
        .unwrap_or_else(|| panic!("no backend {ip}"))
}

fn routing(st: &ForwardingState) -> &QuicLbRouting {
    st.services[0].quic_lb.as_deref().expect("quic routing")
}

/// The routing by address: (config id, server ID) → (address, in the
/// inactive pool).
fn by_address(st: &ForwardingState) -> BTreeMap<(usize, u128), (String, bool)> {
    let mut out = BTreeMap::new();
    for (c, route) in routing(st).configs.iter().enumerate() {
        for (sid, s) in route.iter().flat_map(|r| &r.servers) {
            out.insert((c, *sid), (address(st, s.backend), s.inactive_pool));
        }
    }
    out
}

fn routes(st: &ForwardingState, config_id: u8, key: bool, sid: [u8; 3]) -> Decision {
    routing(st).route(&packet(config_id, key, sid))
}

/// Reloads as the control thread does: the changed services only when it
/// can (`patch`), else a full build.
struct Reloads {
    loader: Loader,
    ids: BackendIds,
    memory: PolicyMemory,
    last: Option<(Arc<Config>, ForwardingState, Vec<ServiceReport>)>,
    patch: bool,
    generation: u64,
    /// Reloads built by changed services only.
    patched: usize,
}

impl Reloads {
    fn new(patch: bool) -> Self {
        Self {
            loader: Loader::new(),
            ids: BackendIds::new(),
            memory: PolicyMemory::default(),
            last: None,
            patch,
            generation: 0,
            patched: 0,
        }
    }

    fn load(&mut self, text: &str, now: u64) -> &ForwardingState {
        let cfg = Arc::new(
            self.loader
                .load_str(text, "t.toml")
                .unwrap_or_else(|d| panic!("{d}")),
        );
        self.generation += 1;
        let inputs = BuildInputs {
            now: Millis(now),
            ..BuildInputs::default()
        };
        let patched = match &self.last {
            Some((old, prev, reports)) if self.patch => {
                changed_in_place(old, &cfg).and_then(|changed| {
                    rebuild_changed_services(
                        prev,
                        reports,
                        &cfg,
                        &changed,
                        &mut self.ids,
                        &mut self.memory,
                        &inputs,
                        self.generation,
                    )
                })
            }
            _ => None,
        };
        self.patched += usize::from(patched.is_some());
        let (st, reports) = patched.unwrap_or_else(|| {
            build_forwarding_state_with(
                &cfg,
                &[],
                &mut self.ids,
                &mut self.memory,
                &inputs,
                self.generation,
            )
        });
        self.ids.release(self.generation, Millis(now), 0, |_| {});
        self.last = Some((cfg, st, reports));
        self.state()
    }

    fn state(&self) -> &ForwardingState {
        &self.last.as_ref().expect("loaded").1
    }
}

/// Each server ID of each configuration routes to its backend's id,
/// plaintext and encrypted alike; other IDs take the ordinary path, and
/// a service without quic_lb has no routing.
#[test]
fn each_server_id_routes_to_its_backend() {
    let backends = [(10, ids(1)), (11, ids(2)), (12, ids(3))];
    let b: Vec<(u8, &str)> = backends.iter().map(|(h, e)| (*h, e.as_str())).collect();
    let c = crate::config::load_str(&render(&b, &(plain(0) + &encrypted(1))), "t").unwrap();
    let st = build_forwarding_state(&c, &[], &mut BackendIds::new(), 1);
    for (n, host) in [(1u8, 10), (2, 11), (3, 12)] {
        let id = id_of(&st, &format!("192.0.2.{host}"));
        let server = Decision::Routed(Server {
            backend: id,
            inactive_pool: false,
        });
        assert_eq!(
            routes(&st, 0, false, [0x0a, 0x0b, n]),
            server,
            "plaintext {host}"
        );
        assert_eq!(
            routes(&st, 1, true, [0xc0, 0xc0, n]),
            server,
            "encrypted {host}"
        );
    }
    assert_eq!(
        routes(&st, 0, false, [0x0a, 0x0b, 9]),
        Decision::Fallback(Fallback::UnknownServerId)
    );
    assert_eq!(
        routes(&st, 2, false, [0x0a, 0x0b, 1]),
        Decision::Fallback(Fallback::UnknownConfig)
    );
    let r = routing(&st);
    assert!(r.configs[1].as_ref().unwrap().codec.encrypted());
    assert!(!r.configs[0].as_ref().unwrap().codec.encrypted());
    assert_eq!(r.configs[0].as_ref().unwrap().servers.len(), 3);
    assert!(st.services[1].quic_lb.is_none(), "other");
}

/// A backend removed from the file keeps its server IDs, to its own id,
/// while it drains (CT-10); a new backend that takes one of its IDs wins
/// that one; past the deadline the rest are gone. Building only the
/// changed services gives what a full build gives.
#[test]
fn a_removed_backend_keeps_its_server_ids_while_it_drains() {
    let mut outcomes = Vec::new();
    for patch in [true, false] {
        let mut r = Reloads::new(patch);
        let quic = plain(0) + &encrypted(1);
        let v1 = [(10, ids(1)), (11, ids(2)), (12, ids(3))];
        let b = |v: &[(u8, String)]| -> Vec<(u8, String)> { v.to_vec() };
        let text = |v: &[(u8, String)]| {
            let b: Vec<(u8, &str)> = v.iter().map(|(h, e)| (*h, e.as_str())).collect();
            render(&b, &quic)
        };
        let st = r.load(&text(&b(&v1)), 1_000);
        let removed = id_of(st, "192.0.2.11");
        // .11 removed at 2 s: it drains until 32 s.
        let v2 = [(10, ids(1)), (12, ids(3))];
        let st = r.load(&text(&v2), 2_000);
        assert!(st.services[0].backends.contains(&removed));
        assert_eq!(
            st.backend(removed).unwrap().draining_until,
            Some(Millis(32_000))
        );
        let drains = Decision::Routed(Server {
            backend: removed,
            inactive_pool: false,
        });
        assert_eq!(routes(st, 0, false, [0x0a, 0x0b, 2]), drains);
        assert_eq!(routes(st, 1, true, [0xc0, 0xc0, 2]), drains);
        let mut seen = vec![by_address(st)];
        // .14 takes .11's plaintext ID (its config-1 ID is its own).
        let v3 = [
            (10, ids(1)),
            (12, ids(3)),
            (
                14,
                ", quic_server_id = \"0a0b02\", quic_server_ids = { \"1\" = \"c0c004\" }".into(),
            ),
        ];
        let st = r.load(&text(&v3), 3_000);
        let new = id_of(st, "192.0.2.14");
        assert_eq!(
            routes(st, 0, false, [0x0a, 0x0b, 2]),
            Decision::Routed(Server {
                backend: new,
                inactive_pool: false
            }),
            "the configured backend wins"
        );
        assert_eq!(routes(st, 1, true, [0xc0, 0xc0, 2]), drains);
        seen.push(by_address(st));
        // Past the deadline (a full build is due): .11 is gone.
        let st = r.load(&text(&v3), 40_000);
        assert!(!st.services[0].backends.contains(&removed));
        assert_eq!(
            routes(st, 1, true, [0xc0, 0xc0, 2]),
            Decision::Fallback(Fallback::UnknownServerId)
        );
        seen.push(by_address(st));
        outcomes.push(seen);
        assert_eq!(r.patched, if patch { 2 } else { 0 });
    }
    assert_eq!(
        outcomes[0], outcomes[1],
        "changed services only = full build"
    );
}

/// With a failover pool, the backends of the pool that is not active are
/// marked; a pool flip by health marks the others (the health path gives
/// what a full build gives). A health change that flips no pool, or that
/// touches another service, keeps the very same routing.
#[test]
fn inactive_pool_marks_the_pool_that_is_not_active() {
    let backends = [
        (10, ids(1)),
        (11, ids(2)),
        (12, ids(3) + ", failover = true"),
    ];
    let b: Vec<(u8, &str)> = backends.iter().map(|(h, e)| (*h, e.as_str())).collect();
    let c = crate::config::load_str(&render(&b, &(plain(0) + &encrypted(1))), "t").unwrap();
    let hc = &c.health_checks[0];
    let mut health = all_healthy(&c);
    let mut ids = BackendIds::new();
    let mut memory = PolicyMemory::default();
    let (first, reports) = build_forwarding_state_with(
        &c,
        &[],
        &mut ids,
        &mut memory,
        &BuildInputs::with_health(&health),
        1,
    );
    let flags = |st: &ForwardingState| -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = by_address(st).into_values().collect();
        v.dedup();
        v
    };
    let primary_active = [
        ("192.0.2.10".to_string(), false),
        ("192.0.2.11".to_string(), false),
        ("192.0.2.12".to_string(), true),
    ];
    assert_eq!(flags(&first)[..3], primary_active);
    let built = memory.quic_routings_built();
    assert_eq!(built, 1);

    // Another service's flip, and a primary's that leaves the primaries
    // at 1/2 (not below the ratio): the same routing.
    let flip = |health: &mut ProbeStatuses, addr: &str, service, position, healthy| {
        health.insert(probe_key(hc, addr.parse().unwrap()), probe_status(healthy));
        HealthChange {
            service,
            position,
            healthy,
            weight: 1,
        }
    };
    let other = flip(&mut health, "192.0.2.50", 1, 0, false);
    let one = flip(&mut health, "192.0.2.10", 0, 0, false);
    let (second, reports) = rebuild_services(&first, &reports, &c, &mut memory, &[other, one], 2);
    assert!(Arc::ptr_eq(
        second.services[0].quic_lb.as_ref().unwrap(),
        first.services[0].quic_lb.as_ref().unwrap()
    ));

    // Both primaries down: the failover pool is active.
    let two = flip(&mut health, "192.0.2.11", 0, 1, false);
    let (third, _) = rebuild_services(&second, &reports, &c, &mut memory, &[two], 3);
    let failover_active = [
        ("192.0.2.10".to_string(), true),
        ("192.0.2.11".to_string(), true),
        ("192.0.2.12".to_string(), false),
    ];
    assert_eq!(flags(&third)[..3], failover_active);
    let (full, _) = build_forwarding_state_with(
        &c,
        &[],
        &mut BackendIds::new(),
        &mut PolicyMemory::default(),
        &BuildInputs::with_health(&health),
        3,
    );
    assert_eq!(by_address(&third), by_address(&full));
    // The next full build with the same inputs reuses the flipped routing.
    let (fourth, _) = build_forwarding_state_with(
        &c,
        &[],
        &mut ids,
        &mut memory,
        &BuildInputs::with_health(&health),
        4,
    );
    assert!(Arc::ptr_eq(
        fourth.services[0].quic_lb.as_ref().unwrap(),
        third.services[0].quic_lb.as_ref().unwrap()
    ));
    assert_eq!(
        memory.quic_routings_built(),
        built,
        "no map rebuilt for health"
    );
}

/// Config rotation over reloads: config 1 added next to 0 (both route),
/// then 0 removed (only 1 routes); a reload that changes a backend's
/// quic_server_id on its line takes effect; a reload of another service
/// shares the routing.
#[test]
fn config_rotation_and_changed_server_ids_over_reloads() {
    for patch in [true, false] {
        let mut r = Reloads::new(patch);
        let v = [(10, ids(1)), (11, ids(2))];
        let b: Vec<(u8, &str)> = v.iter().map(|(h, e)| (*h, e.as_str())).collect();
        // Server IDs for config 1 come with config 1.
        let only0: Vec<(u8, String)> = [1u8, 2]
            .iter()
            .map(|n| (9 + n, format!(", quic_server_id = \"0a0b{n:02x}\"")))
            .collect();
        let b0: Vec<(u8, &str)> = only0.iter().map(|(h, e)| (*h, e.as_str())).collect();
        let st = r.load(&render(&b0, &plain(0)), 0);
        let id10 = id_of(st, "192.0.2.10");
        let to10 = Decision::Routed(Server {
            backend: id10,
            inactive_pool: false,
        });
        assert_eq!(routes(st, 0, false, [0x0a, 0x0b, 1]), to10);
        assert_eq!(
            routes(st, 1, true, [0xc0, 0xc0, 1]),
            Decision::Fallback(Fallback::UnknownConfig)
        );

        let st = r.load(&render(&b, &(plain(0) + &encrypted(1))), 0);
        assert_eq!(routes(st, 0, false, [0x0a, 0x0b, 1]), to10);
        assert_eq!(routes(st, 1, true, [0xc0, 0xc0, 1]), to10);

        let st = r.load(&render(&b, &encrypted(1)), 0);
        assert_eq!(
            routes(st, 0, false, [0x0a, 0x0b, 1]),
            Decision::Fallback(Fallback::UnknownConfig)
        );
        assert_eq!(routes(st, 1, true, [0xc0, 0xc0, 1]), to10);
        let before = Arc::clone(st.services[0].quic_lb.as_ref().unwrap());

        // Another service's reload: the same routing.
        let text = render(&b, &encrypted(1)).replace(
            "{ address = \"192.0.2.50\", mac = \"02:00:00:00:00:50\" }",
            "{ address = \"192.0.2.50\", mac = \"02:00:00:00:00:50\", weight = 2 }",
        );
        assert_ne!(text, render(&b, &encrypted(1)));
        let st = r.load(&text, 0);
        assert!(Arc::ptr_eq(
            st.services[0].quic_lb.as_ref().unwrap(),
            &before
        ));

        // Only .10's line changes: its new ID routes, the old one no more.
        let changed = text.replace("\"1\" = \"c0c001\"", "\"1\" = \"c0c0aa\"");
        assert_ne!(changed, text);
        r.load(&changed, 0);
        assert_eq!(r.loader.last_parsed(), Some(1));
        let st = r.state();
        assert_eq!(routes(st, 1, true, [0xc0, 0xc0, 0xaa]), to10);
        assert_eq!(
            routes(st, 1, true, [0xc0, 0xc0, 1]),
            Decision::Fallback(Fallback::UnknownServerId)
        );
        assert_eq!(r.patched, if patch { 4 } else { 0 });
    }
}
