//! From a row's checks to what is wrong and the fix: the first check
//! along the path that fails names the problem, and the hint is written
//! for this backend, VIP and encapsulation (the commands an operator
//! types on a Linux backend).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use sluice_core::encap::{self, Encapsulation};

use super::plan::{Speech, Target};
use super::probe::mac_text;
use super::Check;

/// What is wrong with a path, stable words for scripts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// The backend's next hop does not answer ARP / neighbour discovery.
    NextHopUnresolved,
    /// The backend is not in the published tables, or its egress port
    /// has no address of the VIP's family to send probes from.
    NotRouted,
    /// The workers could not send the probe (counted drop).
    NotSent,
    /// The backend takes nothing the tunnel brings: no decapsulation
    /// device, one with another VNI, port or MAC, or a strict reverse-path
    /// filter.
    TunnelDropped,
    /// The tunnel works to the backend's own address, not to the VIP:
    /// the VIP is not bound on the backend.
    VipNotBound,
    /// The backend holds the VIP, but nothing listens on the port.
    NothingListens,
    /// Answers come from the backend's own address, not from the VIP.
    AnswersFromBackendAddress,
    /// Answers come from an address that is neither.
    AnswersFromElsewhere,
    /// Answers come back from the VIP, but the appliance's kernel does not
    /// take them.
    AnswerNotTaken,
    /// The server answers with something the check does not accept.
    WrongAnswer,
    /// Full-size packets, encapsulated, are beyond the egress port's MTU.
    TooBigForPort,
    /// Full-size packets are lost on the way: an MTU below them.
    FullSizeLost,
    /// Anything else the checks could not place.
    Other,
}

impl Problem {
    pub fn name(self) -> &'static str {
        match self {
            Problem::NextHopUnresolved => "next_hop_unresolved",
            Problem::NotRouted => "not_routed",
            Problem::NotSent => "not_sent",
            Problem::TunnelDropped => "tunnel_dropped",
            Problem::VipNotBound => "vip_not_bound",
            Problem::NothingListens => "nothing_listens",
            Problem::AnswersFromBackendAddress => "answers_from_backend_address",
            Problem::AnswersFromElsewhere => "answers_from_elsewhere",
            Problem::AnswerNotTaken => "answer_not_taken",
            Problem::WrongAnswer => "wrong_answer",
            Problem::TooBigForPort => "too_big_for_port",
            Problem::FullSizeLost => "full_size_lost",
            Problem::Other => "other",
        }
    }
}

/// A row's checks.
pub(super) struct Facts<'a> {
    pub target: &'a Target,
    pub next_hop: &'a Check,
    pub direct: &'a Check,
    pub to_vip: &'a Check,
    pub to_backend: &'a Check,
    pub full_size: &'a Check,
}

/// The problem of a row, if any, and the hint (a note when the path
/// works but a direct check would not).
pub(super) fn diagnose(f: &Facts<'_>) -> (Option<Problem>, Option<String>) {
    let t = f.target;
    if t.mute.is_some() {
        return (None, None);
    }
    let problem = if !f.next_hop.passed() && f.next_hop.reason() == Some("unresolved") {
        Some(Problem::NextHopUnresolved)
    } else if f.next_hop.reason() == Some("not_published") {
        Some(Problem::NotRouted)
    } else if !f.to_vip.passed() {
        Some(vip_problem(f))
    } else {
        match f.full_size.reason() {
            Some("too_big") => Some(Problem::TooBigForPort),
            Some("lost") => Some(Problem::FullSizeLost),
            Some(_) => Some(Problem::Other),
            None => None,
        }
    };
    let hint = match problem {
        Some(p) => Some(hint(p, f)),
        None if !f.direct.passed() => Some(format!(
            "the path works; a direct check (path = \"direct\") fails ({}): the server \
             does not answer on {}, so check it through the data path (path = \"data\")",
            f.direct.reason().unwrap_or("failed"),
            t.backend
        )),
        None => None,
    };
    (problem, hint)
}

/// Why the VIP's probe failed.
fn vip_problem(f: &Facts<'_>) -> Problem {
    match f.to_vip.reason().unwrap_or("") {
        "not_routed" => Problem::NotRouted,
        "not_sent" | "too_big" => Problem::NotSent,
        "refused" => Problem::NothingListens,
        "answered_from_backend_address" => Problem::AnswersFromBackendAddress,
        "answered_from_elsewhere" => Problem::AnswersFromElsewhere,
        "answer_not_taken" => Problem::AnswerNotTaken,
        "response_mismatch" => Problem::WrongAnswer,
        // Silence, or (IPv6) an unreachable from a backend that does not
        // hold the address: the tunnel to its own address tells which.
        "no_answer" | "unreachable" => match f.to_backend.reason() {
            // The tunnel brings packets to the backend's own address and
            // its answers back: it is the VIP the backend does not take.
            None if f.to_backend.passed() => Problem::VipNotBound,
            Some("refused" | "answered_from_backend_address" | "response_mismatch") => {
                Problem::VipNotBound
            }
            Some("no_answer") => Problem::TunnelDropped,
            _ => Problem::Other,
        },
        _ => Problem::Other,
    }
}

