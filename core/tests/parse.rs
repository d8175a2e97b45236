//! The one-pass frame parser: layer-by-layer errors and the summary the
//! pipeline uses (ports, fragments per HA-2, FR-4).

mod common;

use common::*;
use sluice_core::wire::{parse, Fragment, ParseError, Parsed, Ports};
use sluice_core::DropReason;

fn ip_info(frame: &[u8]) -> sluice_core::wire::IpInfo {
    match parse(frame) {
        Ok(Parsed::Ip(i)) => i,
        other => panic!("expected IP, got {other:?}"),
    }
}

#[test]
fn tcp_over_ipv4_with_qinq() {
    let seg = tcp(40000, 443, SYN, b"hi");
    let f = eth(
        &[QINQ, VLAN],
        ETH_IPV4,
        &ipv4(v4("198.51.100.7"), v4("203.0.113.10"), TCP, DF, &seg),
    );
    let i = ip_info(&f);
    assert_eq!(
        (i.l3_offset, i.l4_offset, i.ip_len),
        (22, 42, 20 + seg.len())
    );
    assert_eq!(
        (i.src, i.dst, i.protocol),
        (ip("198.51.100.7"), ip("203.0.113.10"), TCP)
    );
    assert_eq!(
        i.ports,
        Some(Ports {
            src: 40000,
            dst: 443
        })
    );
    assert_eq!(
        (i.tcp_flags, i.fragment, i.dont_fragment),
        (SYN, Fragment::No, true)
    );
}

#[test]
fn udp_over_ipv6_behind_extension_headers() {
    let mut payload = opts6(60);
    payload.extend(opts6(UDP));
    payload.extend(udp(5353, 53, b"q"));
    let f = eth(
        &[VLAN],
        ETH_IPV6,
        &ipv6(v6("2001:db8::1"), v6("2001:db8::10"), 0, &payload),
    );
    let i = ip_info(&f);
    assert_eq!((i.l3_offset, i.l4_offset), (18, 18 + 40 + 16));
    assert_eq!((i.protocol, i.fragment), (UDP, Fragment::No));
    assert_eq!(i.ports, Some(Ports { src: 5353, dst: 53 }));
}

/// HA-2, FR-4: the first fragment keeps its ports and counts as
/// fragmented; later fragments have none.
#[test]
fn ha_2_fr_4_fragment_status_v4_and_v6() {
    let src = v4("198.51.100.7");
    let dst = v4("203.0.113.10");
    let first = eth(
        &[],
        ETH_IPV4,
        &ipv4(src, dst, UDP, MF, &udp(1, 2, &[0; 16])),
    );
    let i = ip_info(&first);
    assert_eq!(
        (i.fragment, i.ports),
        (Fragment::First, Some(Ports { src: 1, dst: 2 }))
    );
    let later = eth(&[], ETH_IPV4, &ipv4(src, dst, UDP, 3, &[0xff; 3]));
    let i = ip_info(&later);
    assert_eq!(
        (i.fragment, i.ports, i.dont_fragment),
        (Fragment::Later, None, false)
    );

    let (s6, d6) = (v6("2001:db8::1"), v6("2001:db8::10"));
    let mut p = frag6(TCP, 0, true, 7);
    p.extend(tcp(1000, 80, 0, &[]));
    let i = ip_info(&eth(&[], ETH_IPV6, &ipv6(s6, d6, 44, &p)));
    assert_eq!(
        (i.fragment, i.ports.map(|p| p.dst)),
        (Fragment::First, Some(80))
    );
    let mut p = frag6(TCP, 100, false, 7);
    p.extend([0u8; 4]); // not a TCP header: the middle of the datagram
    let i = ip_info(&eth(&[], ETH_IPV6, &ipv6(s6, d6, 44, &p)));
    assert_eq!(
        (i.fragment, i.ports, i.protocol),
        (Fragment::Later, None, TCP)
    );
    // Atomic fragment (offset 0, M clear) is still a fragment (HA-2).
    let mut p = frag6(UDP, 0, false, 7);
    p.extend(udp(1, 2, &[]));
    assert_eq!(
        ip_info(&eth(&[], ETH_IPV6, &ipv6(s6, d6, 44, &p))).fragment,
        Fragment::First
    );
}

#[test]
fn arp_and_unknown_ethertypes() {
    assert_eq!(parse(&eth(&[], ETH_ARP, &[0; 28])), Ok(Parsed::Arp));
    assert_eq!(parse(&eth(&[VLAN], ETH_ARP, &[0; 28])), Ok(Parsed::Arp));
    assert_eq!(
        parse(&eth(&[], 0x88cc, &[0; 28])),
        Err(ParseError::UnknownEthertype)
    );
    // A third VLAN tag is not unwrapped.
    let f = eth(&[QINQ, VLAN, VLAN], ETH_IPV4, &[0; 40]);
    assert_eq!(parse(&f), Err(ParseError::UnknownEthertype));
}

