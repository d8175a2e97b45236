//! AP-3 delivery: exact output bytes for layer-2 DSR, GRE, IP-in-IP, GUE,
//! GENEVE and VXLAN (outer IPv4 checksum verified independently, GENEVE's
//! and VXLAN's headers written out from RFC 8926's and RFC 7348's
//! layouts), and the named drops.

mod common;

use std::net::IpAddr;

use common::*;
use sluice_core::backend::BackendState;
use sluice_core::encap::{encapsulate, udp_src_port, Encapsulation, Geneve, Gre, Gue, Ipip, Vxlan};
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::port::PortState;
use sluice_core::wire::{parse, IpInfo, Parsed};
use sluice_core::DropReason;

const HASH: u64 = 0x0123_4567_89ab_cdef;

fn backend(address: IpAddr, next_hop: Option<[u8; 6]>) -> BackendState {
    common::state::backend_state(3, 0, address, 0, next_hop)
}

fn port(mtu: u16) -> PortState {
    PortState {
        name: "p0".into(),
        mac: PORT_MAC,
        ipv4: Some(v4("10.0.0.1")),
        ipv6: Some(v6("fd00::1")),
        mtu,
        vlan: None,
    }
}

fn info(frame: &[u8]) -> IpInfo {
    match parse(frame) {
        Ok(Parsed::Ip(i)) => i,
        other => panic!("{other:?}"),
    }
}

/// Runs the encapsulator on `frame`; returns the result and output bytes.
fn run(
    frame: &[u8],
    encap: Encapsulation,
    b: &BackendState,
    p: &PortState,
) -> (Result<(), DropReason>, Vec<u8>) {
    let i = info(frame);
    let mut pkt = VecPacket::new(frame);
    let r = encapsulate(&mut pkt, &i, encap, b, p, HASH);
    (r, pkt.data().to_vec())
}

fn inner_v4(flags: u16) -> Vec<u8> {
    ipv4(
        v4("198.51.100.7"),
        v4("203.0.113.10"),
        TCP,
        flags,
        &tcp(40000, 80, SYN, b"payload"),
    )
}

fn inner_v6() -> Vec<u8> {
    ipv6(
        v6("2001:db8::7"),
        v6("2001:db8::10"),
        UDP,
        &udp(40000, 53, b"q"),
    )
}

fn l2_header(ethertype: u16) -> Vec<u8> {
    let mut h = NEXT_HOP_MAC.to_vec();
    h.extend_from_slice(&PORT_MAC);
    h.extend_from_slice(&ethertype.to_be_bytes());
    h
}

/// The expected outer IPv4 header, written out field by field.
fn outer_v4(proto: u8, df: bool, payload_len: usize) -> Vec<u8> {
    let total = (20 + payload_len) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, if df { 0x40 } else { 0 }, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&[10, 0, 0, 1, 10, 1, 0, 5]);
    let c = inet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// AP-3 L2 DSR: plain Ethernet to the next hop from the port's MAC, VLAN
/// tags and Ethernet padding gone, IP packet byte for byte.
#[test]
fn ap_3_l2_dsr_exact_bytes() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let ip4 = inner_v4(DF);
    for tpids in [&[][..], &[VLAN], &[QINQ, VLAN]] {
        let mut frame = eth(tpids, ETH_IPV4, &ip4);
        frame.extend_from_slice(&[0; 6]); // padding
        let (r, out) = run(&frame, Encapsulation::L2, &b, &port(1500));
        assert_eq!(r, Ok(()));
        assert_eq!(
            out,
            [l2_header(ETH_IPV4), ip4.clone()].concat(),
            "{tpids:?}"
        );
    }
    let ip6 = inner_v6();
    let (r, out) = run(
        &eth(&[VLAN], ETH_IPV6, &ip6),
        Encapsulation::L2,
        &b,
        &port(1500),
    );
    assert_eq!(r, Ok(()));
    assert_eq!(out, [l2_header(ETH_IPV6), ip6].concat());
}

/// AP-3 GRE, inner IPv4: outer DF copied from the inner packet, protocol
/// type 0x0800, checksum valid.
#[test]
fn ap_3_gre_inner_ipv4_exact_bytes() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    for (flags, df) in [(DF, true), (0, false)] {
        let ip4 = inner_v4(flags);
        let (r, out) = run(
            &eth(&[VLAN], ETH_IPV4, &ip4),
            Encapsulation::Gre(Gre),
            &b,
            &port(1500),
        );
        assert_eq!(r, Ok(()));
        let outer = outer_v4(47, df, 4 + ip4.len());
        let want = [l2_header(ETH_IPV4), outer, vec![0, 0, 0x08, 0x00], ip4].concat();
        assert_eq!(out, want, "df {df}");
        assert_eq!(inet_checksum(&out[14..34]), 0, "outer checksum must verify");
    }
}

