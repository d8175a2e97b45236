//! SPEC §3, one test per rule and table cell (CT-1 … CT-11), on a simulated
//! clock through the real shard and `conntrack::select`.

mod conntrack_support;

use conntrack_support::*;
use sluice_core::affinity::SessionAffinity as A;
use sluice_core::conntrack::policy::{key_tuple, persists, trackable};
use sluice_core::conntrack::{Entry, Shard};
use sluice_core::flow::TupleKind;
use sluice_core::ids::BackendId;
use sluice_core::service::{PersistenceOnUnhealthy as P, TrackingMode as M};
use sluice_core::time::Millis;

const ALL_AFFINITIES: [A; 4] = [A::None, A::ClientIpPortProto, A::ClientIpProto, A::ClientIp];

fn world(a: A, m: M, p: P) -> World {
    World::new(3, a, m, p)
}

/// Sends `p`, then moves the table (CT-7 stand-in) until `p`'s table choice
/// differs from where it went; returns (first backend, table's new choice).
fn establish_then_move_table(w: &mut World, p: &Pkt) -> (BackendId, BackendId) {
    let first = w.send(p).unwrap();
    w.reshuffle();
    let now = w.table_choice(p).unwrap();
    assert_ne!(first, now, "rotation moves every slot");
    (first, now)
}

#[test]
fn ct_1_syn_per_connection_always_new() {
    for a in ALL_AFFINITIES {
        let mut w = world(a, M::PerConnection, P::DefaultForProtocol);
        let ack = Pkt::tcp("198.51.100.1", 4000, ACK);
        let (first, moved) = establish_then_move_table(&mut w, &ack);
        assert_eq!(w.send(&ack), Some(first), "{a:?}: tracked");
        let syn = Pkt::tcp("198.51.100.1", 4000, SYN);
        assert_eq!(w.send(&syn), Some(moved), "{a:?}: SYN is new");
        // ... and the SYN's choice is what the connection now follows.
        w.reshuffle();
        assert_eq!(w.send(&ack), Some(moved), "{a:?}");
    }
}

#[test]
fn ct_1_syn_per_session_none_and_client_ip_port_proto_new() {
    for a in [A::None, A::ClientIpPortProto] {
        let mut w = world(a, M::PerSession, P::DefaultForProtocol);
        let ack = Pkt::tcp("198.51.100.1", 4000, ACK);
        let (_, moved) = establish_then_move_table(&mut w, &ack);
        assert_eq!(w.send(&Pkt::tcp("198.51.100.1", 4000, SYN)), Some(moved));
    }
}

#[test]
fn ct_1_syn_per_session_client_ip_and_proto_looks_up() {
    for a in [A::ClientIpProto, A::ClientIp] {
        let mut w = world(a, M::PerSession, P::DefaultForProtocol);
        let ack = Pkt::tcp("198.51.100.1", 4000, ACK);
        let (first, _) = establish_then_move_table(&mut w, &ack);
        // A SYN of another connection of the same session follows the entry.
        assert_eq!(w.send(&Pkt::tcp("198.51.100.1", 5555, SYN)), Some(first));
    }
}

#[test]
fn ct_1_syn_ack_is_not_a_syn() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, _) = establish_then_move_table(&mut w, &p);
    assert_eq!(
        w.send(&Pkt::tcp("198.51.100.1", 4000, SYN | ACK)),
        Some(first)
    );
}

#[test]
fn ct_2_not_trackable_hashes_every_time_and_records_nothing() {
    for (a, p) in [
        (A::None, Pkt::udp("198.51.100.1", 53)),
        (A::None, Pkt::other("198.51.100.1", ESP)),
        (A::None, Pkt::other("198.51.100.1", GRE)),
        (A::ClientIp, Pkt::other("198.51.100.1", ICMP)),
        (A::ClientIpProto, Pkt::other("198.51.100.1", 58)),
    ] {
        let mut w = world(a, M::PerConnection, P::DefaultForProtocol);
        let (_, moved) = establish_then_move_table(&mut w, &p);
        assert_eq!(w.send(&p), Some(moved), "{a:?} {}", p.proto);
        assert!(w.shard.is_empty(), "{a:?} {}: no entry", p.proto);
    }
}

