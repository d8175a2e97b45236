//! QUIC-LB on the packet path: UDP packets of a service with QUIC-LB
//! configurations go to the backend their connection ID names, whatever
//! the client's address and port, without a conntrack entry; every other
//! packet of the service takes the ordinary path (CT-3: a 5-tuple entry,
//! the Maglev table) and is counted under its reason. The named backend
//! keeps its connections as a conntrack entry would (CT-7, CT-8, CT-10,
//! CT-11). Through `pipeline::process` (IPv4 fast path and the general
//! path, IPv6) and the staged burst, which must agree.

mod common;

use std::sync::Arc;

use common::state::*;
use common::*;
use proptest::prelude::*;
use sluice_core::affinity::SessionAffinity;
use sluice_core::burst::{BurstStages, Outcome};
use sluice_core::fast_path::classify_ipv4;
use sluice_core::ids::BackendId;
use sluice_core::packet::VecPacket;
use sluice_core::pipeline::{classify_general, process, PipelineCtx, Verdict};
use sluice_core::quic_lb::cid::{CidCodec, CidLengths};
use sluice_core::quic_lb::{ConfigRoute, Fallback, QuicLbRouting, Server};
use sluice_core::service::PersistenceOnUnhealthy;
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;

const KEY: [u8; 16] = [
    0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f,
];

/// Config 0: plaintext, 1-byte server IDs 0x0a (backend 0) and 0x0b
/// (backend 1). Config 1: encrypted four-pass, 2-byte IDs 0x0a0a and
/// 0x0b0b. Config 2: the single-pass case, 3 + 13 bytes.
fn codecs() -> [(CidCodec, [Vec<u8>; 2]); 3] {
    [
        (
            CidCodec::new(CidLengths::new(0, 1, 4).unwrap(), None),
            [vec![0x0a], vec![0x0b]],
        ),
        (
            CidCodec::new(CidLengths::new(1, 2, 6).unwrap(), Some(KEY)),
            [vec![0x0a, 0x0a], vec![0x0b, 0x0b]],
        ),
        (
            CidCodec::new(CidLengths::new(2, 3, 13).unwrap(), Some(KEY)),
            [vec![1, 2, 3], vec![4, 5, 6]],
        ),
    ]
}

fn routing() -> QuicLbRouting {
    let mut r = QuicLbRouting::default();
    for (codec, ids) in codecs() {
        let config = usize::from(codec.lengths().config_id);
        let servers = ids
            .iter()
            .enumerate()
            .map(|(b, id)| {
                let server = Server {
                    backend: BackendId(b as u32),
                    inactive_pool: false,
                };
                (sluice_core::quic_lb::cid::server_id_value(id), server)
            })
            .collect();
        r.configs[config] = Some(ConfigRoute { codec, servers });
    }
    r
}

/// The shared test state with QUIC-LB on its IPv4 UDP service and its
/// IPv6 service, both under CLIENT_IP_PORT_PROTO affinity, which tracks
/// UDP (CT-4).
fn quic_state() -> ForwardingState {
    quic_state_with(SessionAffinity::ClientIpPortProto)
}

fn quic_state_with(affinity: SessionAffinity) -> ForwardingState {
    let mut st = state();
    let routing = Arc::new(routing());
    for svc in [SVC_UDP_GRE, SVC_V6_GUE] {
        st.services[usize::from(svc)].quic_lb = Some(Arc::clone(&routing));
        st.services[usize::from(svc)].affinity = affinity;
    }
    st
}

/// A short-header packet's payload to `backend` under config `config`.
fn short_header(config: usize, backend: usize, nonce_seed: u8) -> Vec<u8> {
    let (codec, ids) = &codecs()[config];
    let nonce: Vec<u8> = (0..codec.lengths().nonce)
        .map(|i| i.wrapping_mul(29) ^ nonce_seed)
        .collect();
    let cid = codec.encode(nonce_seed, &ids[backend], &nonce).unwrap();
    let mut p = vec![0x41];
    p.extend_from_slice(cid.as_bytes());
    p.extend_from_slice(&[0x5a; 24]);
    p
}

