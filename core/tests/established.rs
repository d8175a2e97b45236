//! The lanes of stage 2 against the general stage 2.
//!
//! The established-flow lane (`sluice_core::established`): flows are
//! opened, the snapshot then changes under them
//! (backends turn unhealthy, drain past or within their deadline, leave
//! the snapshot; the service's pool flips with or without
//! `drain_on_failover`; persistence and tracking settings change; time
//! passes beyond idle timeouts), and their next packets run through the
//! staged burst path — where the lane takes what it can — and through
//! `process()`, which never uses it, on a twin context. Verdict, bytes out,
//! the shard's counters and the new-connection flag must agree packet by
//! packet (CT-1, CT-3, CT-5, CT-7, CT-8, CT-10, CT-11).
//!
//! The stateless lane (`sluice_core::stateless`): untracked UDP of a
//! learnt rule, mixed with other traffic, on snapshots with and without
//! prebuilt headers, with zonal or empty tables, a backend gone, and a
//! small MTU (CT-2, CT-4, ZA-3, AP-3).

mod common;

use common::state::{state, SVC_CLIENT_IP, SVC_TCP80_L2, SVC_UDP_GRE, VIP4, VIP_CLIENT_IP};
use common::*;
use proptest::prelude::*;
use sluice_core::burst::{BurstStages, Outcome};
use sluice_core::conntrack::Shard;
use sluice_core::encap::{Encapsulation, Vxlan};
use sluice_core::fast_path::classify_ipv4_into;
use sluice_core::fragment::FragmentIds;
use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;
use sluice_core::packet::{PacketBuf, VecPacket, DEFAULT_HEADROOM};
use sluice_core::pipeline::{process, PipelineCtx};
use sluice_core::service::{PersistenceOnUnhealthy, TrackingMode};
use sluice_core::snapshot::ForwardingState;
use sluice_core::stage::Stage;
use sluice_core::stats::RuleCounters;
use sluice_core::time::Millis;
use sluice_core::zones::{Zone, ZoneMap};

const SYN: u8 = 0x02;
const SYN_ACK_FLAGS: [u8; 4] = [ACK, ACK | 0x08, SYN, ACK | 0x01];

/// One flow: client host, source port, which service (TCP:80 on the L2
/// service, or TCP/UDP on the client-IP GRE service).
#[derive(Clone, Debug)]
struct Flow {
    client: u8,
    sport: u16,
    kind: u8,
}

fn frame(f: &Flow, flags: u8) -> Vec<u8> {
    let src = v4(&format!("198.51.100.{}", f.client));
    let (vip, l4, proto) = match f.kind % 3 {
        0 => (VIP4, tcp(f.sport, 80, flags, b"x"), TCP),
        1 => (VIP_CLIENT_IP, tcp(f.sport, 443, flags, b"xy"), TCP),
        _ => (VIP_CLIENT_IP, udp(f.sport, 53, b"q"), UDP),
    };
    eth(&[], 0x0800, &ipv4(src, v4(vip), proto, 0, &l4))
}

/// What changes between the flows' first packets and their next ones.
#[derive(Clone, Debug)]
struct Change {
    /// Per backend index 0..3: healthy, draining (0 none, 1 past, 2 within
    /// the deadline), gone from the snapshot.
    backends: Vec<(bool, u8, bool)>,
    /// Per service (tcp80, client-ip): pool flip, drain on failover,
    /// persistence, tracking mode.
    services: Vec<(bool, bool, u8, bool)>,
    /// Milliseconds that pass (the idle timeout is 1,000 ms here).
    elapsed: u64,
}

fn change() -> impl Strategy<Value = Change> {
    (
        prop::collection::vec((any::<bool>(), 0..3u8, prop::bool::weighted(0.1)), 3),
        prop::collection::vec(
            (
                prop::bool::weighted(0.3),
                any::<bool>(),
                0..3u8,
                any::<bool>(),
            ),
            2,
        ),
        prop_oneof![Just(0u64), 0..2_000u64],
    )
        .prop_map(|(backends, services, elapsed)| Change {
            backends,
            services,
            elapsed,
        })
}