#[test]
fn ct_3_miss_records_hit_follows() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, _) = establish_then_move_table(&mut w, &p);
    assert_eq!(w.send(&p), Some(first));
    assert_eq!(w.shard.len(), 1);
    assert_eq!(w.shard.counters.misses, 1);
    assert_eq!(w.shard.counters.hits, 1);
    assert_eq!(w.shard.counters.inserts, 1);
}

#[test]
fn ct_4_trackability_every_protocol_and_affinity() {
    for a in ALL_AFFINITIES {
        assert!(trackable(TCP, a), "TCP under {a:?}");
        for proto in [UDP, ESP, GRE] {
            assert_eq!(trackable(proto, a), a != A::None, "{proto} under {a:?}");
        }
        assert!(!trackable(ICMP, a));
        assert!(!trackable(58, a), "ICMPv6");
    }
    // And in behaviour: ESP and GRE are tracked under CLIENT_IP_PROTO.
    for proto in [ESP, GRE, UDP] {
        let mut w = world(A::ClientIpProto, M::PerConnection, P::DefaultForProtocol);
        let p = Pkt::other("198.51.100.1", proto);
        let (first, _) = establish_then_move_table(&mut w, &p);
        assert_eq!(w.send(&p), Some(first), "{proto}");
    }
}

/// CT-3's table, every cell: (affinity, mode) × (TCP, unfragmented UDP,
/// fragmented UDP, ESP).
#[test]
fn ct_3_tracking_key_table_every_cell() {
    use TupleKind::*;
    let tcp = Pkt::tcp("198.51.100.1", 4000, ACK).meta();
    let udp = Pkt::udp("198.51.100.1", 4000).meta();
    let frag = Pkt::udp_later_fragment("198.51.100.1").meta();
    let mut first_frag = udp;
    first_frag.fragmented = true;
    let esp = Pkt::other("198.51.100.1", ESP).meta();
    for a in ALL_AFFINITIES {
        for m in [M::PerConnection, M::PerSession] {
            let expect = |five: TupleKind| -> [Option<TupleKind>; 5] {
                let t = |x| if a == A::None { None } else { Some(x) };
                match (m, a) {
                    (M::PerSession, A::ClientIpProto) => {
                        [Some(Three), t(Three), t(Three), t(Three), t(Three)]
                    }
                    (M::PerSession, A::ClientIp) => [Some(Two), t(Two), t(Two), t(Two), t(Two)],
                    _ => [Some(five), t(five), t(Three), t(Three), t(Three)],
                }
            };
            let got = [
                key_tuple(m, a, &tcp),
                key_tuple(m, a, &udp),
                key_tuple(m, a, &first_frag),
                key_tuple(m, a, &frag),
                key_tuple(m, a, &esp),
            ];
            assert_eq!(got, expect(Five), "{a:?} {m:?}");
        }
    }
}

/// CT-3, PER_SESSION × CLIENT_IP: one 2-tuple entry for every protocol
/// and port of the client; PER_CONNECTION × CLIENT_IP: per connection.
#[test]
fn ct_3_per_session_client_ip_shares_one_entry() {
    let mut w = world(A::ClientIp, M::PerSession, P::DefaultForProtocol);
    let a = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, _) = establish_then_move_table(&mut w, &a);
    assert_eq!(w.send(&Pkt::tcp("198.51.100.1", 4001, ACK)), Some(first));
    assert_eq!(w.send(&Pkt::udp("198.51.100.1", 9)), Some(first));
    assert_eq!(
        w.send(&Pkt::udp_later_fragment("198.51.100.1")),
        Some(first)
    );
    assert_eq!(w.shard.len(), 1);

    let mut w = world(A::ClientIp, M::PerConnection, P::DefaultForProtocol);
    let (_, moved) = establish_then_move_table(&mut w, &a);
    // Same 2-tuple hash, but another connection: a new entry, new choice.
    assert_eq!(w.send(&Pkt::tcp("198.51.100.1", 4001, ACK)), Some(moved));
    assert_eq!(w.shard.len(), 2);
}