/// A QUIC v1 long-header packet of `kind` (0 Initial … 3 Retry).
fn long_header(kind: u8, dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0xc0 | (kind << 4)];
    p.extend_from_slice(&1u32.to_be_bytes());
    p.push(dcid.len() as u8);
    p.extend_from_slice(dcid);
    p.push(8);
    p.extend_from_slice(&[0x33; 8]);
    p.extend_from_slice(&[0; 40]);
    p
}

fn udp4(client: [u8; 4], sport: u16, payload: &[u8]) -> Vec<u8> {
    let l4 = udp(sport, 443, payload);
    eth(&[], ETH_IPV4, &ipv4(client.into(), v4(VIP4), UDP, DF, &l4))
}

fn udp6(client: &str, sport: u16, payload: &[u8]) -> Vec<u8> {
    let l4 = udp(sport, 443, payload);
    eth(&[], ETH_IPV6, &ipv6(v6(client), v6(VIP6), UDP, &l4))
}

fn backend_of(v: Verdict) -> Option<BackendId> {
    match v {
        Verdict::Forward { backend, .. } | Verdict::Fragment { backend, .. } => Some(backend),
        _ => None,
    }
}

fn send(st: &ForwardingState, ctx: &mut PipelineCtx, frame: &[u8]) -> Option<BackendId> {
    let mut pkt = VecPacket::new(frame);
    backend_of(process(&mut pkt, 0, st, ctx))
}

/// A client that moves to 64 addresses and ports keeps reaching the
/// backend its connection ID names, under every configuration (plaintext,
/// four-pass, single-pass), over IPv4 and IPv6; no conntrack entry is
/// written and every packet is counted as routed.
#[test]
fn ct_3_a_connection_id_routes_whatever_the_address() {
    let st = quic_state();
    let mut ctx = PipelineCtx::default();
    let mut sent = 0;
    for config in 0..3 {
        for backend in 0..2 {
            for i in 0..64u8 {
                let payload = short_header(config, backend, i);
                let v4_frame = udp4([198, 51, 100, i], 1024 + u16::from(i) * 7, &payload);
                let v6_frame = udp6(
                    &format!("2001:db8:c::{i:x}"),
                    40000 + u16::from(i),
                    &payload,
                );
                for frame in [v4_frame, v6_frame] {
                    let got = send(&st, &mut ctx, &frame);
                    assert_eq!(
                        got,
                        Some(BackendId(backend as u32)),
                        "config {config} seed {i}"
                    );
                    sent += 1;
                }
            }
        }
    }
    assert_eq!(ctx.conntrack.len(), 0, "routed packets write no entry");
    assert_eq!(ctx.quic_lb.routed, sent);
    assert_eq!(ctx.quic_lb.fallback, [0; Fallback::COUNT]);
}

/// Packets whose connection ID routes nowhere take the ordinary path:
/// the same backend as the service without QUIC-LB (a 5-tuple entry,
/// CT-3), each counted under its reason. A Handshake packet routes by its
/// ID; an Initial, with an ID the client chose, does not — even one that
/// happens to decode to a server.
#[test]
fn unroutable_packets_take_the_ordinary_path() {
    // Tracked (CT-3: one 5-tuple entry per flow) and not (CT-4: UDP under
    // NONE is hashed on every packet).
    for (affinity, entries) in [
        (SessionAffinity::ClientIpPortProto, 40),
        (SessionAffinity::None, 0),
    ] {
        unroutable_under(affinity, entries);
    }
}

