//! `pipeline::process` on a hand-built snapshot: Forward with exact output
//! bytes, Punt for the appliance's own traffic (AP-4), named drops (FR-3,
//! FR-4), fragment handling (HA-2, HA-3).

mod common;

use std::net::IpAddr;

use common::state::*;
use common::*;
use sluice_core::flow::{flow_hash, FlowKey};
use sluice_core::ids::BackendId;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::snapshot::ForwardingState;
use sluice_core::wire::Ports;
use sluice_core::DropReason;

fn run_on(state: &ForwardingState, frame: &[u8]) -> (Verdict, Vec<u8>) {
    let mut pkt = VecPacket::new(frame);
    let v = process(&mut pkt, 0, state, &mut PipelineCtx::default());
    (v, pkt.data().to_vec())
}

fn run(frame: &[u8]) -> (Verdict, Vec<u8>) {
    run_on(&state(), frame)
}

/// A drop leaves the bytes alone and names the reason.
fn assert_drop(frame: &[u8], reason: DropReason) {
    assert_eq!(run(frame), (Verdict::Drop(reason), frame.to_vec()));
}

fn expected_backend(key: &FlowKey) -> BackendId {
    table01().lookup(flow_hash(key)).unwrap()
}

fn tcp_to(client: &str, vip: &str, sport: u16, dport: u16) -> (Vec<u8>, Vec<u8>) {
    let ip4 = ipv4(v4(client), v4(vip), TCP, DF, &tcp(sport, dport, SYN, &[]));
    (eth(&[VLAN], ETH_IPV4, &ip4), ip4)
}

/// FR-1 + AP-3: TCP to VIP:80 goes by 5-tuple hash to a backend over L2 DSR,
/// out of that backend's egress port with its next-hop MAC.
#[test]
fn fr_1_tcp_to_vip_is_forwarded_l2() {
    let st = state();
    let mut seen = [false; 2];
    for sport in 40000..40032 {
        let (frame, ip4) = tcp_to("198.51.100.7", VIP4, sport, 80);
        let key = FlowKey::five_tuple(
            ip("198.51.100.7"),
            ip(VIP4),
            TCP,
            Ports {
                src: sport,
                dst: 80,
            },
        );
        let id = expected_backend(&key);
        let b = st.backend(id).unwrap();
        let (v, out) = run_on(&st, &frame);
        assert_eq!(
            v,
            Verdict::Forward {
                port: b.egress.port,
                backend: id
            }
        );
        let port_mac = st.ports[usize::from(b.egress.port)].mac;
        let mut want = b.egress.next_hop_mac.unwrap().to_vec();
        want.extend_from_slice(&port_mac);
        want.extend_from_slice(&[0x08, 0x00]);
        want.extend_from_slice(&ip4);
        assert_eq!(out, want);
        seen[id.0 as usize] = true;
    }
    assert_eq!(seen, [true, true], "32 flows should use both backends");
}

/// GRE service: the outer header goes to the chosen backend's address.
#[test]
fn udp_to_vip_is_forwarded_in_gre() {
    let st = state();
    let ip4 = ipv4(v4("198.51.100.7"), v4(VIP4), UDP, 0, &udp(5000, 53, b"q"));
    let (v, out) = run_on(&st, &eth(&[], ETH_IPV4, &ip4));
    let Verdict::Forward { backend, .. } = v else {
        panic!("{v:?}")
    };
    let IpAddr::V4(addr) = st.backend(backend).unwrap().address else {
        panic!()
    };
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    assert_eq!(out[14 + 9], 47);
    assert_eq!(&out[14 + 16..14 + 20], &addr.octets());
    assert_eq!(inet_checksum(&out[14..34]), 0);
    assert_eq!(&out[34..38], &[0, 0, 0x08, 0x00]);
    assert_eq!(&out[38..], &ip4[..]);
}

/// FR-5 / AP-3: an IPv6 VIP over GUE (outer IPv4 to an IPv4 backend).
#[test]
fn fr_5_ipv6_vip_forwarded_in_gue() {
    let ip6 = ipv6(v6("2001:db8::7"), v6(VIP6), ESP, &[0; 16]);
    let (v, out) = run(&eth(&[], ETH_IPV6, &ip6));
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert_eq!(out[14 + 9], UDP);
    assert_eq!(&out[36..38], &6080u16.to_be_bytes());
    assert_eq!(&out[42..46], &[0, 41, 0, 0]);
    assert_eq!(&out[46..], &ip6[..]);
}