#[test]
fn ct_5_idle_timeout_expires_by_compare_and_sweep() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    w.svc().tracking.idle_timeout_ms = 5_000;
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, moved) = establish_then_move_table(&mut w, &p);
    w.advance(4_999);
    assert_eq!(w.send(&p), Some(first), "refreshed just before the timeout");
    w.advance(5_000);
    assert_eq!(w.send(&p), Some(moved), "idle for the whole timeout: new");
    assert_eq!(w.shard.counters.expirations, 1);
    // The sweep reclaims without a lookup.
    let q = Pkt::tcp("198.51.100.2", 4000, ACK);
    w.send(&q);
    assert_eq!(w.shard.len(), 2);
    w.advance(5_000);
    let slots = w.shard.slots();
    assert_eq!(w.shard.sweep(w.now, slots), 2);
    assert!(w.shard.is_empty());
    // A swept key is gone from its home slot too: the next packet is a
    // plain miss (no second expiry counted) and a fresh entry.
    let expired = w.shard.counters.expirations;
    let misses = w.shard.counters.misses;
    w.send(&q);
    assert_eq!(w.shard.counters.expirations, expired);
    assert_eq!(w.shard.counters.misses, misses + 1);
    assert_eq!(w.shard.len(), 1);
}

#[test]
fn ct_6_fin_and_rst_keep_the_entry() {
    for flag in [FIN | ACK, RST, RST | ACK] {
        let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
        let p = Pkt::tcp("198.51.100.1", 4000, ACK);
        let (first, _) = establish_then_move_table(&mut w, &p);
        assert_eq!(w.send(&Pkt::tcp("198.51.100.1", 4000, flag)), Some(first));
        assert_eq!(w.send(&p), Some(first), "entry survives {flag:#x}");
        assert_eq!(w.shard.len(), 1);
    }
}

#[test]
fn ct_7_weight_changes_and_additions_do_not_move_tracked_flows() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let flows: Vec<Pkt> = (0..50)
        .map(|i| Pkt::tcp("198.51.100.1", 4000 + i, ACK))
        .collect();
    let before: Vec<_> = flows.iter().map(|p| w.send(p)).collect();
    // Weight change stand-in, then a backend addition.
    w.reshuffle();
    w.state
        .backends
        .push(w.state.backends[0].clone().map(|mut b| {
            b.id = BackendId(3);
            b
        }));
    w.svc().backends.push(BackendId(3));
    w.rebuild();
    let after: Vec<_> = flows.iter().map(|p| w.send(p)).collect();
    assert_eq!(before, after);
}

/// CT-8: send an established flow, mark its backend unhealthy, and report
/// whether the next packet stayed.
fn persisted(a: A, m: M, p: P, pkt: &Pkt) -> bool {
    let mut w = world(a, m, p);
    let first = w.send(pkt).unwrap();
    w.set_healthy(first.0, false);
    let next = w.send(pkt).unwrap();
    if next != first {
        assert_eq!(w.shard.counters.reselected_unhealthy, 1);
        assert!(w.state.backend(next).unwrap().healthy);
        // The entry was rewritten: healthy again, it stays on the new one.
        w.set_healthy(first.0, true);
        assert_eq!(w.send(pkt), Some(next));
    }
    next == first
}

fn udp_like() -> [Pkt; 3] {
    [
        Pkt::udp("198.51.100.1", 4000),
        Pkt::other("198.51.100.1", ESP),
        Pkt::other("198.51.100.1", GRE),
    ]
}

#[test]
fn ct_8_default_per_connection_tcp_persists_others_do_not() {
    let tcp = Pkt::tcp("198.51.100.1", 4000, ACK);
    for a in ALL_AFFINITIES {
        assert!(persisted(a, M::PerConnection, P::DefaultForProtocol, &tcp));
        if a != A::None {
            for p in udp_like() {
                assert!(!persisted(a, M::PerConnection, P::DefaultForProtocol, &p));
            }
        }
    }
}