/// AP-3 GRE, inner IPv6: DF set, protocol type 0x86DD.
#[test]
fn ap_3_gre_inner_ipv6_exact_bytes() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let ip6 = inner_v6();
    let (r, out) = run(
        &eth(&[], ETH_IPV6, &ip6),
        Encapsulation::Gre(Gre),
        &b,
        &port(1500),
    );
    assert_eq!(r, Ok(()));
    let want = [
        l2_header(ETH_IPV4),
        outer_v4(47, true, 4 + ip6.len()),
        vec![0, 0, 0x86, 0xdd],
        ip6,
    ]
    .concat();
    assert_eq!(out, want);
}

/// AP-3 IP-in-IP: protocol 4 for IPv4 inside, 41 for IPv6 inside.
#[test]
fn ap_3_ipip_exact_bytes() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let ip4 = inner_v4(DF);
    let (r, out) = run(
        &eth(&[], ETH_IPV4, &ip4),
        Encapsulation::Ipip(Ipip),
        &b,
        &port(1500),
    );
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        [l2_header(ETH_IPV4), outer_v4(4, true, ip4.len()), ip4].concat()
    );
    let ip6 = inner_v6();
    let (r, out) = run(
        &eth(&[], ETH_IPV6, &ip6),
        Encapsulation::Ipip(Ipip),
        &b,
        &port(1500),
    );
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        [l2_header(ETH_IPV4), outer_v4(41, true, ip6.len()), ip6].concat()
    );
}

/// GUE variant 0 (draft-ietf-intarea-gue §3.2), written out: version 0,
/// no control bit, no options, the inner packet's IP protocol, no flags.
fn gue_header(ethertype: u16) -> Vec<u8> {
    let proto = if ethertype == ETH_IPV6 { 41 } else { 4 };
    vec![0, proto, 0, 0]
}

/// GUE: outer IPv4 20 + UDP 8 + its header 4.
const GUE_TUNNEL: UdpTunnel = UdpTunnel {
    encap: Encapsulation::Gue(Gue { port: 6080 }),
    port: 6080,
    headers: gue_header,
    overhead_v4: 32,
};

/// AP-3 GUE: UDP to the service port from a flow-hash port in 49152–65535,
/// checksum 0, the variant-0 header naming the inner protocol.
#[test]
fn ap_3_gue_exact_bytes() {
    GUE_TUNNEL.exact_bytes_over_ipv4();
}

/// AP-3: GUE over IPv6 carries a valid UDP checksum (mandatory over IPv6,
/// RFC 8200 §8.1), checked against the pseudo-header independently.
#[test]
fn ap_3_gue_over_ipv6_udp_checksum() {
    GUE_TUNNEL.checksum_over_ipv6();
}

/// AP-3: GUE's overhead counts against the MTU.
#[test]
fn ap_3_gue_mtu_boundary() {
    GUE_TUNNEL.mtu_boundary();
}

#[test]
fn ap_3_gue_source_port_range_and_stability() {
    for h in [0, u64::MAX, HASH, 1 << 32, 0x3fff << 32] {
        let p = udp_src_port(h);
        assert!(p >= 49152, "{p}");
        assert_eq!(p, udp_src_port(h));
    }
    assert_ne!(udp_src_port(1 << 32), udp_src_port(2 << 32));
}

const GENEVE: Encapsulation = Encapsulation::Geneve(Geneve {
    port: 6081,
    vni: 0xab_cdef,
});

/// RFC 8926 §3.4, written out: Ver 0 and Opt Len 0, O, C and reserved bits
/// clear, the inner packet's ethertype, the 24-bit VNI, a reserved byte.
fn geneve_header(ethertype: u16) -> Vec<u8> {
    let [p0, p1] = ethertype.to_be_bytes();
    vec![0, 0, p0, p1, 0xab, 0xcd, 0xef, 0]
}

/// A UDP tunnel (GUE, GENEVE, VXLAN) as the tests expect it: its
/// encapsulation, the destination port, the tunnel headers written out
/// for an inner packet of an ethertype, and its overhead over IPv4.
struct UdpTunnel {
    encap: Encapsulation,
    port: u16,
    headers: fn(u16) -> Vec<u8>,
    overhead_v4: usize,
}

