//! What the fuzz targets share: the snapshot they run packets against.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluice_core::affinity::SessionAffinity;
use sluice_core::backend::{BackendState, Egress};
use sluice_core::encap::{Encapsulation, Geneve, Gre, Gue, Ipip};
use sluice_core::fragment;
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::port::PortState;
use sluice_core::quic_lb::cid::{CidCodec, CidLengths};
use sluice_core::quic_lb::{ConfigRoute, QuicLbRouting, Server};
use sluice_core::rules::{ForwardingRule, PortRange, RuleProtocol, RuleTable};
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;

/// VIPs the fuzzer can find from seeds: 10.0.0.{0..4} and fd00::{0..4}, one
/// encapsulation each, all ports and protocols.
pub fn state(mtu: u16) -> ForwardingState {
    let encaps = [
        Encapsulation::L2,
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
        Encapsulation::Gue(Gue { port: 6080 }),
        Encapsulation::Geneve(Geneve { port: 6081, vni: 7 }),
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
                counter: rules.len() as u16,
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
            follow_fragments: false,
            pool_epoch: 0,
            backends: vec![BackendId(0), BackendId(1)],
            // The GRE and GUE services route QUIC by connection ID; GUE's
            // tracks UDP, so its fallbacks reach conntrack.
            quic_lb: matches!(i, 1 | 3).then(|| std::sync::Arc::new(quic_routing())),
            tables: vec![table.into()],
        });
        if i == 3 {
            if let Some(s) = services.last_mut() {
                s.affinity = SessionAffinity::ClientIpPortProto;
            }
        }
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
        rules: std::sync::Arc::new(RuleTable::new(rules)),
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
            vlan: None,
        }],
        zones: Default::default(),
        lane_backends: Default::default(),
        flow_seed: Default::default(),
    };
    // As the control plane does: the lane records and their prebuilt
    // outer headers are fuzzed too.
    state.lane_backends = state.build_lane_backends();
    state
}

/// QUIC-LB for the fuzzed services: config 0 in the clear with one-byte
/// server IDs 0x00 (backend 0) and 0x01 (backend 1), config 1 encrypted
/// (four passes) with two-byte IDs 0x0000 and 0x0001.
pub fn quic_routing() -> QuicLbRouting {
    let mut routing = QuicLbRouting::default();
    let configs = [
        (CidLengths::new(0, 1, 4), None),
        (CidLengths::new(1, 2, 5), Some(*b"sluice-fuzz-key!")),
    ];
    for (lengths, key) in configs {
        let Ok(lengths) = lengths else { continue };
        let servers = (0..2u32)
            .map(|b| {
                let server = Server {
                    backend: BackendId(b),
                    inactive_pool: false,
                };
                (u128::from(b), server)
            })
            .collect();
        routing.configs[usize::from(lengths.config_id)] = Some(ConfigRoute {
            codec: CidCodec::new(lengths, key),
            servers,
        });
    }
    routing
}

/// AP-3: what the worker does with a `Verdict::Fragment` packet, checked:
/// splitting must not panic, and every fragment fits the MTU.
pub fn check_fragments(pkt: &mut VecPacket, mtu: u16) {
    if let Ok(plan) = fragment::plan(pkt.data(), mtu, 2048) {
        let mut extra = vec![VecPacket::new(&[]); plan.extra()];
        if fragment::split(pkt, &plan, extra.iter_mut()).is_ok() {
            for f in std::iter::once(&*pkt).chain(&extra) {
                let n = f.data().len();
                assert!(n > 14 && n <= 14 + usize::from(mtu), "{n}");
            }
        }
    }
}