/// Cutting a valid frame anywhere yields the error of the layer cut into,
/// never a panic or a success.
#[test]
fn truncation_at_every_boundary_names_the_layer() {
    let seg = tcp(1, 2, 0, &[]);
    let f = eth(
        &[VLAN],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4("10.0.0.2"), TCP, 0, &seg),
    );
    for cut in 0..f.len() {
        let want = match cut {
            0..18 => ParseError::TruncatedEthernet,
            _ => ParseError::BadIpv4Header,
        };
        assert_eq!(parse(&f[..cut]), Err(want), "v4 cut {cut}");
    }
    let mut p = opts6(TCP);
    p.extend(tcp(1, 2, 0, &[]));
    let f = eth(&[], ETH_IPV6, &ipv6(v6("::1"), v6("::2"), 60, &p));
    for cut in 0..f.len() {
        let want = match cut {
            0..14 => ParseError::TruncatedEthernet,
            _ => ParseError::BadIpv6Header, // payload length beyond the frame
        };
        assert_eq!(parse(&f[..cut]), Err(want), "v6 cut {cut}");
    }
}

/// With consistent IP lengths, a short L4 header or extension chain is
/// blamed on that layer.
#[test]
fn short_upper_layers_are_named() {
    let f = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4("10.0.0.2"), TCP, 0, &[0; 19]),
    );
    assert_eq!(parse(&f), Err(ParseError::BadL4Header));
    let mut bad_doff = tcp(1, 2, 0, &[]);
    bad_doff[12] = 0x40;
    let f = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4("10.0.0.2"), TCP, 0, &bad_doff),
    );
    assert_eq!(parse(&f), Err(ParseError::BadL4Header));
    let f = eth(&[], ETH_IPV6, &ipv6(v6("::1"), v6("::2"), UDP, &[0; 7]));
    assert_eq!(parse(&f), Err(ParseError::BadL4Header));
    let f = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("::1"), v6("::2"), 60, &[TCP, 1, 0, 0]),
    );
    assert_eq!(parse(&f), Err(ParseError::BadIpv6ExtensionHeader));
    let mut chain = Vec::new();
    for _ in 0..9 {
        chain.extend(opts6(60));
    }
    let f = eth(&[], ETH_IPV6, &ipv6(v6("::1"), v6("::2"), 60, &chain));
    assert_eq!(parse(&f), Err(ParseError::BadIpv6ExtensionHeader));
    // Non-first fragments are not parsed past the IP header, so any bytes do.
    let f = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4("10.0.0.2"), TCP, 1, &[0; 1]),
    );
    assert!(parse(&f).is_ok());
}

#[test]
fn bad_ip_headers() {
    let mut p = ipv4(v4("10.0.0.1"), v4("10.0.0.2"), UDP, 0, &udp(1, 2, &[]));
    p[0] = 0x44; // IHL 4
    assert_eq!(
        parse(&eth(&[], ETH_IPV4, &p)),
        Err(ParseError::BadIpv4Header)
    );
    let mut p = ipv4(v4("10.0.0.1"), v4("10.0.0.2"), UDP, 0, &udp(1, 2, &[]));
    p[3] += 1; // total length one beyond the frame
    assert_eq!(
        parse(&eth(&[], ETH_IPV4, &p)),
        Err(ParseError::BadIpv4Header)
    );
    let mut p = ipv6(v6("::1"), v6("::2"), UDP, &udp(1, 2, &[]));
    p[0] = 0x40;
    assert_eq!(
        parse(&eth(&[], ETH_IPV6, &p)),
        Err(ParseError::BadIpv6Header)
    );
}

#[test]
fn errors_map_to_drop_reasons() {
    let pairs = [
        (ParseError::TruncatedEthernet, DropReason::TruncatedEthernet),
        (ParseError::UnknownEthertype, DropReason::UnknownEthertype),
        (ParseError::BadIpv4Header, DropReason::BadIpv4Header),
        (ParseError::BadIpv6Header, DropReason::BadIpv6Header),
        (
            ParseError::BadIpv6ExtensionHeader,
            DropReason::BadIpv6ExtensionHeader,
        ),
        (ParseError::BadL4Header, DropReason::BadL4Header),
    ];
    for (e, r) in pairs {
        assert_eq!(DropReason::from(e), r);
    }
}

#[test]
fn ethernet_padding_is_excluded_from_ip_len() {
    let mut f = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4("10.0.0.2"), UDP, 0, &udp(1, 2, &[])),
    );
    f.extend_from_slice(&[0; 18]);
    assert_eq!(ip_info(&f).ip_len, 28);
}