#[test]
fn ct_8_default_per_session_tcp_persists_only_with_5_tuple_affinities() {
    let tcp = Pkt::tcp("198.51.100.1", 4000, ACK);
    for a in ALL_AFFINITIES {
        let expect = matches!(a, A::None | A::ClientIpPortProto);
        assert_eq!(
            persisted(a, M::PerSession, P::DefaultForProtocol, &tcp),
            expect,
            "{a:?}"
        );
        if a != A::None {
            for p in udp_like() {
                assert!(!persisted(a, M::PerSession, P::DefaultForProtocol, &p));
            }
        }
    }
}

#[test]
fn ct_8_never_persist_nothing_persists_in_either_mode() {
    for m in [M::PerConnection, M::PerSession] {
        for a in ALL_AFFINITIES {
            let tcp = Pkt::tcp("198.51.100.1", 4000, ACK);
            assert!(!persisted(a, m, P::NeverPersist, &tcp), "{a:?} {m:?}");
            if a != A::None {
                for p in udp_like() {
                    assert!(!persisted(a, m, P::NeverPersist, &p));
                }
            }
        }
    }
}

#[test]
fn ct_8_always_persist_per_connection_tcp_and_tracked_udp_esp_gre() {
    let tcp = Pkt::tcp("198.51.100.1", 4000, ACK);
    for a in ALL_AFFINITIES {
        assert!(persisted(a, M::PerConnection, P::AlwaysPersist, &tcp));
        if a != A::None {
            for p in udp_like() {
                assert!(persisted(a, M::PerConnection, P::AlwaysPersist, &p));
            }
        }
    }
    // ICMP: n/a (never tracked).
    assert!(!trackable(ICMP, A::ClientIp));
}

/// `ALWAYS_PERSIST` × `PER_SESSION` is a configuration error (tested in
/// controlplane's config tests); a hand-built snapshot falls back to the
/// protocol default.
#[test]
fn ct_8_always_persist_per_session_falls_back_to_default() {
    for a in ALL_AFFINITIES {
        for proto in [TCP, UDP, ESP, GRE] {
            assert_eq!(
                persists(P::AlwaysPersist, M::PerSession, a, proto),
                persists(P::DefaultForProtocol, M::PerSession, a, proto)
            );
        }
    }
}

#[test]
fn ct_8_no_healthy_backend_stays_put() {
    let mut w = world(A::ClientIp, M::PerConnection, P::NeverPersist);
    let p = Pkt::udp("198.51.100.1", 4000);
    let first = w.send(&p).unwrap();
    for id in 0..3 {
        w.backend(id).healthy = false;
    }
    w.reshuffle(); // EL-1: all backends, in another layout
    assert_ne!(w.table_choice(&p), Some(first));
    assert_eq!(w.send(&p), Some(first));
    assert_eq!(w.shard.counters.reselected_unhealthy, 0);
}

#[test]
fn ct_9_syn_always_picks_a_healthy_backend() {
    for m in [M::PerConnection, M::PerSession] {
        for a in ALL_AFFINITIES {
            for p in [P::DefaultForProtocol, P::NeverPersist] {
                let mut w = world(a, m, p);
                let syn = Pkt::tcp("198.51.100.1", 4000, SYN);
                let first = w.send(&syn).unwrap();
                w.set_healthy(first.0, false);
                // The client got an RST and retries with the same tuple.
                let retry = w.send(&syn).unwrap();
                assert!(w.state.backend(retry).unwrap().healthy, "{a:?} {m:?} {p:?}");
            }
        }
    }
}

#[test]
fn ct_10_draining_keeps_entries_until_the_deadline() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    w.svc().draining_timeout_ms = 10_000;
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let first = w.send(&p).unwrap();
    w.remove(first.0);
    w.advance(9_999);
    assert_eq!(w.send(&p), Some(first), "still draining");
    // New connections never go there.
    for sp in 0..200 {
        assert_ne!(w.send(&Pkt::tcp("198.51.100.9", sp, SYN)), Some(first));
    }
    w.advance(1);
    let after = w.send(&p).unwrap();
    assert_ne!(after, first, "deadline passed: re-selected");
}