/// AP-4: ARP, the ports' own addresses and IPv6 neighbour discovery go to
/// the kernel.
#[test]
fn ap_4_appliance_traffic_is_punted() {
    assert_eq!(run(&eth(&[], ETH_ARP, &[0; 28])).0, Verdict::Punt);
    assert_eq!(run(&eth(&[VLAN], ETH_ARP, &[0; 28])).0, Verdict::Punt);
    let echo = ipv4(
        v4("198.51.100.7"),
        v4("10.0.1.1"),
        ICMP,
        0,
        &[8, 0, 0, 0, 0, 0, 0, 0],
    );
    assert_eq!(run(&eth(&[], ETH_IPV4, &echo)).0, Verdict::Punt);
    let bgp = ipv6(
        v6("fd00::2"),
        v6("fd00::1"),
        TCP,
        &tcp(40000, 179, SYN, &[]),
    );
    assert_eq!(run(&eth(&[], ETH_IPV6, &bgp)).0, Verdict::Punt);
    // Neighbour solicitation to a solicited-node multicast group.
    let ns = ipv6(
        v6("fd00::2"),
        v6("ff02::1:ff00:1"),
        ICMPV6,
        &[135, 0, 0, 0, 0, 0, 0, 0],
    );
    assert_eq!(run(&eth(&[], ETH_IPV6, &ns)).0, Verdict::Punt);
    // Unicast NUD probe to a link-local address.
    let nud = ipv6(v6("fe80::2"), v6("fe80::1"), ICMPV6, &[135, 0, 0, 0]);
    assert_eq!(run(&eth(&[], ETH_IPV6, &nud)).0, Verdict::Punt);
}

#[test]
fn ap_4_only_neighbour_discovery_is_punted_from_multicast() {
    let echo = ipv6(v6("fd00::2"), v6("ff02::1"), ICMPV6, &[128, 0, 0, 0]);
    assert_drop(&eth(&[], ETH_IPV6, &echo), DropReason::NotForUs);
    let ns_global = ipv6(v6("fd00::2"), v6("2001:db8::99"), ICMPV6, &[135, 0, 0, 0]);
    assert_drop(&eth(&[], ETH_IPV6, &ns_global), DropReason::NotForUs);
}

/// FR-3: not a VIP → NotForUs; a VIP without a matching rule → NoRule.
#[test]
fn fr_3_misses_are_named() {
    assert_drop(
        &tcp_to("198.51.100.7", "198.51.100.200", 1, 80).0,
        DropReason::NotForUs,
    );
    assert_drop(&tcp_to("198.51.100.7", VIP4, 1, 81).0, DropReason::NoRule);
    let esp = ipv4(v4("198.51.100.7"), v4(VIP4), ESP, 0, &[0; 8]);
    assert_drop(&eth(&[], ETH_IPV4, &esp), DropReason::NoRule);
}

/// FR-4: a non-first TCP fragment has no port, so the TCP:80 rule cannot
/// match it; a UDP ALL rule matches every fragment.
#[test]
fn fr_4_non_first_fragments_match_only_all_port_rules() {
    let tcp_later = ipv4(v4("198.51.100.7"), v4(VIP4), TCP, 185, &[0; 8]);
    assert_drop(&eth(&[], ETH_IPV4, &tcp_later), DropReason::NoRule);
    let tcp_first = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        TCP,
        MF,
        &tcp(1, 80, 0, &[0; 8]),
    );
    assert!(matches!(
        run(&eth(&[], ETH_IPV4, &tcp_first)).0,
        Verdict::Forward { .. }
    ));
    let udp_later = ipv4(v4("198.51.100.7"), v4(VIP4), UDP, 185, &[0; 8]);
    assert!(matches!(
        run(&eth(&[], ETH_IPV4, &udp_later)).0,
        Verdict::Forward { .. }
    ));
}

/// HA-2: all fragments of one datagram reach one backend (many datagrams,
/// so a 3-tuple/5-tuple mix-up would show).
#[test]
fn ha_2_fragments_of_one_datagram_reach_one_backend() {
    for n in 0..32u8 {
        let client = format!("198.51.100.{n}");
        let first = ipv4(
            v4(&client),
            v4(VIP4),
            UDP,
            MF,
            &udp(4000 + u16::from(n), 53, &[0; 16]),
        );
        let later = ipv4(v4(&client), v4(VIP4), UDP, 3, &[0; 8]);
        let a = run(&eth(&[], ETH_IPV4, &first)).0;
        let b = run(&eth(&[], ETH_IPV4, &later)).0;
        assert!(matches!(a, Verdict::Forward { .. }));
        assert_eq!(a, b, "client {client}");
    }
}