/// The hint of `p` for this row.
fn hint(p: Problem, f: &Facts<'_>) -> String {
    let t = f.target;
    let (vip, backend) = (t.vip.ip(), t.backend);
    let port_name = t.port.as_ref().map_or("its port", |p| p.name.as_str());
    let source = t
        .port
        .as_ref()
        .and_then(|p| p.source)
        .map_or_else(|| "the appliance".to_string(), |a| a.to_string());
    let proto = match t.speech {
        Speech::Tcp => "TCP",
        Speech::Udp { .. } => "UDP",
    };
    match p {
        Problem::NextHopUnresolved => format!(
            "no ARP/neighbour answer for {backend}'s next hop on {port_name}: the backend (or \
             the port's gateway) must be up on the port's segment"
        ),
        Problem::NotRouted => format!(
            "give {port_name} an address of {vip}'s family (ports.address): probes and \
             tunnels leave from it; if it has one, the backend is not published yet \
             (sluice status)"
        ),
        Problem::NotSent => format!(
            "the workers dropped the probe to {backend}: sluice_dropped_packets_total says \
             why (next_hop_unresolved, encap_unsupported, mtu_exceeded)"
        ),
        Problem::TunnelDropped => tunnel_hint(t.encapsulation, backend, &source),
        Problem::VipNotBound => match vip {
            IpAddr::V4(_) => format!(
                "bind {vip} on {backend}'s loopback with arp_ignore=1: `ip addr add {vip}/32 \
                 dev lo; sysctl -w net.ipv4.conf.all.arp_ignore=1 \
                 net.ipv4.conf.all.arp_announce=2` (the tunnel to {backend} itself works)"
            ),
            IpAddr::V6(_) => format!(
                "bind {vip} on {backend}'s loopback: `ip addr add {vip}/128 dev lo` (the \
                 tunnel to {backend} itself works)"
            ),
        },
        Problem::NothingListens => format!(
            "{backend} holds {vip} but nothing listens on {proto} port {}: bind the server \
             to {vip} or to every address",
            t.vip.port()
        ),
        Problem::AnswersFromBackendAddress => format!(
            "the server on {backend} answers from {backend}, not from {vip}: clients drop \
             such answers. Bind it to {vip}{}",
            if proto == "UDP" {
                " (or answer from the address each request came to: IP_PKTINFO)"
            } else {
                ""
            }
        ),
        Problem::AnswersFromElsewhere => format!(
            "{backend}'s answers come from neither {vip} nor its own address: its route \
             back to {source} picks another source (`ip route get {source} from {vip}` on \
             the backend)"
        ),
        Problem::AnswerNotTaken => format!(
            "{vip}'s answer came back but this appliance's kernel did not take it: \
             rp_filter must be 0 or 2 on {port_name}'s TAP, and no firewall may drop it"
        ),
        Problem::WrongAnswer => {
            format!("the server on {backend} answers {vip}, but not with the check's `response`")
        }
        Problem::TooBigForPort => {
            let mtu = t.port.as_ref().map_or(0, |p| p.mtu);
            let room = usize::from(mtu).saturating_sub(encap::overhead(t.encapsulation, backend));
            format!(
                "full-size packets to {backend}, encapsulated, pass {port_name}'s MTU {mtu}: \
                 clients are sent ICMP too-big and stall where it is filtered. Lower the MTU \
                 of {backend}'s {} device to {room} (it then advertises a smaller MSS), or \
                 raise the port's `mtu`",
                device_name(t.encapsulation)
            )
        }
        Problem::FullSizeLost => {
            let room = 1500usize.saturating_sub(encap::overhead(t.encapsulation, backend));
            format!(
                "full-size packets never reach {backend} (small ones do): an MTU below their \
                 encapsulated size on the way, often the backend's own interface. Raise it, or \
                 lower the MTU of {backend}'s {} device (to {room} under a 1500-byte path) so \
                 it advertises a smaller MSS",
                device_name(t.encapsulation)
            )
        }
        Problem::Other => format!(
            "to {vip}: {}; to {backend}: {}",
            f.to_vip.detail, f.to_backend.detail
        ),
    }
}

/// The backend's decapsulation device in words.
fn device_name(e: Encapsulation) -> &'static str {
    match e {
        Encapsulation::L2 => "VIP's",
        Encapsulation::Gre(_) => "GRE",
        Encapsulation::Ipip(_) => "IPIP",
        Encapsulation::Gue(_) => "GUE (fou)",
        Encapsulation::Geneve(_) => "GENEVE",
        Encapsulation::Vxlan(_) => "VXLAN",
    }
}

/// What a backend needs to take the tunnel's packets.
fn tunnel_hint(e: Encapsulation, backend: IpAddr, source: &str) -> String {
    let rp = format!(
        "and rp_filter 0 or 2 on it (`sysctl -w net.ipv4.conf.all.rp_filter=2 \
         net.ipv4.conf.<device>.rp_filter=2`): a strict rp_filter=1 drops this when the \
         route back to {source} leaves by another interface"
    );
    let device = match e {
        Encapsulation::L2 => {
            return format!(
                "{backend} drops the frames sent to its MAC: check the MAC it answers ARP \
                 with is the one on this port's segment, {rp}"
            )
        }
        Encapsulation::Gre(_) => "`modprobe ip_gre; ip link set gre0 up`".to_string(),
        Encapsulation::Ipip(_) => "`modprobe ipip; ip link set tunl0 up`".to_string(),
        Encapsulation::Gue(g) => format!(
            "`ip fou add port {} gue` and an ipip/sit device for the inner family",
            g.port
        ),
        Encapsulation::Geneve(g) => format!(
            "`ip link add gnv0 type geneve id {} remote {source} dstport {} \
             innerprotoinherit; ip link set gnv0 up`",
            g.vni, g.port
        ),
        Encapsulation::Vxlan(v) => format!(
            "`ip link add vx0 address {} type vxlan id {} dstport {} local {backend} \
             nolearning; ip link set vx0 up` (the MAC must be vxlan_mac: the device drops \
             frames to any other)",
            mac_text(v.mac),
            v.vni,
            v.port
        ),
    };
    format!(
        "{backend} takes nothing through the {} tunnel: create its device, {device}, {rp}",
        e.name()
    )
}
