//! The IPv4 fast path of stage 1 (`fast_path::classify_ipv4`) against the
//! general parser (`pipeline::classify_general`): whenever the fast path
//! accepts a frame, both decide the same `Stage` — service, flow hash
//! (HA-1, HA-3: every session affinity), layout, conntrack metadata and
//! trackability (CT-2, CT-4) — or the same verdict for a rule miss (FR-1,
//! AP-4). Frames are valid ones with a few bytes
//! overwritten and cut at a random length, so the length, version, IHL,
//! fragment, VLAN and TCP data-offset checks are all crossed.

mod common;

use common::state::{state, VIP4, VIP_CLIENT_IP, VIP_EMPTY, VIP_UNRESOLVED};
use sluice_core::drop_reason::DropReason;
use sluice_core::pipeline::{classify_general, Stage, Verdict};

/// Port 0's own IPv4 address in the shared test state (AP-4).
const APPLIANCE4: &str = "10.0.0.1";
/// Nobody's address: neither a VIP nor the appliance's.
const NOT_VIP4: &str = "192.0.2.99";
use common::*;
use proptest::prelude::*;
use sluice_core::affinity::SessionAffinity;
use sluice_core::conntrack::{Shard, Tracked};
use sluice_core::fast_path::{
    classify_ipv4, classify_ipv4_keyed, classify_lane, classify_stateless, stateless_stage,
    LastRule,
};
use sluice_core::stage::{Keyed, KeyedOut, LanePacket, StatelessPacket};
use sluice_core::ForwardingState;

const AFFINITIES: [SessionAffinity; 4] = [
    SessionAffinity::None,
    SessionAffinity::ClientIpPortProto,
    SessionAffinity::ClientIpProto,
    SessionAffinity::ClientIp,
];

/// The shared test state with every service under `affinity`.
fn state_with(affinity: SessionAffinity) -> ForwardingState {
    let mut s = state();
    for svc in &mut s.services {
        svc.affinity = affinity;
    }
    s
}

#[allow(clippy::too_many_arguments)]
fn frame(
    vlan: bool,
    is_tcp: bool,
    vip: &str,
    src: [u8; 4],
    ports: (u16, u16),
    flags_frag: u16,
    tcp_flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let l4 = if is_tcp {
        tcp(ports.0, ports.1, tcp_flags, payload)
    } else {
        udp(ports.0, ports.1, payload)
    };
    let proto = if is_tcp { TCP } else { UDP };
    let ip = ipv4(src.into(), v4(vip), proto, flags_frag, &l4);
    let tags: &[u16] = if vlan { &[VLAN] } else { &[] };
    eth(tags, ETH_IPV4, &ip)
}