/// HA-2 with IPv6: a datagram whose fragmentable part starts with
/// destination options (so the first fragment carries DEST + UDP, the
/// later ones only data) still lands on one backend: both report the
/// Fragment header's next header as protocol.
#[test]
fn ha_2_ipv6_fragments_with_dest_opts_reach_one_backend() {
    let mut seen = [false; 2];
    for n in 1..33u16 {
        let client = format!("2001:db8:c::{n:x}");
        let first = [frag6(60, 0, true, 5), opts6(UDP), udp(4000, 53, &[0; 16])].concat();
        let later = [frag6(60, 4, false, 5), vec![0; 8]].concat();
        let a = run(&eth(
            &[],
            ETH_IPV6,
            &ipv6(v6(&client), v6(VIP6), 44, &first),
        ))
        .0;
        let b = run(&eth(
            &[],
            ETH_IPV6,
            &ipv6(v6(&client), v6(VIP6), 44, &later),
        ))
        .0;
        let Verdict::Forward { backend, .. } = a else {
            panic!("{a:?}")
        };
        assert_eq!(a, b, "client {client}");
        seen[backend.0 as usize] = true;
    }
    assert_eq!(seen, [true, true]);
}

/// HA-3: under CLIENT_IP every packet of a client (fragment or not, any
/// protocol or port) reaches the same backend.
#[test]
fn ha_3_client_ip_keeps_a_client_on_one_backend() {
    for n in 0..16u8 {
        let c = v4(&format!("198.51.100.{n}"));
        let vip = v4(VIP_CLIENT_IP);
        let packets = [
            ipv4(c, vip, UDP, 0, &udp(1000, 53, &[])),
            ipv4(c, vip, UDP, 0, &udp(2000, 54, &[])),
            ipv4(c, vip, UDP, MF, &udp(3000, 53, &[0; 8])),
            ipv4(c, vip, UDP, 7, &[0; 8]),
            ipv4(c, vip, TCP, 0, &tcp(4000, 443, SYN, &[])),
        ];
        let verdicts: Vec<_> = packets
            .iter()
            .map(|p| run(&eth(&[], ETH_IPV4, p)).0)
            .collect();
        assert!(verdicts.iter().all(|v| *v == verdicts[0]), "{verdicts:?}");
    }
}

/// EL-4: an empty table drops new flows as NoBackend.
#[test]
fn el_4_empty_table_is_no_backend() {
    assert_drop(
        &tcp_to("198.51.100.7", VIP_EMPTY, 1, 80).0,
        DropReason::NoBackend,
    );
}

#[test]
fn unresolved_next_hop_is_dropped() {
    assert_drop(
        &tcp_to("198.51.100.7", VIP_UNRESOLVED, 1, 80).0,
        DropReason::NextHopUnresolved,
    );
}

#[test]
fn malformed_frames_are_named() {
    assert_drop(&[0u8; 13], DropReason::TruncatedEthernet);
    assert_drop(
        &eth(&[VLAN], ETH_IPV4, &[])[..17],
        DropReason::TruncatedEthernet,
    );
    assert_drop(&eth(&[], 0x88cc, &[0; 40]), DropReason::UnknownEthertype);
    assert_drop(&eth(&[], ETH_IPV4, &[0x45; 19]), DropReason::BadIpv4Header);
    assert_drop(&eth(&[], ETH_IPV6, &[0x60; 39]), DropReason::BadIpv6Header);
    let chain = ipv6(v6("::1"), v6(VIP6), 60, &[60, 0, 0, 0]);
    assert_drop(
        &eth(&[], ETH_IPV6, &chain),
        DropReason::BadIpv6ExtensionHeader,
    );
    let short_tcp = ipv4(v4("198.51.100.7"), v4(VIP4), TCP, 0, &[0; 10]);
    assert_drop(&eth(&[], ETH_IPV4, &short_tcp), DropReason::BadL4Header);
}

/// A snapshot whose rule names a missing service, or whose table names a
/// missing backend or port, drops instead of panicking.
#[test]
fn inconsistent_snapshot_never_panics() {
    let frame = tcp_to("198.51.100.7", VIP4, 1, 80).0;
    // Each built whole, as the control plane builds a snapshot: its
    // backend records follow what is left.
    let mut st = state();
    st.services.clear();
    st.lane_backends = st.build_lane_backends();
    assert_eq!(run_on(&st, &frame).0, Verdict::Drop(DropReason::NoBackend));
    let mut st = state();
    st.backends.clear();
    st.lane_backends = st.build_lane_backends();
    assert_eq!(run_on(&st, &frame).0, Verdict::Drop(DropReason::NoBackend));
    let mut st = state();
    st.ports.truncate(0);
    st.lane_backends = st.build_lane_backends();
    assert_eq!(
        run_on(&st, &frame).0,
        Verdict::Drop(DropReason::NextHopUnresolved)
    );
}
