//! The whole per-packet decision on arbitrary bytes against a small
//! snapshot whose rules cover every protocol, so that mutated packets reach
//! selection and every encapsulation.
#![no_main]

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use dataplane::fragment;
use dataplane::packet::{PacketBuf, VecPacket};
use dataplane::pipeline::{process, PipelineCtx, Verdict};
use dataplane::rules::{ForwardingRule, RuleTable};
use dataplane::snapshot::{
    BackendId, BackendState, Egress, Encapsulation, ForwardingState, MaglevTable, Millis,
    PortRange, PortState, RuleProtocol, ServiceId, ServiceState, SessionAffinity,
};
use libfuzzer_sys::fuzz_target;

/// VIPs the fuzzer can find from seeds: 10.0.0.{0..4} and fd00::{0..4}, one
/// encapsulation each, all ports and protocols.
fn state(mtu: u16) -> ForwardingState {
    let encaps = [
        Encapsulation::L2,
        Encapsulation::Gre,
        Encapsulation::Ipip,
        Encapsulation::Gue { port: 6080 },
    ];
    let mut rules = Vec::new();
    let mut services = Vec::new();
    for (i, encap) in encaps.iter().enumerate() {
        let svc = ServiceId(i as u16);
        for vip in [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16)),
        ] {
            rules.push(ForwardingRule {
                name: format!("r{i}-{vip}"),
                vip,
                protocol: RuleProtocol::L3Default,
                ports: PortRange::ALL,
                service: svc,
            });
        }
        let table = MaglevTable {
            slots: vec![BackendId(0), BackendId(1), BackendId(0)].into(),
        };
        services.push(ServiceState {
            name: format!("s{i}"),
            encapsulation: *encap,
            affinity: SessionAffinity::None,
            tracking: Default::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            pool_epoch: 0,
            backends: vec![BackendId(0), BackendId(1)],
            tables: vec![table.into()],
        });
    }
    let backend = |id: u32, address: IpAddr| {
        Some(BackendState {
            id: BackendId(id),
            service: ServiceId(0),
            address,
            healthy: true,
            weight: 1,
            pool: Default::default(),
            draining_until: None,
            egress: Egress {
                port: 0,
                next_hop_mac: Some([2, 0, 0, 0, 0, 1]),
            },
        })
    };
    let mut state = ForwardingState {
        generation: 1,
        rules: RuleTable::new(rules),
        services,
        backends: vec![
            backend(0, IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1))),
            backend(1, IpAddr::V6(Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 1))),
        ],
        ports: vec![PortState {
            name: "p0".into(),
            mac: [2, 0, 0, 0, 0, 2],
            ipv4: Some(Ipv4Addr::new(192, 168, 0, 254)),
            // Both families, so outer IPv6 (backend 1) is reached too.
            ipv6: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe)),
            mtu,
        }],
        zones: Default::default(),
        outer_headers: Default::default(),
    };
    // As the control plane does: the prebuilt outer headers are fuzzed too.
    state.outer_headers = dataplane::outer_header::OuterHeaders::build(&state);
    state
}

thread_local! {
    /// One context for the whole run: its conntrack shard is allocated
    /// once, not per input. The clock advances a second per input so the
    /// ICMP rate limit keeps refilling and the reply path stays reachable.
    static CTX: RefCell<PipelineCtx> = RefCell::new(PipelineCtx::default());
}

fuzz_target!(|data: &[u8]| {
    static STATES: OnceLock<[ForwardingState; 2]> = OnceLock::new();
    // A normal MTU, and a small one that sends most packets down the
    // MTU-exceeded path (ICMP frag-needed / packet-too-big generation).
    let states = STATES.get_or_init(|| [state(1500), state(200)]);
    // The first byte picks the headroom (so NoHeadroom paths are reached)
    // and the snapshot.
    let (headroom, st, frame) = match data.split_first() {
        Some((h, rest)) => (usize::from(*h) % 160, &states[usize::from(*h >> 7)], rest),
        None => (0, &states[0], data),
    };
    let mut pkt = VecPacket::with_headroom(frame, headroom);
    let verdict = CTX.with(|c| {
        let mut ctx = c.borrow_mut();
        ctx.now = Millis(ctx.now.0 + 1000);
        process(&mut pkt, 0, st, &mut ctx)
    });
    match verdict {
        Verdict::Forward { .. } => assert!(pkt.data().len() >= 14),
        // AP-3: oversize IPv4 without DF: the worker's fragmentation must
        // not panic either, and every fragment fits the MTU.
        Verdict::Fragment { port, .. } => {
            let mtu = st.ports[usize::from(port)].mtu;
            if let Ok(plan) = fragment::plan(pkt.data(), mtu, 2048) {
                let mut extra = vec![VecPacket::new(&[]); plan.extra()];
                if fragment::split(&mut pkt, &plan, extra.iter_mut()).is_ok() {
                    for f in std::iter::once(&pkt).chain(&extra) {
                        let n = f.data().len();
                        assert!(n > 14 && n <= 14 + usize::from(mtu), "{n}");
                    }
                }
            }
        }
        // An ICMP error: L2 + IP + ICMP header at least, within the
        // RFC 1812 / RFC 4443 size bounds.
        Verdict::Reply => {
            let n = pkt.data().len();
            assert!(n >= 14 + 28 && n <= 22 + 1280, "{n}");
        }
        _ => assert_eq!(pkt.data(), frame),
    }
});
