//! From a row's checks to what is wrong and the fix: the first check
//! along the path that fails names the problem, and the hint is written
//! for this backend, VIP and encapsulation (the commands an operator
//! types on a Linux backend).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use sluice_core::encap::{self, Encapsulation};

use super::plan::{Speech, Target};
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
    /// The backend refuses the tunnel's packets (an ICMP port or protocol
    /// unreachable about them): it has no decapsulation device.
    TunnelRefused,
    /// The backend drops what the tunnel brings without a word: a device
    /// with another VNI or MAC, or a strict reverse-path filter (which
    /// the checks of this address alone cannot tell apart).
    TunnelDropped,
    /// As [`Problem::TunnelDropped`], where the reverse-path filter is
    /// ruled out (IPv6 has none): the device does not match the tunnel
    /// (VNI, port, MAC).
    TunnelMismatch,
    /// As [`Problem::TunnelDropped`] over IPv4, where the same host
    /// (the same next hop on the same port) takes the tunnel over IPv6:
    /// a strict reverse-path filter, which only IPv4 has.
    ReversePathFilter,
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
            Problem::TunnelRefused => "tunnel_refused",
            Problem::TunnelDropped => "tunnel_dropped",
            Problem::TunnelMismatch => "tunnel_mismatch",
            Problem::ReversePathFilter => "reverse_path_filter",
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
    if let Some(why) = t.mute {
        return (None, Some(format!("not checked: {why}")));
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
            Some("tunnel_refused") => Problem::TunnelRefused,
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
        Problem::TunnelRefused => format!(
            "{backend} has no {} device to take the tunnel: create it, {}",
            device_name(t.encapsulation),
            device_command(t.encapsulation, backend, &source)
        ),
        Problem::TunnelDropped => format!(
            "{backend} drops the {} tunnel's packets without a word: {}; or {}",
            t.encapsulation.name(),
            mismatch_hint(t.encapsulation, backend, &source),
            rp_filter_hint(&source)
        ),
        Problem::TunnelMismatch => format!(
            "{backend} drops the {} tunnel's packets without a word, over IPv6 too (which \
             has no rp_filter): {}",
            t.encapsulation.name(),
            mismatch_hint(t.encapsulation, backend, &source)
        ),
        Problem::ReversePathFilter => format!(
            "{backend} drops the {} tunnel's packets over IPv4 while the same host takes \
             them over IPv6: {}",
            t.encapsulation.name(),
            rp_filter_hint(&source)
        ),
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
            format!(
                "segments sized for {port_name}'s MTU {mtu} pass it once encapsulated: \
                 {}",
                advmss_hint(t, usize::from(mtu))
            )
        }
        Problem::FullSizeLost => format!(
            "full-size packets never reach {backend}, small ones do: a link on the way (a \
             switch port, the underlay, the backend's own interface) has an MTU below \
             {port_name}'s. Raise it to match, or {}",
            advmss_hint(t, 1500)
        ),
        Problem::Other => format!(
            "to {vip}: {}; to {backend}: {}",
            f.to_vip.detail, f.to_backend.detail
        ),
    }
}

/// How a backend makes clients send segments that fit a path of `mtu`
/// bytes once encapsulated: a smaller MSS advertised on its route to
/// them (DSR: its answers, and so its MSS, leave by that route).
fn advmss_hint(t: &Target, mtu: usize) -> String {
    let headers = if t.vip.is_ipv4() { 40 } else { 60 };
    let mss = mtu
        .saturating_sub(encap::overhead(t.encapsulation, t.backend))
        .saturating_sub(headers);
    format!(
        "have {} advertise a smaller MSS to clients: `ip route change default via <its \
         gateway> advmss {mss}` for a {mtu}-byte path",
        t.backend
    )
}