/// Unmutated frames to a VIP with a matching rule take the fast path, so
/// the equivalence property below is not vacuous.
#[test]
fn well_formed_ipv4_tcp_and_udp_to_a_vip_take_the_fast_path() {
    for affinity in AFFINITIES {
        let st = state_with(affinity);
        for (vlan, is_tcp, vip, dport) in [
            (false, true, VIP4, 80),
            (true, true, VIP4, 80),
            (false, false, VIP4, 53),
            (true, false, VIP_CLIENT_IP, 4000),
            (false, true, VIP_UNRESOLVED, 80),
        ] {
            let f = frame(
                vlan,
                is_tcp,
                vip,
                [198, 51, 100, 7],
                (40000, dport),
                DF,
                SYN,
                b"hi",
            );
            let fast = classify_ipv4(&f, &st);
            assert!(
                fast.is_some(),
                "{affinity:?} vlan={vlan} tcp={is_tcp} {vip}"
            );
            assert_eq!(fast, Some(classify_general(&f, &st)));
            assert!(matches!(fast, Some(Stage::Balance(_))));
        }
        // Misses and what the fast path leaves to the general one.
        let no_rule = frame(false, true, VIP4, [198, 51, 100, 7], (1, 81), 0, SYN, b"");
        let not_vip = frame(
            false,
            true,
            "192.0.2.99",
            [198, 51, 100, 7],
            (1, 80),
            0,
            SYN,
            b"",
        );
        let fragment = frame(false, false, VIP4, [198, 51, 100, 7], (1, 53), MF, 0, b"x");
        let empty_svc = frame(
            false,
            true,
            VIP_EMPTY,
            [198, 51, 100, 7],
            (1, 80),
            0,
            SYN,
            b"",
        );
        let to_appliance = frame(
            false,
            false,
            APPLIANCE4,
            [198, 51, 100, 7],
            (1, 53),
            0,
            0,
            b"",
        );
        // Rule misses are decided here too (FR-1: no rule; AP-4: the
        // appliance's own address goes to the exception path), as the
        // general path decides them.
        for (f, want) in [
            (&no_rule, Verdict::Drop(DropReason::NoRule)),
            (&not_vip, Verdict::Drop(DropReason::NotForUs)),
            (&to_appliance, Verdict::Punt),
        ] {
            assert_eq!(classify_ipv4(f, &st), Some(Stage::Done(want)));
            assert_eq!(classify_general(f, &st), Stage::Done(want));
        }
        assert_eq!(classify_ipv4(&fragment, &st), None);
        // A service with an empty table is still balanced (stage 2 drops it).
        assert_eq!(
            classify_ipv4(&empty_svc, &st),
            Some(classify_general(&empty_svc, &st))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Whenever the fast path decides, the general path decides the same.
    #[test]
    fn fast_path_agrees_with_the_general_parser(
        affinity in 0usize..4,
        vlan in any::<bool>(),
        is_tcp in any::<bool>(),
        vip in prop::sample::select(vec![VIP4, VIP_CLIENT_IP, VIP_EMPTY, VIP_UNRESOLVED, NOT_VIP4, APPLIANCE4]),
        src in any::<[u8; 4]>(),
        sport in any::<u16>(),
        dport in prop::sample::select(vec![53u16, 80, 81, 443, 0, 65535]),
        flags_frag in prop::sample::select(vec![0u16, DF, MF, 1, DF | 1, 0x1fff, 0x8000]),
        tcp_flags in any::<u8>(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        mutations in proptest::collection::vec((0usize..64, any::<u8>()), 0..4),
        cut in prop::option::of(0usize..100),
    ) {
        let st = state_with(AFFINITIES[affinity]);
        let f = mutated(
            frame(vlan, is_tcp, vip, src, (sport, dport), flags_frag, tcp_flags, &payload),
            &mutations,
            cut,
        );
        if let Some(fast) = classify_ipv4(&f, &st) {
            prop_assert_eq!(fast, classify_general(&f, &st));
        }
    }
}

/// What stage 1 remembers after the full fast path classified `first`
/// (its rule, and the lane or stateless rule it teaches).
fn after_full_fast_path(first: &[u8], st: &ForwardingState, shard: &Shard) -> LastRule {
    let mut last = LastRule::NONE;
    let (mut t, mut lane, mut stage) =
        (Tracked::default(), LanePacket::default(), Stage::default());
    let out = KeyedOut {
        tracked: &mut t,
        lane: &mut lane,
    };
    classify_ipv4_keyed(first, st, &mut stage, None, &mut last, shard, out);
    last
}

/// `f` with bytes overwritten (past its end: ignored), then cut.
fn mutated(mut f: Vec<u8>, mutations: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    for &(at, byte) in mutations {
        if let Some(b) = f.get_mut(at) {
            *b = byte;
        }
    }
    if let Some(n) = cut {
        f.truncate(n);
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// CT-1, CT-3: once a packet of a rule took the established lane,
    /// `classify_lane` takes later frames of that rule without its search;
    /// whenever it takes one, the full fast path (searching the rule)
    /// writes the same key, shard hash and lane record for it, and
    /// leaves it to the lane too. Later frames are the first one with
    /// bytes overwritten and cut, another source, port or flags.
    #[test]
    fn lane_classification_agrees_with_the_fast_path(
        affinity in 0usize..4,
        vip in prop::sample::select(vec![VIP4, VIP_CLIENT_IP, NOT_VIP4]),
        src in any::<[u8; 4]>(),
        sport in any::<u16>(),
        dport in prop::sample::select(vec![80u16, 81, 443]),
        later in (any::<[u8; 4]>(), any::<u16>(), prop::sample::select(vec![80u16, 81, 443])),
        flags_frag in prop::sample::select(vec![0u16, DF, MF, 1, DF | 1]),
        tcp_flags in any::<u8>(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        mutations in proptest::collection::vec((0usize..64, any::<u8>()), 0..4),
        cut in prop::option::of(0usize..100),
    ) {
        let st = state_with(AFFINITIES[affinity]);
        let shard = Shard::with_capacity_and_seed(1024, 7);
        // The rule's first packet: an established-flow ACK.
        let first = frame(false, true, vip, src, (sport, dport), DF, ACK, &payload);
        let mut last = after_full_fast_path(&first, &st, &shard);
        let (lsrc, lsport, ldport) = later;
        let f = mutated(
            frame(false, true, vip, lsrc, (lsport, ldport), flags_frag, tcp_flags, &payload),
            &mutations,
            cut,
        );
        let mut stage = Stage::default();
        let (mut t1, mut lane1) = (Tracked::default(), LanePacket::default());
        let out = KeyedOut { tracked: &mut t1, lane: &mut lane1 };
        if classify_lane(&f, &mut last, &shard, out) {
            let (mut t2, mut lane2) = (Tracked::default(), LanePacket::default());
            let out = KeyedOut { tracked: &mut t2, lane: &mut lane2 };
            let mut fresh = LastRule::NONE;
            let keyed = classify_ipv4_keyed(&f, &st, &mut stage, None, &mut fresh, &shard, out);
            prop_assert_eq!(keyed, Some(Keyed::Lane));
            prop_assert_eq!(t1, t2);
            prop_assert_eq!(lane1, lane2);
        }
    }
}

/// The lane takes a rule's later packets (so the property above is not
/// vacuous), and never before a packet of that rule took the lane.
#[test]
fn lane_classification_takes_a_learnt_rule_only() {
    let st = state();
    let shard = Shard::with_capacity_and_seed(1024, 7);
    let ack = |sport| {
        frame(
            false,
            true,
            VIP4,
            [198, 51, 100, 7],
            (sport, 80),
            DF,
            ACK,
            b"x",
        )
    };
    let mut last = LastRule::NONE;
    let (mut t, mut lane, mut stage) =
        (Tracked::default(), LanePacket::default(), Stage::default());
    let out = KeyedOut {
        tracked: &mut t,
        lane: &mut lane,
    };
    assert!(!classify_lane(&ack(1000), &mut last, &shard, out));
    let (mut t0, mut lane0) = (Tracked::default(), LanePacket::default());
    let learnt = classify_ipv4_keyed(
        &ack(1000),
        &st,
        &mut stage,
        None,
        &mut last,
        &shard,
        KeyedOut {
            tracked: &mut t0,
            lane: &mut lane0,
        },
    );
    assert_eq!(learnt, Some(Keyed::Lane));
    let (mut t, mut lane) = (Tracked::default(), LanePacket::default());
    assert!(classify_lane(
        &ack(1001),
        &mut last,
        &shard,
        KeyedOut {
            tracked: &mut t,
            lane: &mut lane
        }
    ));
    assert_ne!(t, t0, "another source port: another key");
    let syn = frame(
        false,
        true,
        VIP4,
        [198, 51, 100, 7],
        (1002, 80),
        DF,
        SYN,
        b"",
    );
    assert!(!classify_lane(
        &syn,
        &mut last,
        &shard,
        KeyedOut {
            tracked: &mut t,
            lane: &mut lane
        }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// CT-2, CT-4, HA-1, HA-3: once an untracked UDP packet of a rule took
    /// the full fast path, `classify_stateless` takes later frames of that
    /// rule without its search; whenever it takes one, the full fast path
    /// (searching the rule) writes the same stage for it and tracks it as
    /// little. Later frames are the first one with bytes overwritten and
    /// cut, another source, ports, fragment bits, protocol or IPv4 total
    /// length.
    #[test]
    fn stateless_classification_agrees_with_the_fast_path(
        affinity in prop::sample::select(vec![0usize, 0, 0, 1, 2, 3]),
        vip in prop::sample::select(vec![VIP4, VIP4, VIP_CLIENT_IP, NOT_VIP4]),
        src in any::<[u8; 4]>(),
        ports in (any::<u16>(), prop::sample::select(vec![53u16, 4000, 80])),
        later in (any::<[u8; 4]>(), any::<u16>(), prop::sample::select(vec![53u16, 4000, 80])),
        later_tcp in prop::bool::weighted(0.2),
        flags_frag in prop::sample::select(vec![0u16, DF, MF, 1, DF | 1]),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        mutations in proptest::collection::vec((0usize..64, any::<u8>()), 0..4),
        total_len in prop::option::of(0u16..100),
        cut in prop::option::of(0usize..100),
    ) {
        let st = state_with(AFFINITIES[affinity]);
        let shard = Shard::with_capacity_and_seed(1024, 7);
        let first = frame(false, false, vip, src, ports, DF, 0, &payload);
        let mut last = after_full_fast_path(&first, &st, &shard);
        let (lsrc, lsport, ldport) = later;
        let mut f = frame(false, later_tcp, vip, lsrc, (lsport, ldport), flags_frag, ACK, &payload);
        if let Some(total) = total_len {
            f[16..18].copy_from_slice(&total.to_be_bytes());
        }
        let f = mutated(f, &mutations, cut);
        let mut packet = StatelessPacket::default();
        if classify_stateless(&f, &mut last, &st, &mut packet) {
            let got = stateless_stage(&f, &packet);
            let (mut t2, mut lane2, mut want) = (Tracked::default(), LanePacket::default(), Stage::default());
            let out = KeyedOut { tracked: &mut t2, lane: &mut lane2 };
            let mut fresh = LastRule::NONE;
            let keyed = classify_ipv4_keyed(&f, &st, &mut want, None, &mut fresh, &shard, out);
            prop_assert_eq!(keyed, Some(Keyed::Staged));
            prop_assert_eq!(got, want);
        }
    }
}

/// The stateless path takes a learnt rule's later packets (so the property
/// above is not vacuous), never before an untracked UDP packet of that
/// rule took the full fast path, and never a tracked service's (CT-4:
/// UDP is tracked under any affinity but NONE).
#[test]
fn stateless_classification_takes_a_learnt_untracked_rule_only() {
    let dns = |sport| {
        frame(
            false,
            false,
            VIP4,
            [198, 51, 100, 7],
            (sport, 53),
            DF,
            0,
            b"q",
        )
    };
    let shard = Shard::with_capacity_and_seed(1024, 7);
    for (affinity, learns) in [
        (SessionAffinity::None, true),
        (SessionAffinity::ClientIp, false),
    ] {
        let st = state_with(affinity);
        let mut last = LastRule::NONE;
        let mut stage = Stage::default();
        let mut packet = StatelessPacket::default();
        assert!(!classify_stateless(&dns(1000), &mut last, &st, &mut packet));
        let (mut t, mut lane) = (Tracked::default(), LanePacket::default());
        let out = KeyedOut {
            tracked: &mut t,
            lane: &mut lane,
        };
        classify_ipv4_keyed(&dns(1000), &st, &mut stage, None, &mut last, &shard, out);
        assert_eq!(
            classify_stateless(&dns(1001), &mut last, &st, &mut packet),
            learns,
            "{affinity:?}"
        );
        if learns {
            let later = stateless_stage(&dns(1001), &packet);
            assert_ne!(later, stage, "another source port: another flow hash");
            assert_eq!(later, classify_ipv4(&dns(1001), &st).unwrap());
        }
    }
}