/// The snapshot the flows open on. `headers`: 0, the outer headers built
/// as the control plane builds them (L2 and GRE: every lane packet copies
/// one); 1, none built (the lane encapsulates as the general path does,
/// `established::encapsulate_unbuilt`); 2, the GRE service turned VXLAN,
/// whose headers are never prebuilt.
fn base(headers: u8) -> ForwardingState {
    let mut st = state();
    for s in &mut st.services {
        s.tracking.idle_timeout_ms = 1_000;
        if headers == 2 && s.encapsulation.is_tunnel() {
            s.encapsulation = Encapsulation::Vxlan(Vxlan {
                port: 4789,
                vni: 42,
                mac: [0x02, 0x5c, 0, 0, 0, 0x2a],
            });
        }
    }
    st.lane_backends = match headers {
        1 => st.build_lane_backends().without_headers(),
        _ => st.build_lane_backends(),
    };
    st
}

fn apply(c: &Change, prev: &ForwardingState, now: Millis) -> ForwardingState {
    let mut st = prev.clone();
    for (slot, &(healthy, draining, gone)) in st.backends.iter_mut().zip(&c.backends) {
        if gone {
            *slot = None;
            continue;
        }
        if let Some(b) = slot {
            b.healthy = healthy;
            b.draining_until = match draining {
                0 => None,
                1 => Some(Millis(now.0.saturating_sub(1))),
                _ => Some(Millis(now.0 + 10_000)),
            };
        }
    }
    let eligible: Vec<u32> = (0..2)
        .filter(|&i| {
            st.backends[i as usize]
                .as_ref()
                .is_some_and(|b| b.healthy && b.draining_until.is_none())
        })
        .collect();
    for (svc, &(flip, drain, persistence, per_session)) in
        [SVC_TCP80_L2, SVC_CLIENT_IP].iter().zip(&c.services)
    {
        let s = &mut st.services[usize::from(*svc)];
        if flip {
            s.pool_epoch += 1;
        }
        // The table the control plane would build: the eligible backends
        // only (CT-8, CT-10), and after a flip another pool's order.
        s.tables = vec![table(&eligible, flip).into()];
        s.drain_on_failover = drain;
        s.tracking.persistence = match persistence {
            0 => PersistenceOnUnhealthy::DefaultForProtocol,
            1 => PersistenceOnUnhealthy::NeverPersist,
            _ => PersistenceOnUnhealthy::AlwaysPersist,
        };
        s.tracking.mode = match per_session {
            true => TrackingMode::PerSession,
            false => TrackingMode::PerConnection,
        };
    }
    st.lane_backends = st.build_lane_backends();
    st
}

/// Backends 0 and 1 interleaved as in `table01` (swapped after a pool
/// flip), each slot of an ineligible backend given to the first eligible
/// one; empty when none is.
fn table(eligible: &[u32], flip: bool) -> MaglevTable {
    let Some(&first) = eligible.first() else {
        return MaglevTable::default();
    };
    let order = [0, 1, 0, 1, 1, 0, 1];
    MaglevTable {
        slots: order
            .iter()
            .map(|&i| if flip { 1 - i } else { i })
            .map(|i| BackendId(if eligible.contains(&i) { i } else { first }))
            .collect(),
    }
}

fn ctx() -> PipelineCtx {
    PipelineCtx {
        now: Millis(1),
        icmp_replies: Default::default(),
        conntrack: Shard::with_capacity_and_seed(1024, 7),
        fragment_ids: FragmentIds::for_worker(0),
        opened: false,
        quic_lb: Default::default(),
        fragments: Default::default(),
    }
}

