//! SPEC §3 (CT-1 … CT-11) against a reference model: random sequences of
//! packets (TCP SYN/ACK/FIN/RST, UDP, fragments, ESP, GRE, ICMP, IPv4 and
//! IPv6; half-open entries with their own timeout), health flips, backend
//! removals (draining), pool flips, table changes, clock jumps and sweeps, through the real shard and through a
//! plain `HashMap` model restating the spec; the chosen backend must agree
//! on every packet. 100,000 cases by default (`CONNTRACK_MODEL_CASES`).

mod conntrack_support;

use std::collections::HashMap;
use std::net::IpAddr;

use conntrack_support::*;
use proptest::prelude::*;
use sluice_core::affinity::SessionAffinity as A;
use sluice_core::ids::BackendId;
use sluice_core::service::{PersistenceOnUnhealthy as P, TrackingMode as M};
use sluice_core::time::Millis;
use sluice_core::wire::Ports;

#[derive(Clone, Debug)]
enum Op {
    Packet { client: u8, sport: u8, kind: u8 },
    Health { backend: u8, healthy: bool },
    Remove { backend: u8 },
    Flip,
    Reshuffle,
    Advance { ms: u64 },
    Sweep { slots: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..4, 0u8..3, 0u8..12).prop_map(|(client, sport, kind)| Op::Packet { client, sport, kind }),
        2 => (0u8..4, any::<bool>()).prop_map(|(backend, healthy)| Op::Health { backend, healthy }),
        1 => (0u8..4).prop_map(|backend| Op::Remove { backend }),
        1 => Just(Op::Flip),
        1 => Just(Op::Reshuffle),
        2 => prop_oneof![Just(1u64), Just(999), Just(4_999), Just(5_000), Just(20_000)]
            .prop_map(|ms| Op::Advance { ms }),
        1 => prop_oneof![Just(16usize), Just(4096)].prop_map(|slots| Op::Sweep { slots }),
    ]
}

fn packet(client: u8, sport: u8, kind: u8) -> Pkt {
    let (src, dst) = if client == 3 {
        ("2001:db8::7", "2001:db8::10")
    } else {
        (
            ["198.51.100.1", "198.51.100.2", "198.51.100.3"][client as usize],
            "203.0.113.10",
        )
    };
    let sport = 4000 + u16::from(sport);
    let mut p = match kind {
        0 => Pkt::tcp(src, sport, SYN),
        1 => Pkt::tcp(src, sport, SYN | ACK),
        2 | 3 => Pkt::tcp(src, sport, ACK),
        4 => Pkt::tcp(src, sport, FIN | ACK),
        5 => Pkt::tcp(src, sport, RST),
        6 => Pkt::udp(src, sport),
        7 => Pkt {
            fragmented: true,
            ..Pkt::udp(src, sport)
        },
        8 => Pkt::udp_later_fragment(src),
        9 => Pkt::other(src, ESP),
        10 => Pkt::other(src, GRE),
        _ => Pkt::other(src, if client == 3 { 58 } else { ICMP }),
    };
    p.dst = ip(dst);
    p
}

/// The reference model's key: SPEC §3's table written out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MKey {
    src: IpAddr,
    dst: IpAddr,
    proto: Option<u8>,
    ports: Option<Ports>,
}

#[derive(Clone, Debug)]
struct MEntry {
    backend: BackendId,
    epoch: u32,
    last_seen: Millis,
    /// Written by a SYN and hit by nothing but SYNs since: expires after
    /// the half-open timeout instead of the idle timeout.
    half_open: bool,
}

#[derive(Default)]
struct Model {
    table: HashMap<MKey, MEntry>,
}