#[test]
fn ct_10_zero_draining_timeout_cuts_at_once() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let first = w.send(&p).unwrap();
    w.remove(first.0);
    assert_ne!(w.send(&p), Some(first));
}

#[test]
fn ct_11_pool_flip_invalidates_without_drain_on_failover() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    w.svc().drain_on_failover = false;
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, moved) = establish_then_move_table(&mut w, &p);
    assert_eq!(w.send(&p), Some(first));
    w.flip();
    assert_eq!(w.send(&p), Some(moved), "invalidated: re-selected");
    w.reshuffle();
    assert_eq!(w.send(&p), Some(moved), "re-recorded under the new epoch");
}

#[test]
fn ct_11_pool_flip_keeps_entries_with_drain_on_failover() {
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    let (first, _) = establish_then_move_table(&mut w, &p);
    w.flip();
    assert_eq!(w.send(&p), Some(first));
    // Later turning drain_on_failover off does not retroactively cut an
    // entry that already lived through the flip.
    w.svc().drain_on_failover = false;
    assert_eq!(w.send(&p), Some(first));
}

#[test]
fn entry_is_one_cache_line_for_v4_and_v6() {
    assert!(std::mem::size_of::<Entry>() <= 64);
    assert_eq!(std::mem::align_of::<Entry>(), 64);
    assert_eq!(Shard::bytes_per_slot(), 68);
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    let mut p6 = Pkt::tcp("2001:db8::1", 4000, ACK);
    p6.dst = ip("2001:db8::10");
    let (first, _) = establish_then_move_table(&mut w, &p6);
    assert_eq!(w.send(&p6), Some(first), "IPv6 keys tracked alike");
    let _ = Millis(0);
}

/// CT-7 with zonal affinity (§6): a new flow takes its client zone's table
/// (ZA-3); once recorded it stays when the zonal tables change or zonal
/// affinity is switched off.
#[test]
fn ct_7_zonal_affinity_does_not_move_established_flows() {
    use sluice_core::conntrack::{self, Addrs};
    use sluice_core::maglev_table::MaglevTable;
    use sluice_core::zones::{Zone, ZoneMap};
    let mut w = world(A::None, M::PerConnection, P::DefaultForProtocol);
    w.state.zones = ZoneMap {
        zones: vec![Zone {
            name: "z0".into(),
            subnets: vec![(ip("198.51.100.0"), 24)],
        }],
    };
    // Zone 0's table: backend 2 only.
    let zone_table = MaglevTable {
        slots: vec![BackendId(2); 7].into(),
    };
    w.svc().tables.push(zone_table.into());
    let send = |w: &mut World, p: &Pkt| {
        let s = &w.state.services[0];
        conntrack::select(
            &mut w.shard,
            &p.meta(),
            &Addrs::new(p.src, p.dst),
            SVC,
            s,
            || s.table_for_client(&w.state.zones, p.src),
            &w.state,
            p.hash(s.affinity),
            w.now,
        )
    };
    let p = Pkt::tcp("198.51.100.1", 4000, ACK);
    assert_eq!(send(&mut w, &p), Some(BackendId(2)), "ZA-3: zone table");
    let outside = Pkt::tcp("192.0.2.1", 4000, ACK);
    assert_eq!(send(&mut w, &outside), w.table_choice(&outside), "no zone");
    // The zone table moves, then zonal affinity goes away: still backend 2.
    w.svc().tables[1] = MaglevTable {
        slots: vec![BackendId(0); 7].into(),
    }
    .into();
    assert_eq!(send(&mut w, &p), Some(BackendId(2)));
    w.svc().tables.truncate(1);
    assert_eq!(send(&mut w, &p), Some(BackendId(2)));
    // A new connection of that client follows the current tables.
    let syn = Pkt::tcp("198.51.100.1", 4001, SYN);
    assert_eq!(send(&mut w, &syn), w.table_choice(&syn));
}