/// One burst through the staged path on `staged` and packet by packet
/// through `process()` on `reference`: everything observable must agree.
fn run_burst(
    frames: &[Vec<u8>],
    st: &ForwardingState,
    stages: &mut BurstStages,
    staged: &mut PipelineCtx,
    reference: &mut PipelineCtx,
) -> Result<(), TestCaseError> {
    let mut pkts: Vec<VecPacket> = frames
        .iter()
        .map(|f| VecPacket::with_headroom(f, DEFAULT_HEADROOM))
        .collect();
    // FR-3: every packet counted under its rule once, by the burst as by
    // a one-packet classification (which never reuses a rule).
    let (rules, want_rules) = (RuleCounters::default(), RuleCounters::default());
    stages.prepare(&pkts, st, staged, None, None, Some(&rules));
    for f in frames {
        let mut stage = Stage::default();
        if classify_ipv4_into(f, st, &mut stage, Some(&want_rules)).is_none() {
            prop_assert_eq!(f.len(), 0, "a frame the fast path does not take");
        }
    }
    for slot in 0..8 {
        prop_assert_eq!(rules.get(slot), want_rules.get(slot), "rule slot {}", slot);
    }
    prop_assert_eq!(rules.uncounted(), want_rules.uncounted());
    // Stage 2 as the worker runs it: a burst whose stage 1 learnt the
    // stateless rule first through the stateless lane alone, the general
    // stage 2 for what it leaves.
    for (i, (pkt, f)) in pkts.iter_mut().zip(frames).enumerate() {
        let got = stages.deliver_as_worker(i, pkt, st, staged);
        let opened = std::mem::take(&mut staged.opened);
        let mut twin = VecPacket::with_headroom(f, DEFAULT_HEADROOM);
        let want = process(&mut twin, 0, st, reference);
        let want_opened = std::mem::take(&mut reference.opened);
        prop_assert_eq!(got, Outcome::Verdict(want), "packet {}", i);
        prop_assert_eq!(pkt.data(), twin.data(), "bytes of packet {}", i);
        prop_assert_eq!(opened, want_opened, "opened, packet {}", i);
        prop_assert_eq!(staged.conntrack.counters, reference.conntrack.counters);
    }
    stages.finish();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// CT-1, CT-3, CT-5, CT-7, CT-8, CT-10, CT-11: the lane forwards only
    /// what the general path forwards the same way, through any change of
    /// the snapshot under established flows, with and without prebuilt
    /// outer headers.
    #[test]
    fn established_lane_agrees_with_general_stage_2(
        flows in prop::collection::vec((1..6u8, 1000..1006u16, 0..3u8), 1..24),
        flags in prop::collection::vec(0..4usize, 24),
        c in change(),
        headers in 0..3u8,
    ) {
        let flows: Vec<Flow> = flows
            .into_iter()
            .map(|(client, sport, kind)| Flow { client, sport, kind })
            .collect();
        let st = base(headers);
        let (mut staged, mut reference) = (ctx(), ctx());
        let mut stages = BurstStages::default();
        // Open: SYN, then ACK (completes the half-open entry).
        for first in [SYN, ACK] {
            let frames: Vec<_> = flows.iter().map(|f| frame(f, first)).collect();
            run_burst(&frames, &st, &mut stages, &mut staged, &mut reference)?;
        }
        // Twice on the changed snapshot: the second burst meets what the
        // first re-selected or re-opened.
        let now = Millis(1 + c.elapsed);
        staged.now = now;
        reference.now = now;
        let next = apply(&c, &st, now);
        for _ in 0..2 {
            let frames: Vec<_> = flows
                .iter()
                .zip(&flags)
                .map(|(f, &k)| frame(f, SYN_ACK_FLAGS[k]))
                .collect();
            run_burst(&frames, &next, &mut stages, &mut staged, &mut reference)?;
        }
    }
}

