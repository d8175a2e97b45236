//! AP-3 delivery through prebuilt outer headers (`outer_header`) against
//! the general encapsulator (`encap::encapsulate`): whenever a prebuilt
//! header applies, the frame it writes is byte for byte the one the
//! general path writes — layer-2 DSR and every tunnel (GRE, IP-in-IP, and
//! the UDP tunnels GUE and GENEVE with their per-flow source port), with
//! and without VLAN tags on the client side, DF set or clear, Ethernet
//! padding, sizes up to and past the egress MTU, out of untagged and trunk
//! ports (802.1Q tag on the egress side). Where it does not apply (inner
//! IPv6, an IPv6 or missing outer address, unresolved next hop, oversize,
//! too little headroom) the packet must be untouched.

mod common;

use std::net::IpAddr;

use common::*;
use proptest::prelude::*;
use sluice_core::backend::BackendState;
use sluice_core::encap::{encapsulate, Encapsulation, Geneve, Gre, Gue, Ipip, Vxlan};
use sluice_core::outer_header::OuterHeader;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::port::PortState;
use sluice_core::wire::{parse, L3Layout, Parsed};

const HASH: u64 = 0x0123_4567_89ab_cdef;

fn backend(address: IpAddr, next_hop: Option<[u8; 6]>) -> BackendState {
    common::state::backend_state(3, 0, address, 1, next_hop)
}

fn port(mtu: u16, with_v4: bool) -> PortState {
    PortState {
        name: "p1".into(),
        mac: PORT_MAC,
        ipv4: with_v4.then(|| v4("10.0.0.1")),
        ipv6: Some(v6("fd00::1")),
        mtu,
        vlan: None,
    }
}

/// VLAN of the trunk port cases.
const EGRESS_VLAN: u16 = 100;

fn trunk(mtu: u16, with_v4: bool) -> PortState {
    PortState {
        vlan: Some(EGRESS_VLAN),
        ..port(mtu, with_v4)
    }
}

fn layout(frame: &[u8]) -> L3Layout {
    match parse(frame) {
        Ok(Parsed::Ip(i)) => L3Layout::from(&i),
        other => panic!("{other:?}"),
    }
}

fn frame(vlan: bool, v6_inner: bool, df: bool, payload: usize, pad: usize) -> Vec<u8> {
    let l4 = udp(40000, 53, &vec![0xab; payload]);
    let (ethertype, mut ip) = if v6_inner {
        (
            ETH_IPV6,
            ipv6(v6("2001:db8::1"), v6("2001:db8::10"), UDP, &l4),
        )
    } else {
        let flags = if df { DF } else { 0 };
        (
            ETH_IPV4,
            ipv4(v4("198.51.100.7"), v4("203.0.113.10"), UDP, flags, &l4),
        )
    };
    ip.extend(std::iter::repeat_n(0, pad));
    let tags: &[u16] = if vlan { &[VLAN] } else { &[] };
    eth(tags, ethertype, &ip)
}

/// Both paths on copies of `f`: (prebuilt applied, its bytes, general
/// result, its bytes).
fn both(
    f: &[u8],
    headroom: usize,
    encap: Encapsulation,
    b: &BackendState,
    p: &PortState,
    flow_hash: u64,
) -> (Option<bool>, Vec<u8>, bool, Vec<u8>) {
    let l = layout(f);
    let mut general = VecPacket::with_headroom(f, headroom);
    let ok = encapsulate(&mut general, l, encap, b, p, flow_hash).is_ok();
    let mut fast = VecPacket::with_headroom(f, headroom);
    let applied = OuterHeader::build(encap, b, p).map(|h| h.apply(&mut fast, &l, flow_hash));
    (applied, fast.data().to_vec(), ok, general.data().to_vec())
}

/// Every encapsulation: layer 2 and each tunnel.
fn all() -> [Encapsulation; 5] {
    [
        Encapsulation::L2,
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
        Encapsulation::Gue(Gue { port: 6080 }),
        Encapsulation::Geneve(Geneve {
            port: 6081,
            vni: 0xab_cdef,
        }),
    ]
}

