use super::*;
use crate::config::{load_str, Config};
use crate::publish::build_forwarding_state;
use crate::publish::BackendIds;
use sluice_core::conntrack::{Addrs, PacketMeta, TrackKey};
use sluice_core::flow::TupleKind;
use sluice_core::wire::Ports;

const CFG: &str = r#"
[dataplane]
[[dataplane.port]]
name = "a"
device = "net_null0"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
connection_tracking = { idle_timeout = "90s" }
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
]
[[backend_service]]
name = "dns"
session_affinity = "CLIENT_IP"
backend = [ { address = "192.0.2.20", mac = "02:00:00:00:00:20" } ]

[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
ports = "80"
backend_service = "web"
[[forwarding_rule]]
name = "dns"
vip = "203.0.113.11"
protocol = "UDP"
backend_service = "dns"
"#;

fn cfg(text: &str) -> Config {
    load_str(text, "t").unwrap_or_else(|d| panic!("{d}"))
}

fn state(text: &str, ids: &mut BackendIds) -> ForwardingState {
    build_forwarding_state(&cfg(text), &[[2, 0, 0, 0, 0, 1]], ids, 1)
}

/// A TCP 5-tuple key of client 10.0.0.`client`:`port` to the web VIP.
fn web_key(client: u8, port: u16, service: ServiceId) -> TrackKey {
    let a = Addrs::new(
        std::net::Ipv4Addr::new(10, 0, 0, client).into(),
        "203.0.113.10".parse().unwrap(),
    );
    let m = PacketMeta {
        proto: 6,
        tcp_flags: 0x10,
        fragmented: false,
        ports: Some(Ports { src: port, dst: 80 }),
    };
    TrackKey::new(TupleKind::Five, &a, &m, service)
}

fn stamp() -> Stamp {
    Stamp {
        written_unix_ms: 1,
        writer: "test".into(),
        config: "/etc/sluice/sluice.toml".into(),
    }
}

/// The writer's entries, by service name and backend address, come back
/// in another process whose ids differ (services in another order, a
/// backend added before them).
#[test]
fn entries_come_back_under_the_next_process_ids() {
    let mut ids = BackendIds::new();
    let old = state(CFG, &mut ids);
    let web_old = ServiceId(0);
    let b11 = old.services[0].backends[1];
    let entries: Vec<Entry> = (0..10)
        .map(|i| {
            Entry::new(
                web_key(i, 40_000 + u16::from(i), web_old),
                b11,
                0,
                Millis(50_000),
                90_000,
            )
        })
        .collect();
    let file = collect(
        &[ShardOut {
            now: Millis(60_000),
            entries,
        }],
        &old,
        stamp(),
    );
    assert_eq!(file.connections.len(), 10);
    let file = HandOff::decode(&file.encode()).unwrap();

    // The next configuration lists dns first and web with a new backend
    // in front: every id differs.
    let at = CFG.find("[[backend_service]]").unwrap();
    let web_at = CFG.find("[[backend_service]]\nname = \"dns\"").unwrap();
    let rules_at = CFG.find("[[forwarding_rule]]").unwrap();
    let web = CFG[at..web_at].replace(
        "backend = [\n",
        "backend = [\n  { address = \"192.0.2.9\", mac = \"02:00:00:00:00:09\" },\n",
    );
    let reordered = format!(
        "{}{}{web}{}",
        &CFG[..at],
        &CFG[web_at..rules_at],
        &CFG[rules_at..]
    );
    let mut new_ids = BackendIds::new();
    let new = state(&reordered, &mut new_ids);
    assert_eq!(new.services[1].name, "web");
    let web_new = ServiceId(1);
    let b11_new = new_ids.get("web", "192.0.2.11".parse().unwrap()).unwrap();
    assert_ne!(b11_new, b11);

    let placed = place(
        &file,
        &new,
        Millis(1_000_000),
        2_000,
        Owners::ByKey(sluice_core::steering::Owners::Hash { workers: 2 }),
    );
    assert_eq!(placed.taken, 10);
    assert_eq!(placed.dropped, Dropped::default());
    let all: Vec<&Entry> = placed.per_worker.iter().flatten().collect();
    assert_eq!(all.len(), 10);
    for e in &all {
        assert_eq!(e.key.service(), web_new);
        assert_eq!(e.backend, b11_new);
        // Idle 10 s at the stop, 2 s of gap.
        assert_eq!(e.last_seen(), Millis(1_000_000 - 12_000));
        assert_eq!(e.pool_epoch, new.services[1].pool_epoch);
    }
    // Each in the shard its owner uses.
    for (w, shard) in placed.per_worker.iter().enumerate() {
        for e in shard {
            assert_eq!(sluice_core::steering::owner_of_key(&e.key, 2), w);
        }
    }
}

/// What no longer makes sense is dropped, each under its reason.
#[test]
fn connections_that_lost_their_meaning_are_counted_by_reason() {
    let mut ids = BackendIds::new();
    let old = state(CFG, &mut ids);
    let b10 = old.services[0].backends[0];
    let b11 = old.services[0].backends[1];
    let dns_b = old.services[1].backends[0];
    let dns_key = {
        let a = Addrs::new("10.0.0.1".parse().unwrap(), "203.0.113.11".parse().unwrap());
        let m = PacketMeta {
            proto: 17,
            tcp_flags: 0,
            fragmented: false,
            ports: Some(Ports { src: 5353, dst: 53 }),
        };
        TrackKey::new(TupleKind::Two, &a, &m, ServiceId(1))
    };
    let entries = vec![
        Entry::new(web_key(1, 1, ServiceId(0)), b10, 0, Millis(100_000), 90_000),
        Entry::new(web_key(2, 2, ServiceId(0)), b11, 0, Millis(100_000), 90_000),
        // Idle 80 s of 90 s: 10 s of gap expire it.
        Entry::new(web_key(3, 3, ServiceId(0)), b10, 0, Millis(20_000), 90_000),
        Entry::new(dns_key, dns_b, 0, Millis(100_000), 60_000),
    ];
    let file = collect(
        &[ShardOut {
            now: Millis(100_000),
            entries,
        }],
        &old,
        stamp(),
    );
    // 192.0.2.11 removed; dns keyed by 5-tuple now.
    let next = CFG
        .replace(
            "  { address = \"192.0.2.11\", mac = \"02:00:00:00:00:11\" },\n",
            "",
        )
        .replace(
            "session_affinity = \"CLIENT_IP\"",
            "session_affinity = \"CLIENT_IP_PORT_PROTO\"",
        );
    let mut new_ids = BackendIds::new();
    let new = state(&next, &mut new_ids);
    let placed = place(
        &file,
        &new,
        Millis(500_000),
        10_000,
        Owners::ByKey(sluice_core::steering::Owners::Hash { workers: 1 }),
    );
    assert_eq!(placed.taken, 1);
    assert_eq!(
        placed.dropped,
        Dropped {
            service_gone: 0,
            backend_gone: 1,
            tracking_changed: 1,
            expired: 1,
        }
    );
    // Without the dns service at all.
    let no_dns = next[..next.find("[[backend_service]]\nname = \"dns\"").unwrap()].to_string()
        + "[[forwarding_rule]]\nname = \"web\"\nvip = \"203.0.113.10\"\nports = \"80\"\nbackend_service = \"web\"\n";
    let new = state(&no_dns, &mut BackendIds::new());
    let placed = place(
        &file,
        &new,
        Millis(500_000),
        10_000,
        Owners::ByKey(sluice_core::steering::Owners::Hash { workers: 1 }),
    );
    assert_eq!(placed.dropped.service_gone, 1);
}

/// A clock younger than an entry's idleness shortens its timeout instead
/// of making it younger; a half-open entry stays half-open; an entry of
/// the pool that is no longer in force keeps an epoch that is not the
/// service's (CT-11); with the NIC choosing owners every shard gets it.
#[test]
fn time_pool_and_copies() {
    let mut ids = BackendIds::new();
    let old = state(CFG, &mut ids);
    let b10 = old.services[0].backends[0];
    let epoch = old.services[0].pool_epoch;
    let entries = vec![
        Entry::new(
            web_key(1, 1, ServiceId(0)),
            b10,
            epoch,
            Millis(30_000),
            90_000,
        )
        .half_open(),
        Entry::new(
            web_key(2, 2, ServiceId(0)),
            b10,
            epoch.wrapping_add(7),
            Millis(30_000),
            90_000,
        ),
    ];
    let file = collect(
        &[ShardOut {
            now: Millis(40_000),
            entries,
        }],
        &old,
        stamp(),
    );
    let new = state(CFG, &mut BackendIds::new());
    let placed = place(
        &file,
        &new,
        Millis(3_000),
        1_000,
        Owners::Every { workers: 3 },
    );
    assert_eq!(placed.taken, 2);
    assert!(placed.per_worker.iter().all(|s| s.len() == 2));
    let e = placed.per_worker[2][0];
    assert!(e.is_half_open());
    // Idle 11 s, clock at 3 s: last seen at 0, 79 s left.
    assert_eq!(
        (e.last_seen(), e.idle_timeout_ms),
        (Millis(0), 90_000 - 8_000)
    );
    assert!(!e.expired(Millis(3_000 + 78_999)));
    assert!(e.expired(Millis(3_000 + 79_000)));
    assert_eq!(e.pool_epoch, new.services[0].pool_epoch);
    let other = placed.per_worker[0][1];
    assert_ne!(other.pool_epoch, new.services[0].pool_epoch);
}