/// A MAC address as `ip link` writes it.
pub(super) fn mac_text(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
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

/// The command that creates the backend's decapsulation device.
fn device_command(e: Encapsulation, backend: IpAddr, source: &str) -> String {
    match e {
        Encapsulation::L2 => "none: layer 2 needs the VIP on its loopback only".to_string(),
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
             nolearning; ip link set vx0 up`",
            mac_text(v.mac),
            v.vni,
            v.port
        ),
    }
}

/// A strict reverse-path filter, and its fix.
fn rp_filter_hint(source: &str) -> String {
    format!(
        "a strict rp_filter=1 drops the tunnel's packets when the route back to {source} \
         leaves by another interface (DSR answers do): `sysctl -w \
         net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.<device>.rp_filter=2`"
    )
}

/// A device that does not match the tunnel, and what it must be.
fn mismatch_hint(e: Encapsulation, backend: IpAddr, source: &str) -> String {
    match e {
        Encapsulation::L2 => format!(
            "{backend} drops the frames sent to the MAC it answers ARP with: check nothing \
             between filters them"
        ),
        Encapsulation::Vxlan(v) => format!(
            "its VXLAN device must have VNI {}, UDP port {} and MAC {} (vxlan_mac: it drops \
             frames to any other MAC), as {}",
            v.vni,
            v.port,
            mac_text(v.mac),
            device_command(e, backend, source)
        ),
        _ => format!(
            "its {} device must match the service's tunnel, as {}",
            device_name(e),
            device_command(e, backend, source)
        ),
    }
}

/// Rows whose tunnel is dropped without a word, told apart where the
/// same host (the same next hop on the same port) has a row of the
/// other family: IPv6 has no reverse-path filter, so a host that drops
/// the tunnel over IPv6 has a device that does not match it, and one
/// that takes it over IPv6 but not over IPv4 most likely filters.
pub(super) fn refine(rows: &mut [(Target, super::Row)]) {
    let works = |r: &super::Row| r.to_vip.passed() || r.to_backend.passed();
    let host = |t: &Target| {
        t.next_hop_mac
            .map(|m| (m, t.port.as_ref().map(|p| p.name.clone())))
    };
    let v6_hosts: Vec<_> = rows
        .iter()
        .filter(|(t, _)| t.backend.is_ipv6())
        .filter_map(|(t, r)| Some((host(t)?, t.encapsulation.name(), works(r))))
        .collect();
    for (t, r) in rows.iter_mut() {
        if r.problem != Some(Problem::TunnelDropped) {
            continue;
        }
        let refined = if t.backend.is_ipv6() {
            Problem::TunnelMismatch
        } else {
            let siblings: Vec<bool> = v6_hosts
                .iter()
                .filter(|(h, e, _)| Some(h) == host(t).as_ref() && *e == t.encapsulation.name())
                .map(|(_, _, w)| *w)
                .collect();
            if siblings.iter().any(|&w| w) {
                Problem::ReversePathFilter
            } else if siblings.is_empty() {
                continue;
            } else {
                Problem::TunnelMismatch
            }
        };
        let facts = Facts {
            target: t,
            next_hop: &r.next_hop,
            direct: &r.direct,
            to_vip: &r.to_vip,
            to_backend: &r.to_backend,
            full_size: &r.full_size,
        };
        r.hint = Some(hint(refined, &facts));
        r.problem = Some(refined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::plan::EgressPort;
    use crate::doctor::{Outcome, Row};
    use sluice_core::encap::Vxlan;

    fn target(backend: &str) -> Target {
        Target {
            service: "web".into(),
            encapsulation: Encapsulation::Vxlan(Vxlan {
                port: 4789,
                vni: 42,
                mac: [2, 0x5c, 0, 0, 0, 0x2a],
            }),
            backend: backend.parse().unwrap(),
            vip: if backend.contains(':') {
                "[fd99:1::10]:80".parse().unwrap()
            } else {
                "10.99.1.10:80".parse().unwrap()
            },
            speech: Speech::Tcp,
            port: Some(EgressPort {
                name: "uplink".into(),
                mtu: 1500,
                source: Some("10.99.0.2".parse().unwrap()),
            }),
            next_hop_mac: Some([2, 0, 0, 0, 0, 1]),
            mute: None,
        }
    }

    fn ok() -> Check {
        Check::pass("ok")
    }
    fn failed(reason: &str) -> Check {
        Check::fail(reason, reason)
    }
    fn skipped() -> Check {
        Check::skipped("-")
    }

    fn problem(t: &Target, to_vip: Check, to_backend: Check, full: Check) -> Option<Problem> {
        let f = Facts {
            target: t,
            next_hop: &ok(),
            direct: &ok(),
            to_vip: &to_vip,
            to_backend: &to_backend,
            full_size: &full,
        };
        diagnose(&f).0
    }

    /// HC-9: the first check along the path that fails names the problem;
    /// a working path with a failing direct check is a note, not one.
    #[test]
    fn hc_9_each_failure_along_the_path_has_its_problem() {
        let t = target("10.99.0.12");
        assert_eq!(problem(&t, ok(), skipped(), ok()), None);
        let cases = [
            (failed("no_answer"), ok(), Problem::VipNotBound),
            (
                failed("unreachable"),
                failed("refused"),
                Problem::VipNotBound,
            ),
            (
                failed("no_answer"),
                failed("no_answer"),
                Problem::TunnelDropped,
            ),
            (
                failed("no_answer"),
                failed("tunnel_refused"),
                Problem::TunnelRefused,
            ),
            (failed("refused"), skipped(), Problem::NothingListens),
            (
                failed("answered_from_backend_address"),
                ok(),
                Problem::AnswersFromBackendAddress,
            ),
            (failed("not_routed"), skipped(), Problem::NotRouted),
            (failed("not_sent"), skipped(), Problem::NotSent),
        ];
        for (to_vip, to_backend, want) in cases {
            let got = problem(&t, to_vip.clone(), to_backend.clone(), skipped());
            assert_eq!(got, Some(want), "{to_vip:?} {to_backend:?}");
        }
        assert_eq!(
            problem(&t, ok(), skipped(), failed("lost")),
            Some(Problem::FullSizeLost)
        );
        assert_eq!(
            problem(&t, ok(), skipped(), failed("too_big")),
            Some(Problem::TooBigForPort)
        );
        let unresolved = Facts {
            target: &t,
            next_hop: &failed("unresolved"),
            direct: &ok(),
            to_vip: &failed("not_sent"),
            to_backend: &skipped(),
            full_size: &skipped(),
        };
        assert_eq!(diagnose(&unresolved).0, Some(Problem::NextHopUnresolved));
        let direct_only = Facts {
            target: &t,
            next_hop: &ok(),
            direct: &failed("refused"),
            to_vip: &ok(),
            to_backend: &skipped(),
            full_size: &ok(),
        };
        let (p, hint) = diagnose(&direct_only);
        assert_eq!(p, None);
        assert!(hint.unwrap().contains("path = \"data\""));
    }

    /// Hints are written for the row: the VIP, the backend, the tunnel's
    /// own VNI and MAC.
    #[test]
    fn hints_name_this_rows_addresses_and_device() {
        let t = target("10.99.0.14");
        let f = Facts {
            target: &t,
            next_hop: &ok(),
            direct: &ok(),
            to_vip: &failed("no_answer"),
            to_backend: &ok(),
            full_size: &skipped(),
        };
        let h = hint(Problem::VipNotBound, &f);
        assert!(h.contains("ip addr add 10.99.1.10/32 dev lo"), "{h}");
        let h = hint(Problem::TunnelRefused, &f);
        assert!(
            h.contains("address 02:5c:00:00:00:2a type vxlan id 42 dstport 4789 local 10.99.0.14"),
            "{h}"
        );
        let h = hint(Problem::FullSizeLost, &f);
        assert!(h.contains("advmss 1410"), "{h}");
    }

    fn row(t: &Target, problem: Option<Problem>, to_vip: Check) -> Row {
        Row {
            service: t.service.clone(),
            encapsulation: "vxlan".into(),
            backend: t.backend,
            vip: t.vip.ip(),
            protocol: "tcp".into(),
            port: 80,
            next_hop: ok(),
            direct: ok(),
            to_vip,
            to_backend: failed("no_answer"),
            full_size: skipped(),
            problem,
            hint: None,
        }
    }

    /// A tunnel dropped without a word over IPv4 is a reverse-path filter
    /// where the same host takes it over IPv6, a mismatched device where
    /// it drops it there too; over IPv6 it is always the device.
    #[test]
    fn hc_9_the_other_family_tells_a_filter_from_a_device() {
        let (v4, v6) = (target("10.99.0.13"), target("fd99::13"));
        let dropped = Some(Problem::TunnelDropped);
        let mut rows = vec![
            (v4.clone(), row(&v4, dropped, failed("no_answer"))),
            (v6.clone(), row(&v6, None, ok())),
        ];
        refine(&mut rows);
        assert_eq!(rows[0].1.problem, Some(Problem::ReversePathFilter));
        assert!(rows[0].1.hint.as_ref().unwrap().contains("rp_filter=2"));
        let mut rows = vec![
            (v4.clone(), row(&v4, dropped, failed("no_answer"))),
            (v6.clone(), row(&v6, dropped, failed("no_answer"))),
        ];
        refine(&mut rows);
        assert_eq!(rows[0].1.problem, Some(Problem::TunnelMismatch));
        assert_eq!(rows[1].1.problem, Some(Problem::TunnelMismatch));
        let mut alone = vec![(v4.clone(), row(&v4, dropped, failed("no_answer")))];
        refine(&mut alone);
        assert_eq!(alone[0].1.problem, Some(Problem::TunnelDropped));
        assert_eq!(alone[0].1.to_vip.outcome, Outcome::Fail);
    }
}