/// VXLAN's 30 bytes of tunnel headers are not prebuilt (a second cache
/// line per backend): its packets take the general path.
#[test]
fn ap_3_vxlan_takes_the_general_path() {
    let b4 = backend(ip("10.9.0.5"), Some(NEXT_HOP_MAC));
    let vxlan = Encapsulation::Vxlan(Vxlan {
        port: 4789,
        vni: 7,
        mac: [0x02, 0, 0, 0, 0, 7],
    });
    let f = frame(false, false, true, 100, 6);
    let (applied, _, ok, _) = both(&f, 64, vxlan, &b4, &port(1500, true), HASH);
    assert_eq!((applied, ok), (None, true));
}

/// The common cases take the prebuilt header, so the property below is
/// not vacuous, and give the general path's bytes.
#[test]
fn ap_3_prebuilt_headers_apply_to_inner_ipv4_within_the_mtu() {
    let b4 = backend(ip("10.9.0.5"), Some(NEXT_HOP_MAC));
    for encap in all() {
        for (vlan, df) in [(false, true), (true, false)] {
            let f = frame(vlan, false, df, 100, 6);
            let (applied, fast, ok, general) = both(&f, 64, encap, &b4, &port(1500, true), HASH);
            assert_eq!(applied, Some(true), "{encap:?} vlan={vlan}");
            assert!(ok);
            assert_eq!(fast, general, "{encap:?} vlan={vlan} df={df}");
        }
    }
    // Out of a trunk port: the tag after the MACs, then what an untagged
    // port sends (the IP packet 4 bytes further on).
    for encap in all() {
        for vlan in [false, true] {
            let f = frame(vlan, false, true, 100, 0);
            let (applied, fast, ok, general) = both(&f, 64, encap, &b4, &trunk(1500, true), HASH);
            assert_eq!(applied, Some(true), "{encap:?} vlan={vlan}");
            assert!(ok);
            assert_eq!(fast, general, "{encap:?} vlan={vlan}");
            let (_, untagged, _, _) = both(&f, 64, encap, &b4, &port(1500, true), HASH);
            assert_eq!(&fast[12..16], &[0x81, 0x00, 0x00, EGRESS_VLAN as u8]);
            assert_eq!(fast[..12], untagged[..12]);
            assert_eq!(fast[16..], untagged[12..], "{encap:?}");
        }
    }
    // No header is built where the general path must decide.
    let b6 = backend(ip("fd00::9"), Some(NEXT_HOP_MAC));
    let unresolved = backend(ip("10.9.0.5"), None);
    assert!(OuterHeader::build(Encapsulation::Gre(Gre), &b6, &port(1500, true)).is_none());
    assert!(OuterHeader::build(Encapsulation::Gre(Gre), &b4, &port(1500, false)).is_none());
    assert!(OuterHeader::build(Encapsulation::L2, &unresolved, &port(1500, true)).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn ap_3_prebuilt_header_writes_what_the_general_path_writes(
        encap in 0usize..5,
        flow_hash in any::<u64>(),
        v6_backend in any::<bool>(),
        port_v4 in any::<bool>(),
        resolved in any::<bool>(),
        vlan in any::<bool>(),
        egress_vlan in any::<bool>(),
        v6_inner in any::<bool>(),
        df in any::<bool>(),
        payload in 0usize..1600,
        pad in 0usize..8,
        mtu in prop::sample::select(vec![68u16, 576, 1280, 1400, 1500, 9000]),
        headroom in prop::sample::select(vec![0usize, 8, 20, 24, 64, 128]),
    ) {
        let encap = all()[encap];
        let address = if v6_backend { ip("fd00::9") } else { ip("10.9.0.5") };
        let b = backend(address, resolved.then_some(NEXT_HOP_MAC));
        let f = frame(vlan, v6_inner, df, payload, pad);
        let p = if egress_vlan { trunk(mtu, port_v4) } else { port(mtu, port_v4) };
        let (applied, fast, ok, general) = both(&f, headroom, encap, &b, &p, flow_hash);
        match applied {
            Some(true) => {
                prop_assert!(ok, "general path refused what the prebuilt header took");
                prop_assert_eq!(fast, general);
            }
            // Not applicable: untouched, for the general path to decide.
            Some(false) | None => prop_assert_eq!(fast, f),
        }
    }
}