impl UdpTunnel {
    /// Over IPv4: UDP to the service port from a flow-hash port, checksum
    /// 0, the tunnel headers naming the inner family, the inner packet
    /// right after them; DF copied.
    fn exact_bytes_over_ipv4(&self) {
        let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
        for (inner, ethertype, df) in [
            (inner_v4(0), ETH_IPV4, false),
            (inner_v4(DF), ETH_IPV4, true),
            (inner_v6(), ETH_IPV6, true),
        ] {
            let (r, out) = run(
                &eth(&[VLAN], ethertype, &inner),
                self.encap,
                &b,
                &port(1500),
            );
            assert_eq!(r, Ok(()));
            let headers = (self.headers)(ethertype);
            let udp_len = (8 + headers.len() + inner.len()) as u16;
            let mut udp_hdr = udp_src_port(HASH).to_be_bytes().to_vec();
            udp_hdr.extend_from_slice(&self.port.to_be_bytes());
            udp_hdr.extend_from_slice(&udp_len.to_be_bytes());
            udp_hdr.extend_from_slice(&[0, 0]);
            let want = [
                l2_header(ETH_IPV4),
                outer_v4(UDP, df, usize::from(udp_len)),
                udp_hdr,
                headers,
                inner,
            ]
            .concat();
            assert_eq!(out, want);
        }
    }

    /// Over IPv6: a valid UDP checksum over the whole datagram (a zero one
    /// needs both ends configured for it, RFC 6935/6936), checked against
    /// the pseudo-header.
    fn checksum_over_ipv6(&self) {
        let b6 = backend(ip("fd00::5"), Some(NEXT_HOP_MAC));
        for (inner, ethertype) in [(inner_v4(0), ETH_IPV4), (inner_v6(), ETH_IPV6)] {
            let (r, out) = run(&eth(&[], ethertype, &inner), self.encap, &b6, &port(1500));
            assert_eq!(r, Ok(()));
            let udp_seg = &out[14 + 40..];
            assert_eq!(out[14..54], outer_v6(17, udp_seg.len())[..]);
            assert_eq!(&udp_seg[..2], &udp_src_port(HASH).to_be_bytes());
            assert_eq!(&udp_seg[2..4], &self.port.to_be_bytes());
            assert_eq!(&udp_seg[4..6], &(udp_seg.len() as u16).to_be_bytes());
            let mut pseudo = v6("fd00::1").octets().to_vec();
            pseudo.extend_from_slice(&v6("fd00::5").octets());
            pseudo.extend_from_slice(&(udp_seg.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 17]);
            pseudo.extend_from_slice(udp_seg);
            assert_ne!(&udp_seg[6..8], &[0, 0], "checksum present");
            assert_eq!(inet_checksum(&pseudo), 0, "checksum verifies");
            let headers = (self.headers)(ethertype);
            let inner_at = 8 + headers.len();
            assert_eq!(udp_seg[8..inner_at], headers[..]);
            assert_eq!(&udp_seg[inner_at..], &inner[..]);
        }
    }

    /// The overhead (outer IP + UDP + the tunnel headers) counts against
    /// the MTU: a packet that fits exactly goes, one byte more is dropped
    /// and named.
    fn mtu_boundary(&self) {
        let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
        let ip4 = inner_v4(DF);
        let frame = eth(&[], ETH_IPV4, &ip4);
        let outer_len = (self.overhead_v4 + ip4.len()) as u16;
        assert_eq!(run(&frame, self.encap, &b, &port(outer_len)).0, Ok(()));
        let (r, out) = run(&frame, self.encap, &b, &port(outer_len - 1));
        assert_eq!((r, out), (Err(DropReason::MtuExceeded), frame.clone()));
        let overhead = |at| sluice_core::encap::overhead(self.encap, ip(at));
        assert_eq!(overhead("10.1.0.5"), self.overhead_v4);
        assert_eq!(overhead("fd00::5"), self.overhead_v4 + 20);
    }
}

/// GENEVE: outer IPv4 20 + UDP 8 + its base header 8.
const GENEVE_TUNNEL: UdpTunnel = UdpTunnel {
    encap: GENEVE,
    port: 6081,
    headers: geneve_header,
    overhead_v4: 36,
};

/// AP-3 GENEVE over IPv4 (RFC 8926 §3.3: UDP checksum 0).
#[test]
fn ap_3_geneve_exact_bytes() {
    GENEVE_TUNNEL.exact_bytes_over_ipv4();
}