impl Model {
    fn select(&mut self, w: &World, p: &Pkt) -> Option<BackendId> {
        let s = &w.state.services[0];
        let (aff, mode, pers) = (s.affinity, s.tracking.mode, s.tracking.persistence);
        let pick = w.table_choice(p);
        // CT-4.
        let tracked = match p.proto {
            TCP => true,
            UDP | ESP | GRE => aff != A::None,
            _ => false,
        };
        if !tracked {
            return pick; // CT-2
        }
        // CT-3 table.
        let five = (p.proto == TCP || p.proto == UDP) && !p.fragmented && p.ports.is_some();
        let key = match (mode, aff) {
            (M::PerSession, A::ClientIp) => MKey {
                src: p.src,
                dst: p.dst,
                proto: None,
                ports: None,
            },
            (M::PerSession, A::ClientIpProto) => MKey {
                src: p.src,
                dst: p.dst,
                proto: Some(p.proto),
                ports: None,
            },
            _ => MKey {
                src: p.src,
                dst: p.dst,
                proto: Some(p.proto),
                ports: if five { p.ports } else { None },
            },
        };
        let record = |t: &mut HashMap<MKey, MEntry>, b: BackendId, half_open: bool| {
            t.insert(
                key.clone(),
                MEntry {
                    backend: b,
                    epoch: s.pool_epoch,
                    last_seen: w.now,
                    half_open,
                },
            );
        };
        // CT-1.
        let syn = p.proto == TCP && p.flags & SYN != 0 && p.flags & ACK == 0;
        let five_affinity = aff == A::None || aff == A::ClientIpPortProto;
        if syn && (mode == M::PerConnection || five_affinity) {
            let b = pick?;
            record(&mut self.table, b, true);
            return Some(b);
        }
        // CT-5: idle for the whole timeout (the half-open one for an entry
        // only SYNs have matched) = absent.
        let timeout = |e: &MEntry| {
            if e.half_open {
                s.tracking.half_open_timeout_ms
            } else {
                s.tracking.idle_timeout_ms
            }
        };
        let live = self
            .table
            .get(&key)
            .filter(|e| w.now.0 - e.last_seen.0 < u64::from(timeout(e)))
            .cloned();
        let Some(e) = live else {
            let b = pick?;
            record(&mut self.table, b, syn);
            return Some(b);
        };
        let backend = w.state.backend(e.backend);
        let gone = backend.is_none()
            || backend.is_some_and(|b| b.draining_until.is_some_and(|d| w.now >= d)) // CT-10
            || (e.epoch != s.pool_epoch && !s.drain_on_failover); // CT-11
        let chosen = if gone {
            pick?
        } else if backend.is_some_and(|b| b.healthy) {
            e.backend
        } else {
            // CT-8.
            let persist = match (pers, mode) {
                (P::NeverPersist, _) => false,
                (P::DefaultForProtocol, M::PerConnection) => p.proto == TCP,
                (P::DefaultForProtocol, M::PerSession) => p.proto == TCP && five_affinity,
                (P::AlwaysPersist, M::PerConnection) => true,
                (P::AlwaysPersist, M::PerSession) => unreachable!("configuration error"),
            };
            match pick {
                Some(n) if !persist && w.state.backend(n).is_some_and(|b| b.healthy) => n,
                _ => e.backend,
            }
        };
        record(&mut self.table, chosen, e.half_open && syn);
        Some(chosen)
    }
}

fn config() -> impl Strategy<Value = (A, M, P, bool, u64)> {
    (
        prop_oneof![
            Just(A::None),
            Just(A::ClientIpPortProto),
            Just(A::ClientIpProto),
            Just(A::ClientIp)
        ],
        prop_oneof![Just(M::PerConnection), Just(M::PerSession)],
        prop_oneof![
            Just(P::DefaultForProtocol),
            Just(P::NeverPersist),
            Just(P::AlwaysPersist)
        ],
        any::<bool>(),
        prop_oneof![Just(0u64), Just(5_000)],
    )
        .prop_filter(
            "ALWAYS_PERSIST × PER_SESSION is refused by the config (CT-8)",
            |c| !(c.2 == P::AlwaysPersist && c.1 == M::PerSession),
        )
}

fn cases() -> u32 {
    std::env::var("CONNTRACK_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn ct_1_to_ct_11_shard_agrees_with_reference_model(
        (aff, mode, pers, drain_on_failover, draining) in config(),
        ops in proptest::collection::vec(op(), 1..24),
    ) {
        let mut w = World::new(4, aff, mode, pers);
        w.shard = sluice_core::conntrack::Shard::with_capacity_and_seed(256, 3);
        w.svc().drain_on_failover = drain_on_failover;
        w.svc().draining_timeout_ms = draining;
        w.svc().tracking.idle_timeout_ms = 10_000;
        w.svc().tracking.half_open_timeout_ms = 5_000;
        let mut model = Model::default();
        for (i, op) in ops.iter().enumerate() {
            match *op {
                Op::Packet { client, sport, kind } => {
                    let p = packet(client, sport, kind);
                    let want = model.select(&w, &p);
                    let got = w.send(&p);
                    prop_assert_eq!(got, want, "op {} {:?}", i, p);
                }
                Op::Health { backend, healthy } => w.set_healthy(u32::from(backend), healthy),
                Op::Remove { backend } => {
                    if w.state.backends[usize::from(backend)].as_ref().is_some_and(|b| b.draining_until.is_none()) {
                        w.remove(u32::from(backend));
                    }
                }
                Op::Flip => w.flip(),
                Op::Reshuffle => w.reshuffle(),
                Op::Advance { ms } => w.advance(ms),
                Op::Sweep { slots } => {
                    w.shard.sweep(w.now, slots);
                }
            }
        }
        prop_assert_eq!(w.shard.counters.insert_failed, 0);
    }
}