fn unroutable_under(affinity: SessionAffinity, entries: usize) {
    let st = quic_state_with(affinity);
    let mut plain = state();
    plain.services[usize::from(SVC_UDP_GRE)].affinity = affinity;
    let routable = short_header(0, 1, 3);
    let cid = routable[1..7].to_vec();
    let cases: Vec<(Vec<u8>, Option<Fallback>)> = vec![
        (long_header(2, &cid), None),
        (long_header(0, &cid), Some(Fallback::Initial)),
        (long_header(1, &cid), Some(Fallback::Initial)),
        (long_header(3, &cid), Some(Fallback::UnknownVersion)),
        (
            vec![0x41, 0xe0, 0x0b, 1, 2, 3, 4],
            Some(Fallback::UnroutableConfig),
        ),
        (
            vec![0x41, 0xa0, 0x0b, 1, 2, 3, 4],
            Some(Fallback::UnknownConfig),
        ),
        (
            vec![0x41, 0x00, 0x0c, 1, 2, 3, 4],
            Some(Fallback::UnknownServerId),
        ),
        (vec![0x41, 0x00, 0x0b, 1, 2, 3], Some(Fallback::TooShort)),
        (vec![], Some(Fallback::TooShort)),
        (long_header(2, &cid[..3]), Some(Fallback::TooShort)),
    ];
    for (n, (payload, fallback)) in cases.iter().enumerate() {
        let mut ctx = PipelineCtx::default();
        let mut reference = PipelineCtx::default();
        for sport in 2000..2040 {
            let frame = udp4([198, 51, 100, 9], sport, payload);
            let got = send(&st, &mut ctx, &frame);
            match fallback {
                None => assert_eq!(got, Some(BackendId(1)), "case {n}"),
                Some(_) => {
                    assert_eq!(got, send(&plain, &mut reference, &frame), "case {n}");
                }
            }
        }
        match fallback {
            None => assert_eq!((ctx.quic_lb.routed, ctx.conntrack.len()), (40, 0)),
            Some(f) => {
                assert_eq!(ctx.quic_lb.routed, 0, "case {n}");
                assert_eq!(ctx.quic_lb.fallback[f.index()], 40, "case {n} {f:?}");
                assert_eq!(ctx.conntrack.len(), entries, "case {n}");
            }
        }
    }
}

/// The backend a connection ID names when its backend is unhealthy,
/// draining or in the inactive pool, against the service's settings.
fn after_change(change: impl Fn(&mut ForwardingState)) -> (Option<BackendId>, PipelineCtx) {
    let mut st = quic_state();
    change(&mut st);
    let mut ctx = PipelineCtx {
        now: Millis(10_000),
        ..Default::default()
    };
    let got = send(
        &st,
        &mut ctx,
        &udp4([198, 51, 100, 1], 5000, &short_header(1, 0, 1)),
    );
    (got, ctx)
}

fn backend0(st: &mut ForwardingState) -> &mut sluice_core::backend::BackendState {
    st.backends[0].as_mut().unwrap()
}

/// CT-8: UDP does not persist on an unhealthy backend by default, so the
/// packet falls back (and the ordinary path may send it elsewhere); with
/// ALWAYS_PERSIST it stays.
#[test]
fn ct_8_unhealthy_backend_follows_the_persistence_setting() {
    let (_, ctx) = after_change(|st| backend0(st).healthy = false);
    assert_eq!(ctx.quic_lb.fallback[Fallback::BackendUnhealthy.index()], 1);
    assert_eq!(ctx.quic_lb.routed, 0);
    let (got, ctx) = after_change(|st| {
        backend0(st).healthy = false;
        st.services[usize::from(SVC_UDP_GRE)].tracking.persistence =
            PersistenceOnUnhealthy::AlwaysPersist;
    });
    assert_eq!((got, ctx.quic_lb.routed), (Some(BackendId(0)), 1));
}

/// CT-10: a draining backend keeps its connections until its deadline;
/// after it, and once the backend is gone (CT-7: its id matches nothing),
/// the packet falls back.
#[test]
fn ct_10_draining_backend_until_its_deadline() {
    let (got, ctx) = after_change(|st| backend0(st).draining_until = Some(Millis(10_001)));
    assert_eq!((got, ctx.quic_lb.routed), (Some(BackendId(0)), 1));
    let (_, ctx) = after_change(|st| backend0(st).draining_until = Some(Millis(10_000)));
    assert_eq!(ctx.quic_lb.fallback[Fallback::BackendGone.index()], 1);
    let (_, ctx) = after_change(|st| st.backends[0] = None);
    assert_eq!(ctx.quic_lb.fallback[Fallback::BackendGone.index()], 1);
}