/// The frames of a burst whose neighbours change destination, protocol
/// or port: a VIP's TCP rule, its UDP rule, a port of it no rule takes,
/// another VIP, the appliance's own address (punt, AP-4), an address
/// nobody owns; each from a few clients, SYN or not.
fn mixed_frame(which: u8, client: u8, flags: u8) -> Vec<u8> {
    let src = v4(&format!("198.51.100.{client}"));
    let (dst, l4, proto) = match which % 6 {
        0 => (VIP4, tcp(1000 + u16::from(client), 80, flags, b"x"), TCP),
        1 => (VIP4, udp(2000 + u16::from(client), 53, b"q"), UDP),
        2 => (VIP4, tcp(1000 + u16::from(client), 81, flags, b"x"), TCP),
        3 => (
            VIP_CLIENT_IP,
            tcp(3000 + u16::from(client), 443, flags, b"xy"),
            TCP,
        ),
        4 => ("10.0.0.1", tcp(4000, 22, flags, b""), TCP),
        _ => ("192.0.2.99", udp(5000, 53, b"q"), UDP),
    };
    eth(&[], 0x0800, &ipv4(src, v4(dst), proto, 0, &l4))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// FR-1, FR-2, AP-4: stage 1 reuses the rule (or the miss) its
    /// previous packet's destination, protocol and port found within a
    /// burst (`fast_path::LastRule`); every packet of bursts that switch
    /// between rules, misses, punts and VIPs in any order must still get
    /// `process()`'s verdict and bytes, which search every packet's rule.
    #[test]
    fn rule_reuse_within_a_burst_agrees_with_process(
        bursts in proptest::collection::vec(
            proptest::collection::vec((0u8..6, 1u8..4, proptest::sample::select(vec![SYN, ACK])), 1..40),
            1..4,
        ),
    ) {
        let st = base(0);
        let mut stages = BurstStages::default();
        let (mut staged, mut reference) = (ctx(), ctx());
        for burst in &bursts {
            let frames: Vec<Vec<u8>> =
                burst.iter().map(|&(w, c, f)| mixed_frame(w, c, f)).collect();
            run_burst(&frames, &st, &mut stages, &mut staged, &mut reference)?;
        }
    }
}

/// UDP datagrams of the stateless GRE service (`SVC_UDP_GRE`: affinity
/// NONE, so untracked), some of other traffic between them: `kind` 0–5 a
/// datagram to VIP4 (port 53, or 54 when 5), 6 a TCP segment to VIP4:80,
/// 7 a tracked datagram of the client-IP service. `size`: payload bytes
/// (0 to beyond a 1,500-byte MTU with GRE's 24), `df`: don't fragment.
fn stateless_frame(kind: u8, client: u8, sport: u16, size: usize, df: bool) -> Vec<u8> {
    let src = v4(&format!("198.51.100.{client}"));
    let payload = vec![0x5a; size];
    let flags_frag = if df { DF } else { 0 };
    let (dst, l4, proto) = match kind {
        6 => (VIP4, tcp(sport, 80, ACK, &payload), TCP),
        7 => (VIP_CLIENT_IP, udp(sport, 53, &payload), UDP),
        5 => (VIP4, udp(sport, 54, &payload), UDP),
        _ => (VIP4, udp(sport, 53, &payload), UDP),
    };
    eth(&[], 0x0800, &ipv4(src, v4(dst), proto, flags_frag, &l4))
}

