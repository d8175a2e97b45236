//! A small hand-built ForwardingState for pipeline tests and proptests.

use std::net::IpAddr;

use sluice_core::affinity::SessionAffinity;
use sluice_core::backend::{BackendState, Egress};
use sluice_core::encap::{Encapsulation, Gre, Gue};
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::port::PortState;
use sluice_core::rules::{ForwardingRule, PortRange, RuleProtocol, RuleTable};
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;

use super::{ip, v4, v6, NEXT_HOP_MAC, PORT_MAC};

pub const PORT1_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];

/// Services, by index.
pub const SVC_TCP80_L2: u16 = 0;
pub const SVC_UDP_GRE: u16 = 1;
pub const SVC_V6_GUE: u16 = 2;
pub const SVC_EMPTY: u16 = 3;
pub const SVC_UNRESOLVED: u16 = 4;
pub const SVC_CLIENT_IP: u16 = 5;

pub const VIP4: &str = "203.0.113.10";
pub const VIP6: &str = "2001:db8::10";
pub const VIP_EMPTY: &str = "203.0.113.20";
pub const VIP_UNRESOLVED: &str = "203.0.113.30";
pub const VIP_CLIENT_IP: &str = "203.0.113.40";

/// The table shared by most services: backends 0 and 1 interleaved over a
/// prime number of slots.
pub fn table01() -> MaglevTable {
    let ids = [0, 1, 0, 1, 1, 0, 1];
    MaglevTable {
        slots: ids.iter().map(|i| BackendId(*i)).collect(),
    }
}

fn rule(vip: &str, protocol: RuleProtocol, ports: PortRange, svc: u16) -> ForwardingRule {
    ForwardingRule {
        name: format!("rule-{svc}"),
        vip: ip(vip),
        protocol,
        ports,
        service: ServiceId(svc),
        counter: svc,
    }
}

fn service(
    name: &str,
    encapsulation: Encapsulation,
    affinity: SessionAffinity,
    table: MaglevTable,
) -> ServiceState {
    ServiceState {
        name: name.into(),
        encapsulation,
        affinity,
        tracking: Default::default(),
        draining_timeout_ms: 0,
        drain_on_failover: true,
        follow_fragments: false,
        pool_epoch: 0,
        backends: table.slots.to_vec(),
        quic_lb: None,
        tables: vec![table.into()],
    }
}

fn backend(
    id: u32,
    svc: u16,
    address: IpAddr,
    port: u16,
    mac: Option<[u8; 6]>,
) -> Option<BackendState> {
    Some(backend_state(id, svc, address, port, mac))
}

/// A healthy, unweighted primary backend `id` of service `svc` at
/// `address`, reached out of `port` via `mac` (None: unresolved).
pub fn backend_state(
    id: u32,
    svc: u16,
    address: IpAddr,
    port: u16,
    mac: Option<[u8; 6]>,
) -> BackendState {
    BackendState {
        id: BackendId(id),
        service: ServiceId(svc),
        address,
        healthy: true,
        weight: 1,
        pool: Default::default(),
        draining_until: None,
        egress: Egress {
            port,
            next_hop_mac: mac,
        },
    }
}

pub fn state() -> ForwardingState {
    let tcp80 = PortRange {
        first: 80,
        last: 80,
    };
    let rules = RuleTable::new(vec![
        rule(VIP4, RuleProtocol::Tcp, tcp80, SVC_TCP80_L2),
        rule(VIP4, RuleProtocol::Udp, PortRange::ALL, SVC_UDP_GRE),
        rule(VIP6, RuleProtocol::L3Default, PortRange::ALL, SVC_V6_GUE),
        rule(VIP_EMPTY, RuleProtocol::Tcp, tcp80, SVC_EMPTY),
        rule(VIP_UNRESOLVED, RuleProtocol::Tcp, tcp80, SVC_UNRESOLVED),
        rule(
            VIP_CLIENT_IP,
            RuleProtocol::L3Default,
            PortRange::ALL,
            SVC_CLIENT_IP,
        ),
    ]);
    let unresolved = MaglevTable {
        slots: vec![BackendId(2)].into(),
    };
    // Without backend records: a test of the established lane or of the
    // prebuilt headers builds them (`build_lane_backends`) once the state
    // is as it wants it.
    ForwardingState {
        generation: 1,
        rules: rules.into(),
        services: vec![
            service("tcp80", Encapsulation::L2, SessionAffinity::None, table01()),
            service(
                "udp",
                Encapsulation::Gre(Gre),
                SessionAffinity::None,
                table01(),
            ),
            service(
                "v6",
                Encapsulation::Gue(Gue { port: 6080 }),
                SessionAffinity::None,
                table01(),
            ),
            service(
                "empty",
                Encapsulation::L2,
                SessionAffinity::None,
                MaglevTable::default(),
            ),
            service(
                "unresolved",
                Encapsulation::L2,
                SessionAffinity::None,
                unresolved,
            ),
            service(
                "client-ip",
                Encapsulation::Gre(Gre),
                SessionAffinity::ClientIp,
                table01(),
            ),
        ],
        backends: vec![
            backend(0, 0, ip("10.1.0.5"), 0, Some(NEXT_HOP_MAC)),
            backend(1, 0, ip("10.2.0.6"), 1, Some([0x02, 0xbb, 0, 0, 0, 0x02])),
            backend(2, 4, ip("10.1.0.7"), 0, None),
        ],
        ports: vec![
            PortState {
                name: "p0".into(),
                mac: PORT_MAC,
                ipv4: Some(v4("10.0.0.1")),
                ipv6: Some(v6("fd00::1")),
                mtu: 1500,
                vlan: None,
            },
            PortState {
                name: "p1".into(),
                mac: PORT1_MAC,
                ipv4: Some(v4("10.0.1.1")),
                ipv6: None,
                mtu: 1500,
                vlan: None,
            },
        ],
        zones: Default::default(),
        lane_backends: Default::default(),
        flow_seed: Default::default(),
    }
}