/// CT-11: a backend of the pool that is not active keeps its connections
/// when the service drains on failover, and loses them when it does not.
#[test]
fn ct_11_inactive_pool_follows_drain_on_failover() {
    let mark_inactive = |st: &mut ForwardingState| {
        let mut routing = routing();
        for config in routing.configs.iter_mut().flatten() {
            for server in config.servers.values_mut() {
                server.inactive_pool = server.backend == BackendId(0);
            }
        }
        st.services[usize::from(SVC_UDP_GRE)].quic_lb = Some(Arc::new(routing));
    };
    let (got, ctx) = after_change(mark_inactive);
    assert_eq!((got, ctx.quic_lb.routed), (Some(BackendId(0)), 1));
    let (_, ctx) = after_change(|st| {
        mark_inactive(st);
        st.services[usize::from(SVC_UDP_GRE)].drain_on_failover = false;
    });
    assert_eq!(ctx.quic_lb.fallback[Fallback::InactivePool.index()], 1);
}

/// Random UDP payloads, QUIC-shaped or not: the IPv4 fast path decides
/// the same stage as the general parser (the same decoding included).
fn payloads() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        (0..3usize, 0..2usize, any::<u8>(), 0..40usize, any::<u8>()).prop_map(
            |(c, b, seed, cut, flip)| {
                let mut p = short_header(c, b, seed);
                if let Some(x) = p.get_mut(cut) {
                    *x ^= flip;
                }
                p.truncate(cut.max(1) + 8);
                p
            }
        ),
        (0..4u8, proptest::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(kind, dcid)| long_header(kind, &dcid)),
    ]
}

proptest! {
    #[test]
    fn fast_path_and_general_path_decode_alike(payload in payloads(), sport in any::<u16>()) {
        let st = quic_state();
        let frame = udp4([198, 51, 100, 77], sport, &payload);
        let fast = classify_ipv4(&frame, &st);
        prop_assert!(fast.is_some(), "a well-formed UDP frame takes the fast path");
        prop_assert_eq!(fast.unwrap(), classify_general(&frame, &st));
    }

    /// The staged burst forwards each packet where `process` does and
    /// counts the same decisions.
    #[test]
    fn staged_burst_agrees_with_process(
        burst in proptest::collection::vec((payloads(), any::<u16>(), any::<u8>()), 1..48),
    ) {
        let st = quic_state();
        let frames: Vec<Vec<u8>> = burst
            .iter()
            .map(|(p, sport, host)| udp4([198, 51, 100, *host], *sport, p))
            .collect();
        let mut reference = PipelineCtx::default();
        let expected: Vec<Verdict> = frames
            .iter()
            .map(|f| process(&mut VecPacket::new(f), 0, &st, &mut reference))
            .collect();
        let mut ctx = PipelineCtx::default();
        let mut stages = BurstStages::default();
        let packets: Vec<VecPacket> = frames.iter().map(|f| VecPacket::new(f)).collect();
        stages.prepare(&packets, &st, &ctx, None, None, None);
        for (i, f) in frames.iter().enumerate() {
            let mut pkt = VecPacket::new(f);
            let got = stages.deliver(i, &mut pkt, &st, &mut ctx);
            prop_assert_eq!(got, Outcome::Verdict(expected[i]));
        }
        stages.finish();
        prop_assert_eq!(ctx.quic_lb.routed, reference.quic_lb.routed);
        prop_assert_eq!(ctx.quic_lb.fallback, reference.quic_lb.fallback);
        prop_assert_eq!(ctx.conntrack.len(), reference.conntrack.len());
    }
}