/// AP-3 GENEVE over IPv6: a valid UDP checksum.
#[test]
fn ap_3_geneve_over_ipv6_udp_checksum() {
    GENEVE_TUNNEL.checksum_over_ipv6();
}

/// AP-3: GENEVE's overhead counts against the MTU.
#[test]
fn ap_3_geneve_mtu_boundary() {
    GENEVE_TUNNEL.mtu_boundary();
}

const DEVICE_MAC: [u8; 6] = [0x02, 0x5c, 0, 0, 0, 0x2a];

const VXLAN: Encapsulation = Encapsulation::Vxlan(Vxlan {
    port: 4789,
    vni: 0x00_1234,
    mac: DEVICE_MAC,
});

/// RFC 7348 §5, written out: flags with only I set, 24 reserved bits, the
/// 24-bit VNI, a reserved byte; then the inner Ethernet header to the
/// backends' device MAC from the port's, typed as the inner packet.
fn vxlan_headers(ethertype: u16) -> Vec<u8> {
    let mut h = vec![0x08, 0, 0, 0, 0x00, 0x12, 0x34, 0];
    h.extend_from_slice(&DEVICE_MAC);
    h.extend_from_slice(&PORT_MAC);
    h.extend_from_slice(&ethertype.to_be_bytes());
    h
}

/// VXLAN: outer IPv4 20 + UDP 8 + its header 8 + the inner Ethernet
/// header 14.
const VXLAN_TUNNEL: UdpTunnel = UdpTunnel {
    encap: VXLAN,
    port: 4789,
    headers: vxlan_headers,
    overhead_v4: 50,
};

/// AP-3 VXLAN over IPv4 (RFC 7348 §5: UDP checksum 0), the inner frame's
/// Ethernet header before the inner packet.
#[test]
fn ap_3_vxlan_exact_bytes() {
    VXLAN_TUNNEL.exact_bytes_over_ipv4();
}

/// AP-3 VXLAN over IPv6: a valid UDP checksum over the whole datagram,
/// inner frame included.
#[test]
fn ap_3_vxlan_over_ipv6_udp_checksum() {
    VXLAN_TUNNEL.checksum_over_ipv6();
}

/// AP-3: VXLAN's overhead counts against the MTU.
#[test]
fn ap_3_vxlan_mtu_boundary() {
    VXLAN_TUNNEL.mtu_boundary();
}

#[test]
fn unresolved_next_hop_is_named() {
    let b = backend(ip("10.1.0.5"), None);
    let frame = eth(&[], ETH_IPV4, &inner_v4(DF));
    for e in [Encapsulation::L2, Encapsulation::Gre(Gre)] {
        let (r, out) = run(&frame, e, &b, &port(1500));
        assert_eq!(
            (r, out),
            (Err(DropReason::NextHopUnresolved), frame.clone())
        );
    }
}

/// FR-5: a port without an address of the backend's family cannot source
/// the outer header.
#[test]
fn fr_5_unsupported_families_are_named() {
    let frame = eth(&[], ETH_IPV4, &inner_v4(DF));
    let b6 = backend(ip("fd00::5"), Some(NEXT_HOP_MAC));
    let no_v6 = PortState {
        ipv6: None,
        ..port(1500)
    };
    for e in [
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
        Encapsulation::Gue(Gue { port: 1 }),
        Encapsulation::Geneve(Geneve { port: 1, vni: 1 }),
        VXLAN,
    ] {
        assert_eq!(
            run(&frame, e, &b6, &no_v6).0,
            Err(DropReason::EncapUnsupported)
        );
    }
    let b4 = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let no_v4 = PortState {
        ipv4: None,
        ..port(1500)
    };
    assert_eq!(
        run(&frame, Encapsulation::Gre(Gre), &b4, &no_v4).0,
        Err(DropReason::EncapUnsupported)
    );
    // L2 DSR carries any family.
    assert_eq!(run(&frame, Encapsulation::L2, &b6, &no_v6).0, Ok(()));
}

/// The expected outer IPv6 header fd00::1 → fd00::5, flow label from HASH.
fn outer_v6(next: u8, payload_len: usize) -> Vec<u8> {
    let fl = sluice_core::encap::flow_label(HASH).to_be_bytes();
    let mut h = vec![0x60, fl[1], fl[2], fl[3]];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&v6("fd00::1").octets());
    h.extend_from_slice(&v6("fd00::5").octets());
    h
}

