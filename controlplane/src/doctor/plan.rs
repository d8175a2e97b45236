//! Which paths `sluice doctor` checks: per service, the VIPs and the port
//! its clients' packets take, crossed with its backends as the published
//! snapshot has them (with the next hop and the egress port the workers
//! use).

use std::net::{IpAddr, SocketAddr};

use sluice_core::encap::Encapsulation;
use sluice_core::rules::RuleProtocol;
use sluice_core::snapshot::ForwardingState;

use crate::config::{Config, ProbeKind};

/// How a path is spoken to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Speech {
    /// A TCP connection (and full-size segments on it).
    Tcp,
    /// A UDP check's datagram, and what its reply must contain.
    Udp {
        request: Vec<u8>,
        response: Option<Vec<u8>>,
    },
}

/// One row to check.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub service: String,
    pub encapsulation: Encapsulation,
    pub backend: IpAddr,
    pub vip: SocketAddr,
    pub speech: Speech,
    /// The backend's egress port in the snapshot: its name, MTU, and
    /// address of the VIP's family (the probes' source), if any.
    pub port: Option<EgressPort>,
    /// The next hop's MAC on the egress port; None while unresolved.
    pub next_hop_mac: Option<[u8; 6]>,
    /// Why there is nothing to say on this path (a UDP rule without a
    /// UDP check: no request a server would answer).
    pub mute: Option<&'static str>,
}

#[derive(Clone, Debug)]
pub(super) struct EgressPort {
    pub name: String,
    pub mtu: u16,
    pub source: Option<IpAddr>,
}

/// The rows of `cfg` against `state`, at most `limit`; and how many
/// more there were.
pub(super) fn targets(cfg: &Config, state: &ForwardingState, limit: usize) -> (Vec<Target>, usize) {
    let mut out = Vec::new();
    let mut more = 0;
    for (si, svc) in cfg.backend_services.iter().enumerate() {
        let check = svc.health_check.and_then(|i| cfg.health_checks.get(i));
        for (vip, speech, mute) in paths(cfg, si, check.map(|h| (&h.kind, h.port))) {
            for b in &svc.backends {
                if out.len() == limit {
                    more += 1;
                    continue;
                }
                let snap = snapshot_backend(state, &svc.name, b.address);
                out.push(Target {
                    service: svc.name.clone(),
                    encapsulation: svc.encapsulation,
                    backend: b.address,
                    vip,
                    speech: speech.clone(),
                    port: snap.and_then(|(port, _)| egress_port(state, port, vip.ip())),
                    next_hop_mac: snap.and_then(|(_, mac)| mac),
                    mute,
                });
            }
        }
    }
    (out, more)
}

type Path = (SocketAddr, Speech, Option<&'static str>);

/// The VIPs and port of service `si`'s paths: the health check's port and
/// protocol where its rules take them (what its check speaks is known to
/// be answered), else each rule's first port.
fn paths(cfg: &Config, si: usize, check: Option<(&ProbeKind, u16)>) -> Vec<Path> {
    let rules: Vec<_> = cfg
        .forwarding_rules
        .iter()
        .filter(|r| r.backend_service == si)
        .collect();
    let mut out: Vec<Path> = Vec::new();
    if let Some((kind, port)) = check {
        let (protocol, speech) = match kind {
            ProbeKind::Udp(u) => (
                RuleProtocol::Udp,
                Speech::Udp {
                    request: u.request.clone(),
                    response: u.response.clone(),
                },
            ),
            ProbeKind::Tcp(_) | ProbeKind::Http(_) => (RuleProtocol::Tcp, Speech::Tcp),
        };
        for r in &rules {
            let takes = matches!(r.protocol, RuleProtocol::L3Default) || r.protocol == protocol;
            let vip = SocketAddr::new(r.vip, port);
            if takes && r.ports.matches(Some(port)) && !out.iter().any(|p| p.0 == vip) {
                out.push((vip, speech.clone(), None));
            }
        }
    }
    if out.is_empty() {
        for r in &rules {
            let vip = SocketAddr::new(r.vip, r.ports.first);
            let (speech, mute) = match r.protocol {
                RuleProtocol::Udp => (
                    Speech::Udp {
                        request: Vec::new(),
                        response: None,
                    },
                    Some(
                        "a UDP rule and no UDP health check: nothing known that the server answers",
                    ),
                ),
                _ if r.ports.is_all() => (
                    Speech::Tcp,
                    Some("the rule takes every port and no health check names one to check"),
                ),
                RuleProtocol::Tcp | RuleProtocol::L3Default => (Speech::Tcp, None),
            };
            if !out.iter().any(|p| p.0 == vip) {
                out.push((vip, speech, mute));
            }
        }
    }
    out
}

/// Backend `address` of service `name` in the snapshot: its egress port's
/// index and its next hop's MAC.
fn snapshot_backend(
    state: &ForwardingState,
    name: &str,
    address: IpAddr,
) -> Option<(u16, Option<[u8; 6]>)> {
    let service = state.services.iter().find(|s| s.name == name)?;
    let b = service
        .backends
        .iter()
        .filter_map(|&id| state.backend(id))
        .find(|b| b.address == address)?;
    Some((b.egress.port, b.egress.next_hop_mac))
}

fn egress_port(state: &ForwardingState, port: u16, vip: IpAddr) -> Option<EgressPort> {
    let p = state.ports.get(usize::from(port))?;
    let source = match vip {
        IpAddr::V4(_) => p.ipv4.map(IpAddr::V4),
        IpAddr::V6(_) => p.ipv6.map(IpAddr::V6),
    };
    Some(EgressPort {
        name: p.name.clone(),
        mtu: p.mtu,
        source,
    })
}