/// The stateless service's snapshot variant: 0 as built; 1 zonal tables
/// (ZA-3: clients .1–.2 in zone a, whose table holds backend 1 only); 2
/// an empty table; 3 no table at all; 4 backend 1 gone from the
/// snapshot; 5 port 0's MTU 600 (AP-3: fragments and ICMP answers).
fn stateless_variant(headers: u8, variant: u8) -> ForwardingState {
    let mut st = base(headers);
    let svc = &mut st.services[usize::from(SVC_UDP_GRE)];
    match variant {
        1 => {
            let zone_a = MaglevTable {
                slots: vec![BackendId(1)].into(),
            };
            svc.tables.push(std::sync::Arc::new(zone_a));
            st.zones = ZoneMap {
                zones: vec![Zone {
                    name: "a".into(),
                    subnets: vec![(v4("198.51.100.0").into(), 30)],
                }],
            };
        }
        2 => svc.tables = vec![MaglevTable::default().into()],
        3 => svc.tables.clear(),
        4 => st.backends[1] = None,
        5 => st.ports[0].mtu = 600,
        _ => {}
    }
    st.lane_backends = match headers {
        1 => st.build_lane_backends().without_headers(),
        _ => st.build_lane_backends(),
    };
    st
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// CT-2, CT-4, ZA-3, AP-3: every packet of bursts of untracked UDP
    /// (which the stateless lane takes once a packet of its rule taught
    /// stage 1 the rule) mixed with other traffic gets `process()`'s
    /// verdict and bytes — on every snapshot variant, with prebuilt GRE
    /// headers, without them, and as VXLAN (never prebuilt).
    #[test]
    fn stateless_lane_agrees_with_general_stage_2(
        bursts in prop::collection::vec(
            prop::collection::vec(
                (
                    prop::sample::select(vec![0u8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]),
                    1..6u8,
                    any::<u16>(),
                    prop::sample::select(vec![1usize, 40, 560, 1_000, 1_460, 1_480]),
                    any::<bool>(),
                ),
                1..40,
            ),
            1..3,
        ),
        headers in 0..3u8,
        variant in 0..6u8,
    ) {
        let st = stateless_variant(headers, variant);
        let (mut staged, mut reference) = (ctx(), ctx());
        let mut stages = BurstStages::default();
        for burst in &bursts {
            let frames: Vec<Vec<u8>> = burst
                .iter()
                .map(|&(kind, client, sport, size, df)| stateless_frame(kind, client, sport, size, df))
                .collect();
            run_burst(&frames, &st, &mut stages, &mut staged, &mut reference)?;
        }
    }
}

/// CT-2, CT-4: the stateless lane takes the untracked datagrams of a rule
/// once the burst's first one (the full fast path) taught stage 1 the
/// rule, in the worker's loop for such a burst as in the general one's,
/// so the property above is not vacuous; ZA-3: with zonal tables it takes
/// none, and the general path forwards them by the client's zone.
#[test]
fn stateless_lane_takes_a_learnt_rule_s_datagrams_only_with_one_table() {
    let cases = [(0, true), (1, false)];
    for ((variant, takes), stateless_loop) in
        cases.into_iter().flat_map(|c| [(c, false), (c, true)])
    {
        let st = stateless_variant(0, variant);
        let mut ctx = ctx();
        let mut stages = BurstStages::default();
        let frames: Vec<Vec<u8>> = (0..8)
            .map(|i| stateless_frame(0, 1, 1000 + i, 40, true))
            .collect();
        let mut pkts: Vec<VecPacket> = frames
            .iter()
            .map(|f| VecPacket::with_headroom(f, DEFAULT_HEADROOM))
            .collect();
        stages.prepare(&pkts, &st, &ctx, None, None, None);
        // The worker's loop for a burst whose stage 1 learnt the
        // stateless rule first, or the general one's lanes.
        assert!(stages.stateless_burst(), "variant {variant}");
        for (i, pkt) in pkts.iter_mut().enumerate() {
            let on_lane = if stateless_loop {
                stages.forward_stateless(i, pkt, &st)
            } else {
                stages.forward_on_lane(i, pkt, &st, &mut ctx)
            };
            assert_eq!(
                on_lane.is_some(),
                takes && i > 0,
                "variant {variant}, packet {i}"
            );
            if on_lane.is_none() {
                let outcome = stages.deliver_other(i, pkt, &st, &mut ctx);
                assert!(
                    matches!(
                        outcome,
                        Outcome::Verdict(sluice_core::pipeline::Verdict::Forward { .. })
                    ),
                    "variant {variant}, packet {i}: {outcome:?}"
                );
            }
        }
        stages.finish();
    }
}