/// AP-3, FR-5: GRE and IP-in-IP in an outer IPv6 header for an IPv6
/// backend, with IPv4 and IPv6 inner packets (mixed families included):
/// exact bytes, inner packet untouched.
#[test]
fn ap_3_outer_ipv6_gre_and_ipip_exact_bytes() {
    let b6 = backend(ip("fd00::5"), Some(NEXT_HOP_MAC));
    for (inner, ethertype, ipip_next) in [(inner_v4(DF), ETH_IPV4, 4u8), (inner_v6(), ETH_IPV6, 41)]
    {
        let frame = eth(&[VLAN], ethertype, &inner);
        let (r, out) = run(&frame, Encapsulation::Gre(Gre), &b6, &port(1500));
        assert_eq!(r, Ok(()));
        let mut gre_hdr = vec![0, 0];
        gre_hdr.extend_from_slice(&ethertype.to_be_bytes());
        let want = [
            l2_header(ETH_IPV6),
            outer_v6(47, 4 + inner.len()),
            gre_hdr,
            inner.clone(),
        ]
        .concat();
        assert_eq!(out, want);
        let (r, out) = run(&frame, Encapsulation::Ipip(Ipip), &b6, &port(1500));
        assert_eq!(r, Ok(()));
        let want = [
            l2_header(ETH_IPV6),
            outer_v6(ipip_next, inner.len()),
            inner.clone(),
        ]
        .concat();
        assert_eq!(out, want);
    }
    // IPv6 in IPv4 (IPIP, protocol 41).
    let b4 = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let ip6 = inner_v6();
    let (r, out) = run(
        &eth(&[], ETH_IPV6, &ip6),
        Encapsulation::Ipip(Ipip),
        &b4,
        &port(1500),
    );
    assert_eq!(r, Ok(()));
    assert_eq!(
        out,
        [l2_header(ETH_IPV4), outer_v4(41, true, ip6.len()), ip6].concat()
    );
}

/// AP-3: the outer IP packet may be exactly the MTU, not one byte more.
#[test]
fn ap_3_mtu_boundary() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let ip4 = inner_v4(DF);
    let frame = eth(&[], ETH_IPV4, &ip4);
    let gre_len = (20 + 4 + ip4.len()) as u16;
    assert_eq!(
        run(&frame, Encapsulation::Gre(Gre), &b, &port(gre_len)).0,
        Ok(())
    );
    let (r, out) = run(&frame, Encapsulation::Gre(Gre), &b, &port(gre_len - 1));
    assert_eq!((r, out), (Err(DropReason::MtuExceeded), frame.clone()));
    let l2_len = ip4.len() as u16;
    assert_eq!(run(&frame, Encapsulation::L2, &b, &port(l2_len)).0, Ok(()));
    assert_eq!(
        run(&frame, Encapsulation::L2, &b, &port(l2_len - 1)).0,
        Err(DropReason::MtuExceeded)
    );
}

#[test]
fn no_headroom_leaves_the_packet_alone() {
    let b = backend(ip("10.1.0.5"), Some(NEXT_HOP_MAC));
    let frame = eth(&[], ETH_IPV4, &inner_v4(DF));
    let i = info(&frame);
    let mut pkt = VecPacket::with_headroom(&frame, 23);
    let r = encapsulate(&mut pkt, &i, Encapsulation::Gre(Gre), &b, &port(1500), HASH);
    assert_eq!((r, pkt.data()), (Err(DropReason::NoHeadroom), &frame[..]));
    // With Ethernet padding too: the failed prepend must not have cut it
    // (regression found by the pipeline fuzz target).
    let mut padded = frame.clone();
    padded.extend_from_slice(&[0; 6]);
    let mut pkt = VecPacket::with_headroom(&padded, 23);
    let r = encapsulate(&mut pkt, &i, Encapsulation::Gre(Gre), &b, &port(1500), HASH);
    assert_eq!((r, pkt.data()), (Err(DropReason::NoHeadroom), &padded[..]));
    // 24 bytes of headroom are exactly enough for IPv4 + GRE.
    let mut pkt = VecPacket::with_headroom(&frame, 24);
    assert_eq!(
        encapsulate(&mut pkt, &i, Encapsulation::Gre(Gre), &b, &port(1500), HASH),
        Ok(())
    );
    // L2 DSR never grows the frame.
    let mut pkt = VecPacket::with_headroom(&frame, 0);
    assert_eq!(
        encapsulate(&mut pkt, &i, Encapsulation::L2, &b, &port(1500), HASH),
        Ok(())
    );
}
