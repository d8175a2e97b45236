//! A small world for conntrack tests: one hand-built snapshot, a shard, a
//! simulated clock (sans-IO), and packets described by their fields.
// Shared by integration tests, each its own binary crate: `pub` here
// means "for the test files", never reachable from outside the test.
#![allow(dead_code, unreachable_pub)]

use std::net::IpAddr;

use sluice_core::affinity::SessionAffinity;
use sluice_core::backend::{BackendState, Egress};
use sluice_core::conntrack::{self, Addrs, PacketMeta, Shard};
use sluice_core::encap::Encapsulation;
use sluice_core::flow::{flow_hash, tuple_kind, FlowKey};
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::service::{
    ConnectionTracking, PersistenceOnUnhealthy, ServiceState, TrackingMode,
};
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;
use sluice_core::wire::Ports;

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const GRE: u8 = 47;
pub const ESP: u8 = 50;
pub const ICMP: u8 = 1;
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const FIN: u8 = 0x01;
pub const RST: u8 = 0x04;

/// A packet by its fields.
#[derive(Copy, Clone, Debug)]
pub struct Pkt {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub flags: u8,
    pub ports: Option<Ports>,
    pub fragmented: bool,
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Pkt {
    pub fn tcp(client: &str, sport: u16, flags: u8) -> Self {
        Self {
            src: ip(client),
            dst: ip("203.0.113.10"),
            proto: TCP,
            flags,
            ports: Some(Ports {
                src: sport,
                dst: 80,
            }),
            fragmented: false,
        }
    }
    pub fn udp(client: &str, sport: u16) -> Self {
        Self {
            proto: UDP,
            flags: 0,
            ..Self::tcp(client, sport, 0)
        }
    }
    /// A non-first UDP fragment: no ports.
    pub fn udp_later_fragment(client: &str) -> Self {
        Self {
            ports: None,
            fragmented: true,
            ..Self::udp(client, 0)
        }
    }
    pub fn other(client: &str, proto: u8) -> Self {
        Self {
            proto,
            flags: 0,
            ports: None,
            ..Self::tcp(client, 0, 0)
        }
    }
    pub fn meta(&self) -> PacketMeta {
        PacketMeta {
            proto: self.proto,
            tcp_flags: self.flags,
            fragmented: self.fragmented,
            ports: self.ports,
        }
    }
    pub fn hash(&self, affinity: SessionAffinity) -> u64 {
        let kind = tuple_kind(affinity, self.proto, self.ports.is_some(), self.fragmented);
        flow_hash(&FlowKey::of_kind(
            kind, self.src, self.dst, self.proto, self.ports,
        ))
    }
}

pub struct World {
    pub state: ForwardingState,
    pub shard: Shard,
    pub now: Millis,
    /// Table size used when rebuilding.
    pub slots: usize,
    /// Rotation of the table layout (a stand-in for weight changes).
    pub rotation: usize,
}

pub const SVC: ServiceId = ServiceId(0);

impl World {
    /// One service with backends 0..n, all healthy, primary.
    pub fn new(
        n: u32,
        affinity: SessionAffinity,
        mode: TrackingMode,
        persistence: PersistenceOnUnhealthy,
    ) -> Self {
        let backends = (0..n)
            .map(|i| {
                Some(BackendState {
                    id: BackendId(i),
                    service: SVC,
                    address: ip(&format!("10.1.0.{}", i + 1)),
                    healthy: true,
                    weight: 1,
                    pool: Default::default(),
                    draining_until: None,
                    egress: Egress::default(),
                })
            })
            .collect();
        let service = ServiceState {
            name: "svc".into(),
            encapsulation: Encapsulation::L2,
            affinity,
            tracking: ConnectionTracking {
                mode,
                persistence,
                idle_timeout_ms: 60_000,
                half_open_timeout_ms: 5_000,
            },
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch: 0,
            tables: vec![],
            backends: (0..n).map(BackendId).collect(),
            quic_lb: None,
        };
        let mut w = Self {
            state: ForwardingState {
                services: vec![service],
                backends,
                ..Default::default()
            },
            shard: Shard::with_capacity_and_seed(4096, 7),
            now: Millis(1_000),
            slots: 13,
            rotation: 0,
        };
        w.rebuild();
        w
    }

    pub fn svc(&mut self) -> &mut ServiceState {
        &mut self.state.services[0]
    }

    pub fn backend(&mut self, id: u32) -> &mut BackendState {
        self.state.backends[id as usize].as_mut().unwrap()
    }

    /// The control plane's part, simplified: EL-1 eligible set (healthy,
    /// not draining; all non-draining if none is healthy) laid out
    /// round-robin from `rotation`.
    pub fn rebuild(&mut self) {
        let members = self.state.services[0].backends.clone();
        let live: Vec<BackendId> = members
            .iter()
            .copied()
            .filter(|id| {
                self.state
                    .backend(*id)
                    .is_some_and(|b| b.draining_until.is_none())
            })
            .collect();
        let healthy: Vec<BackendId> = live
            .iter()
            .copied()
            .filter(|id| self.state.backend(*id).is_some_and(|b| b.healthy))
            .collect();
        let eligible = if healthy.is_empty() { live } else { healthy };
        let slots = if eligible.is_empty() {
            vec![]
        } else {
            (0..self.slots)
                .map(|i| eligible[(i + self.rotation) % eligible.len()])
                .collect()
        };
        self.state.services[0].tables = vec![MaglevTable {
            slots: slots.into(),
        }
        .into()];
    }

    pub fn set_healthy(&mut self, id: u32, healthy: bool) {
        self.backend(id).healthy = healthy;
        self.rebuild();
    }

    /// CT-7 stand-in for weight changes / additions: the table moves.
    pub fn reshuffle(&mut self) {
        self.rotation += 1;
        self.rebuild();
    }

    /// CT-10: removed from the configuration, draining until now + timeout.
    pub fn remove(&mut self, id: u32) {
        let until = Millis(self.now.0 + self.state.services[0].draining_timeout_ms);
        self.backend(id).draining_until = Some(until);
        self.rebuild();
    }

    /// FO-1/CT-11: the active pool flips.
    pub fn flip(&mut self) {
        self.svc().pool_epoch += 1;
    }

    pub fn advance(&mut self, ms: u64) {
        self.now = Millis(self.now.0 + ms);
    }

    pub fn table_choice(&self, p: &Pkt) -> Option<BackendId> {
        let s = &self.state.services[0];
        s.tables[0].lookup(p.hash(s.affinity))
    }

    pub fn send(&mut self, p: &Pkt) -> Option<BackendId> {
        let s = &self.state.services[0];
        let hash = p.hash(s.affinity);
        conntrack::select(
            &mut self.shard,
            &p.meta(),
            &Addrs::new(p.src, p.dst),
            SVC,
            s,
            || s.table_for(None),
            &self.state,
            hash,
            self.now,
        )
    }

    /// A client port whose table choice differs from `not` (and is Some).
    pub fn port_not_on(&self, client: &str, proto_flags: (u8, u8), not: BackendId) -> u16 {
        (1000..u16::MAX)
            .find(|&sp| {
                let p = Pkt {
                    proto: proto_flags.0,
                    flags: proto_flags.1,
                    ..Pkt::tcp(client, sp, 0)
                };
                self.table_choice(&p).is_some_and(|b| b != not)
            })
            .unwrap()
    }
}
