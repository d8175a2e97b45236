//! Golden pcaps through the real `sluice` binary, per encapsulation (`l2`,
//! `gre`, `ipip`, `gue`, `geneve`, `vxlan`): one mixed input of every protocol to an IPv4 and
//! an IPv6 VIP (and to VIPs whose backends are of the other family), fragment
//! trains out of order, ICMP errors quoting a flow, oversize packets, a
//! double-tagged frame and one packet per drop reason. The output is compared
//! byte for byte with `golden/proto-<encap>/expected.pcap` (`SLUICE_BLESS=1`
//! rewrites it) and independently checked by an `etherparse` oracle.
//!
//! Covers FR-1 (L3_DEFAULT: TCP, UDP, GRE, ESP, ICMP, ICMPv6), FR-3, FR-4
//! and HA-2 (fragment trains land on one backend per datagram), HA-1 (one
//! backend per flow; ESP's SPI not hashed), HA-4 (ICMP frag-needed /
//! packet-too-big quoting a flow → that flow's backend), FR-5 and AP-3
//! (every encapsulation, outer IPv4 and IPv6, mixed families, outer
//! checksums, GUE-, GENEVE- and VXLAN-over-IPv6 UDP checksums, GENEVE's
//! header and configured VNI (RFC 8926), VXLAN's header, VNI and inner
//! Ethernet header (RFC 7348); oversize + DF → ICMP reply with
//! the MTU left after the tunnel; oversize without DF → IP fragments ≤ MTU:
//! the client's packet under `l2`, the outer IPv4 packet, or the outer IPv6
//! packet with a Fragment header, reassembling to exactly what the backend
//! would have received unfragmented), and RX = TX + Σ drops − (fragments
//! created − packets fragmented) exactly.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use common::*;
use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, SlicedPacket, TransportSlice};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const PORT4: [u8; 4] = [192, 0, 2, 1];
const PORT6: &str = "2001:db8:b::1";
const MTU: u16 = 1400;
const VIP4: [u8; 4] = [203, 0, 113, 10];
const VIP6: &str = "2001:db8:10::10";
/// IPv4 VIP served by the IPv6 backends (IPv4-in-IPv6).
const VIP4_TO_V6: [u8; 4] = [203, 0, 113, 20];
/// IPv6 VIP served by the IPv4 backends (IPv6-in-IPv4).
const VIP6_TO_V4: &str = "2001:db8:10::20";
const VIP_TCP443: [u8; 4] = [203, 0, 113, 30];
const BACKENDS4: [(&str, u8); 3] = [
    ("192.0.2.10", 0x10),
    ("192.0.2.11", 0x11),
    ("192.0.2.12", 0x12),
];
const BACKENDS6: [(&str, u8); 3] = [
    ("2001:db8:b::10", 0x20),
    ("2001:db8:b::11", 0x21),
    ("2001:db8:b::12", 0x22),
];

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn backend_list(list: &[(&str, u8)]) -> String {
    list.iter()
        .map(|(a, m)| format!("{{ address = \"{a}\", mac = \"02:00:00:00:00:{m:02x}\" }}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn config(encap: &str, dir: &Path) -> String {
    let rule = |name: &str, vip: String, proto: &str, ports: &str, svc: &str| {
        format!(
            "[[forwarding_rule]]\nname = \"{name}\"\nvip = \"{vip}\"\nprotocol = \"{proto}\"\nports = \"{ports}\"\nbackend_service = \"{svc}\"\n"
        )
    };
    let v4 = |a: [u8; 4]| Ipv4Addr::from(a).to_string();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"
address6 = "{PORT6}/64"
mtu = {MTU}

[[backend_service]]
name = "v4"
encapsulation = "{encap}"
{v4_keys}
backend = [ {b4} ]

[[backend_service]]
name = "v6"
encapsulation = "{encap}"
{v6_keys}
backend = [ {b6} ]

{r1}
{r2}
{r3}
{r4}
{r5}
"#,
        dir = dir.display(),
        port_mac = mac_str(&PORT_MAC),
        // The IPv4 backends' service sets a VNI; the IPv6 one keeps 0.
        v4_keys = match encap {
            "geneve" => format!("geneve_vni = {GENEVE_VNI4}"),
            "vxlan" => format!(
                "vxlan_vni = {VXLAN_VNI4}\nvxlan_mac = \"{}\"",
                mac_str(&VXLAN_MAC4)
            ),
            _ => String::new(),
        },
        // VXLAN's MAC has no default; the VNI keeps 0.
        v6_keys = if encap == "vxlan" {
            format!("vxlan_mac = \"{}\"", mac_str(&VXLAN_MAC6))
        } else {
            String::new()
        },
        b4 = backend_list(&BACKENDS4),
        b6 = backend_list(&BACKENDS6),
        r1 = rule("vip4", v4(VIP4), "L3_DEFAULT", "ALL", "v4"),
        r2 = rule("vip6", VIP6.into(), "L3_DEFAULT", "ALL", "v6"),
        r3 = rule("vip4-to-v6", v4(VIP4_TO_V6), "L3_DEFAULT", "ALL", "v6"),
        r4 = rule("vip6-to-v4", VIP6_TO_V4.into(), "L3_DEFAULT", "ALL", "v4"),
        r5 = rule("tls", v4(VIP_TCP443), "TCP", "443", "v4"),
    )
}

#[path = "golden_protocols/frames.rs"]
mod frames;
use frames::*;

/// What the appliance must do with an input frame.
#[derive(Clone, Debug, PartialEq)]
enum Want {
    /// Delivered to a backend of `family` (4/6); packets with the same
    /// `group` land on the same backend.
    Forward {
        group: String,
        family: u8,
    },
    /// Answered with ICMP carrying MTU − overhead (overhead of `family`).
    Reply {
        family: u8,
    },
    /// AP-3: too big and DF clear: delivered like `Forward`, as IP
    /// fragments (consecutive frames in the output).
    Fragments {
        group: String,
        family: u8,
    },
    Drop(&'static str),
}

fn fwd(group: impl Into<String>, family: u8) -> Want {
    Want::Forward {
        group: group.into(),
        family,
    }
}

fn client4(i: u32) -> [u8; 4] {
    [10, 1, (i >> 8) as u8, i as u8 + 1]
}

fn client6(i: u32) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, i as u16 + 1)
}

fn input() -> Vec<(Vec<u8>, Want)> {
    let vip6 = v6(VIP6);
    let mut v = Vec::new();
    // FR-1 / HA-1: TCP and UDP flows, two packets each, to both VIPs.
    for round in 0..2 {
        for i in 0..12u32 {
            let f = eth(
                &[],
                0x0800,
                &ip4(
                    client4(i),
                    VIP4,
                    6,
                    1,
                    DF,
                    &tcp(20000 + i as u16, 80, round),
                ),
            );
            v.push((f, fwd(format!("tcp4-{i}"), 4)));
            let f = eth(
                &[],
                0x86dd,
                &ip6(client6(i), vip6, 6, &tcp(20000 + i as u16, 443, round)),
            );
            v.push((f, fwd(format!("tcp6-{i}"), 6)));
        }
        for i in 0..6u32 {
            let f = eth(
                &[],
                0x0800,
                &ip4(client4(100 + i), VIP4, 17, 2, 0, &udp(5000, 53, 30 + round)),
            );
            v.push((f, fwd(format!("udp4-{i}"), 4)));
            let f = eth(
                &[],
                0x86dd,
                &ip6(client6(100 + i), vip6, 17, &udp(5000, 53, 30 + round)),
            );
            v.push((f, fwd(format!("udp6-{i}"), 6)));
        }
    }
    // GRE, ESP (two SPIs: same backend), ICMP echo: 3-tuple.
    for i in 0..4u32 {
        let gre = [0u8, 0, 0x08, 0x00, 0x45, 0, 0, 20];
        v.push((
            eth(&[], 0x0800, &ip4(client4(200 + i), VIP4, 47, 3, 0, &gre)),
            fwd(format!("gre4-{i}"), 4),
        ));
        v.push((
            eth(&[], 0x86dd, &ip6(client6(200 + i), vip6, 47, &gre)),
            fwd(format!("gre6-{i}"), 6),
        ));
        for spi in [0x1000u32, 0x2000] {
            let mut esp = spi.to_be_bytes().to_vec();
            esp.extend_from_slice(&[0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
            v.push((
                eth(&[], 0x0800, &ip4(client4(300 + i), VIP4, 50, 4, 0, &esp)),
                fwd(format!("esp4-{i}"), 4),
            ));
            v.push((
                eth(&[], 0x86dd, &ip6(client6(300 + i), vip6, 50, &esp)),
                fwd(format!("esp6-{i}"), 6),
            ));
        }
        let mut echo = vec![8u8, 0, 0, 0, 0, 1, 0, i as u8];
        let c = csum(&echo);
        echo[2..4].copy_from_slice(&c.to_be_bytes());
        v.push((
            eth(&[], 0x0800, &ip4(client4(400 + i), VIP4, 1, 5, 0, &echo)),
            fwd(format!("echo4-{i}"), 4),
        ));
        let echo6 = [128u8, 0, 0, 0, 0, 1, 0, i as u8];
        v.push((
            eth(&[], 0x86dd, &ip6(client6(400 + i), vip6, 58, &echo6)),
            fwd(format!("echo6-{i}"), 6),
        ));
    }
    // FR-5: mixed families.
    for i in 0..4u32 {
        let f = eth(
            &[],
            0x0800,
            &ip4(client4(500 + i), VIP4_TO_V6, 6, 6, DF, &tcp(30000, 80, 0)),
        );
        v.push((f, fwd(format!("mixed46-{i}"), 6)));
        let f = eth(
            &[],
            0x86dd,
            &ip6(client6(500 + i), v6(VIP6_TO_V4), 17, &udp(30000, 53, 8)),
        );
        v.push((f, fwd(format!("mixed64-{i}"), 4)));
    }
    // HA-2, FR-4: IPv4 UDP fragment trains, out of order (middle, last, first).
    for d in 0..3u32 {
        let whole = udp(7000 + d as u16, 53, 56); // 64 bytes: 3 × 24, the last 16
        let id = 0x100 + d as u16;
        let frag = |off: usize, len: usize, more: bool| {
            let ff = (off / 8) as u16 | if more { MF } else { 0 };
            eth(
                &[],
                0x0800,
                &ip4(client4(600 + d), VIP4, 17, id, ff, &whole[off..off + len]),
            )
        };
        for f in [frag(24, 24, true), frag(48, 16, false), frag(0, 24, true)] {
            v.push((f, fwd(format!("frag4-{d}"), 4)));
        }
    }
    // IPv6 fragment trains (Fragment header), last first.
    for d in 0..2u32 {
        let whole = udp(7100, 53, 40); // 48 bytes: 24 + 24
        let fh = |off: u16, more: bool| {
            let mut h = vec![17u8, 0];
            h.extend_from_slice(&((off / 8) << 3 | u16::from(more)).to_be_bytes());
            h.extend_from_slice(&(0x77 + d).to_be_bytes());
            h
        };
        let last = [fh(24, false), whole[24..].to_vec()].concat();
        let first = [fh(0, true), whole[..24].to_vec()].concat();
        for p in [last, first] {
            v.push((
                eth(&[], 0x86dd, &ip6(client6(600 + d), vip6, 44, &p)),
                fwd(format!("frag6-{d}"), 6),
            ));
        }
    }
    // HA-4: frag-needed quoting the backend's reply of tcp4-3, and
    // packet-too-big quoting tcp6-5's reply, from routers on the way.
    let reply4 = ip4(VIP4, client4(3), 6, 9, DF, &tcp(80, 20003, 0));
    let mut msg = vec![3u8, 4, 0, 0, 0, 0, 0x05, 0x00];
    msg.extend_from_slice(&reply4[..28]);
    let c = csum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    v.push((
        eth(&[], 0x0800, &ip4([198, 18, 0, 1], VIP4, 1, 10, 0, &msg)),
        fwd("tcp4-3", 4),
    ));
    let reply6 = ip6(vip6, client6(5), 6, &tcp(443, 20005, 0));
    let mut msg6 = vec![2u8, 0, 0, 0, 0, 0, 0x05, 0x00];
    msg6.extend_from_slice(&reply6);
    v.push((
        eth(&[], 0x86dd, &ip6(v6("2001:db8:ff::1"), vip6, 58, &msg6)),
        fwd("tcp6-5", 6),
    ));
    // AP-3: oversize (1450 > MTU) with DF, and IPv6.
    v.push((
        eth(
            &[],
            0x0800,
            &ip4(client4(700), VIP4, 6, 11, DF, &tcp(40000, 80, 1410)),
        ),
        Want::Reply { family: 4 },
    ));
    v.push((
        eth(
            &[],
            0x86dd,
            &ip6(client6(700), vip6, 6, &tcp(40000, 80, 1390)),
        ),
        Want::Reply { family: 6 },
    ));
    // Double-tagged VLAN (802.1ad + 802.1Q).
    let f = eth(
        &[0x88a8, 0x8100],
        0x0800,
        &ip4(client4(3), VIP4, 6, 1, DF, &tcp(20003, 80, 0)),
    );
    v.push((f, fwd("tcp4-3", 4)));
    // One per drop reason.
    v.push((
        eth(
            &[],
            0x0800,
            &ip4(client4(800), [198, 51, 100, 1], 6, 1, 0, &tcp(1, 80, 0)),
        ),
        Want::Drop("not_for_us"),
    ));
    v.push((
        eth(
            &[],
            0x0800,
            &ip4(client4(801), VIP_TCP443, 17, 1, 0, &udp(1, 443, 4)),
        ),
        Want::Drop("no_rule"),
    ));
    v.push((
        vec![0x02, 0, 0, 0, 0, 0x01, 0x02],
        Want::Drop("truncated_ethernet"),
    ));
    v.push((eth(&[], 0x88cc, &[0; 46]), Want::Drop("unknown_ethertype")));
    let mut bad = ip4(client4(802), VIP4, 6, 1, 0, &tcp(1, 80, 0));
    bad[0] = 0x44;
    v.push((eth(&[], 0x0800, &bad), Want::Drop("bad_ipv4_header")));
    v.push((
        arp_request([192, 0, 2, 99], PORT4),
        Want::Drop("no_exception_path"),
    ));
    // AP-3: oversize IPv4 without DF (1450 > MTU): fragmented, to IPv4
    // backends (l2: the client's packet; tunnels: outer IPv4) and to IPv6
    // backends (tunnels: outer IPv6 with a Fragment header), and once with
    // options (l2: only the copied Router Alert in later fragments).
    v.push((
        eth(
            &[],
            0x0800,
            &ip4(client4(701), VIP4, 17, 12, 0, &udp(1, 53, 1422)),
        ),
        Want::Fragments {
            group: "frag-out4".into(),
            family: 4,
        },
    ));
    v.push((
        eth(
            &[],
            0x0800,
            &ip4(client4(702), VIP4_TO_V6, 17, 13, 0, &udp(2, 53, 1422)),
        ),
        Want::Fragments {
            group: "frag-out6".into(),
            family: 6,
        },
    ));
    // Record Route (not copied), NOP, Router Alert (copied): IHL 8.
    let opts = [7u8, 7, 4, 0, 0, 0, 0, 1, 148, 4, 0, 0];
    v.push((
        eth(
            &[],
            0x0800,
            &ip4_with_options(client4(703), VIP4, 17, 14, &opts, &udp(3, 53, 1500)),
        ),
        Want::Fragments {
            group: "frag-opts".into(),
            family: 4,
        },
    ));
    v
}

// ------------------------------------------------------------------ oracle

fn overhead(encap: &str, family: u8) -> u16 {
    let outer = if family == 4 { 20 } else { 40 };
    match encap {
        "l2" => 0,
        "gre" => outer + 4,
        "ipip" => outer,
        "gue" => outer + 12,
        "geneve" => outer + 16,
        "vxlan" => outer + 30,
        e => panic!("{e}"),
    }
}

/// The VNI of the `v4` service under `geneve`.
const GENEVE_VNI4: u32 = 0x12_3456;

/// The VNI of the `v4` service under `vxlan`.
const VXLAN_VNI4: u32 = 0x00_2a2a;

/// Each service's `vxlan_mac`: the inner frames' destination.
const VXLAN_MAC4: [u8; 6] = [0x02, 0x5c, 0, 0, 0, 0x04];
const VXLAN_MAC6: [u8; 6] = [0x02, 0x5c, 0, 0, 0, 0x06];

/// The UDP checksum over IPv6 of `segment` (header and payload) from the
/// port to `dst` verifies.
fn udp_v6_checksum_ok(dst: &IpAddr, segment: &[u8]) -> bool {
    let mut pseudo = v6(PORT6).octets().to_vec();
    pseudo.extend_from_slice(&want_dst_v6(dst));
    pseudo.extend_from_slice(&(segment.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(segment);
    csum(&pseudo) == 0
}

/// Checks a frame sent to a backend; returns (backend name, inner IP packet).
fn check_forward(encap: &str, family: u8, frame: &[u8]) -> (String, Vec<u8>) {
    let list: &[(&str, u8)] = if family == 4 { &BACKENDS4 } else { &BACKENDS6 };
    let (addr, _) = list
        .iter()
        .find(|(_, m)| frame[..6] == [0x02, 0, 0, 0, 0, *m])
        .unwrap_or_else(|| panic!("dst MAC {:02x?} is no IPv{family} backend", &frame[..6]));
    assert_eq!(frame[6..12], PORT_MAC);
    if encap == "l2" {
        assert!(
            frame[12..14] == [0x08, 0x00] || frame[12..14] == [0x86, 0xdd],
            "untagged"
        );
        return (addr.to_string(), frame[14..].to_vec());
    }
    let p = SlicedPacket::from_ethernet(frame).expect("outer parses");
    let want_dst: IpAddr = addr.parse().unwrap();
    let (proto, payload) = match &p.net {
        Some(NetSlice::Ipv4(o)) => {
            assert_eq!(family, 4, "outer family = backend family");
            let h = o.header().to_header();
            assert_eq!(h.source, PORT4);
            assert_eq!(IpAddr::from(h.destination), want_dst);
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "outer IPv4 checksum"
            );
            assert_eq!(h.time_to_live, 64);
            (h.protocol.0, o.payload().payload)
        }
        Some(NetSlice::Ipv6(o)) => {
            assert_eq!(family, 6, "outer family = backend family");
            let h = o.header();
            assert_eq!(h.source_addr(), v6(PORT6));
            assert_eq!(IpAddr::from(h.destination_addr()), want_dst);
            assert_eq!(h.hop_limit(), 64);
            (h.next_header().0, o.payload().payload)
        }
        None => panic!("no outer IP"),
    };
    let inner = match encap {
        "gre" => {
            assert_eq!(proto, 47);
            assert_eq!(&payload[..2], &[0, 0]);
            payload[4..].to_vec()
        }
        "ipip" => {
            let inner = payload.to_vec();
            assert_eq!(proto, if inner[0] >> 4 == 4 { 4 } else { 41 });
            inner
        }
        "gue" => {
            assert_eq!(proto, 17);
            assert_eq!(&payload[2..4], &6080u16.to_be_bytes());
            assert!(u16::from_be_bytes([payload[0], payload[1]]) >= 49152);
            if family == 6 {
                assert!(
                    udp_v6_checksum_ok(&want_dst, payload),
                    "GUE over IPv6: UDP checksum"
                );
            }
            payload[12..].to_vec()
        }
        "geneve" => {
            // RFC 8926 §3.3-3.4 by hand (etherparse has no GENEVE).
            assert_eq!(proto, 17);
            let (udp, g) = payload.split_at(8);
            assert!(
                u16::from_be_bytes([udp[0], udp[1]]) >= 49152,
                "flow-hash port"
            );
            assert_eq!(&udp[2..4], &6081u16.to_be_bytes(), "IANA GENEVE port");
            assert_eq!(
                usize::from(u16::from_be_bytes([udp[4], udp[5]])),
                payload.len()
            );
            if family == 6 {
                assert!(
                    udp_v6_checksum_ok(&want_dst, payload),
                    "GENEVE over IPv6: UDP checksum"
                );
            } else {
                assert_eq!(&udp[6..8], &[0, 0], "no UDP checksum over IPv4");
            }
            assert_eq!((g[0] >> 6, g[0] & 0x3f), (0, 0), "version 0, no options");
            assert_eq!(g[1], 0, "O and C clear, reserved bits zero");
            let inner = &g[8..];
            let ethertype: u16 = if inner[0] >> 4 == 4 { 0x0800 } else { 0x86dd };
            assert_eq!(
                &g[2..4],
                &ethertype.to_be_bytes(),
                "protocol type: the inner IP"
            );
            let vni = if family == 4 { GENEVE_VNI4 } else { 0 };
            assert_eq!(&g[4..8], &(vni << 8).to_be_bytes(), "VNI, reserved byte");
            inner.to_vec()
        }
        "vxlan" => {
            // RFC 7348 §5 by hand (etherparse has no VXLAN).
            assert_eq!(proto, 17);
            let (udp, v) = payload.split_at(8);
            assert!(
                u16::from_be_bytes([udp[0], udp[1]]) >= 49152,
                "flow-hash port"
            );
            assert_eq!(&udp[2..4], &4789u16.to_be_bytes(), "IANA VXLAN port");
            assert_eq!(
                usize::from(u16::from_be_bytes([udp[4], udp[5]])),
                payload.len()
            );
            if family == 6 {
                assert!(
                    udp_v6_checksum_ok(&want_dst, payload),
                    "VXLAN over IPv6: UDP checksum"
                );
            } else {
                assert_eq!(&udp[6..8], &[0, 0], "no UDP checksum over IPv4");
            }
            assert_eq!(&v[..4], &[0x08, 0, 0, 0], "I flag only, reserved zero");
            let vni = if family == 4 { VXLAN_VNI4 } else { 0 };
            assert_eq!(&v[4..8], &(vni << 8).to_be_bytes(), "VNI, reserved byte");
            let frame = &v[8..];
            let inner = &frame[14..];
            let ethertype: u16 = if inner[0] >> 4 == 4 { 0x0800 } else { 0x86dd };
            let device = if family == 4 { VXLAN_MAC4 } else { VXLAN_MAC6 };
            assert_eq!(&frame[..6], &device, "inner destination: vxlan_mac");
            assert_eq!(&frame[6..12], &PORT_MAC, "inner source: the port");
            assert_eq!(&frame[12..14], &ethertype.to_be_bytes(), "inner type");
            inner.to_vec()
        }
        e => panic!("{e}"),
    };
    (addr.to_string(), inner)
}

fn want_dst_v6(a: &IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(v) => v.octets(),
        IpAddr::V4(_) => unreachable!(),
    }
}

/// The next frames of `outs` up to and including the last fragment of a
/// datagram (MF / M clear).
fn take_fragments<'a>(outs: &mut impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    let mut train = Vec::new();
    loop {
        let f = outs.next().expect("a fragment");
        let more = match u16::from_be_bytes([f[12], f[13]]) {
            0x0800 => {
                let ff = u16::from_be_bytes([f[20], f[21]]);
                assert!(ff & (MF | 0x1fff) != 0, "an IPv4 fragment");
                ff & MF != 0
            }
            0x86dd => {
                assert_eq!(f[20], 44, "an IPv6 fragment");
                f[57] & 1 != 0
            }
            t => panic!("ethertype {t:#x}"),
        };
        train.push(f.clone());
        if !more {
            return train;
        }
    }
}

/// RFC 791: the options of `opts` that non-first fragments carry (copy
/// flag set), padded to 4 bytes. Written here independently of sluice.
fn copied_options(opts: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            t => {
                let len = usize::from(opts[i + 1]);
                if t & 0x80 != 0 {
                    out.extend_from_slice(&opts[i..i + len]);
                }
                i += len;
            }
        }
    }
    out.resize(out.len().div_ceil(4) * 4, 0);
    out
}

/// AP-3: checks the fragments of one datagram — each IP packet ≤ MTU, one
/// Ethernet header and identification, contiguous offsets in 8-byte
/// multiples, MF on all but the last, valid IPv4 checksums, RFC 791 option
/// copying — reassembles them (IPv4 also with etherparse's defragmenter,
/// which must agree) and checks the reassembled packet like a forwarded
/// one. Returns (backend, inner IP packet) as [`check_forward`] does.
fn check_fragments(encap: &str, family: u8, input: &[u8], train: &[Vec<u8>]) -> (String, Vec<u8>) {
    assert!(train.len() >= 2, "{encap}: fragmented into {}", train.len());
    // Outer IPv6 (tunnels to IPv6 backends) has a Fragment header; l2 and
    // outer IPv4 fragment an IPv4 header.
    let v6 = encap != "l2" && family == 6;
    let first = &train[0];
    let mut payload = Vec::new();
    for (i, f) in train.iter().enumerate() {
        let more = i + 1 < train.len();
        assert!(
            f.len() - 14 <= usize::from(MTU),
            "{encap}: fragment {i} ≤ MTU"
        );
        assert_eq!(f[..14], first[..14], "{encap}: one Ethernet header");
        let (offset, bytes) = if v6 {
            // By hand: etherparse 0.16 reads the Fragment header's offset
            // and M from the wrong bits (JulianSchmid/etherparse#150).
            assert_eq!(
                usize::from(u16::from_be_bytes([f[18], f[19]])),
                f.len() - 54,
                "payload length"
            );
            let fo = u16::from_be_bytes([f[56], f[57]]);
            assert_eq!(fo & 1 != 0, more, "{encap}: M flag");
            assert_eq!(fo & 6, 0, "reserved bits");
            assert_eq!(f[58..62], first[58..62], "{encap}: identification");
            (usize::from(fo >> 3) * 8, &f[62..])
        } else {
            let p = SlicedPacket::from_ethernet(f).expect("fragment parses");
            let Some(NetSlice::Ipv4(ip)) = &p.net else {
                panic!("{encap}: IPv4 fragment")
            };
            let h = ip.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "checksum");
            assert!(!h.dont_fragment, "{encap}: DF clear");
            assert_eq!(h.more_fragments, more, "{encap}: MF");
            assert_eq!(h.identification, ip4_ident(first), "{encap}: one ID");
            if encap == "l2" && i > 0 {
                let opts = &first[34..14 + usize::from(first[14] & 0x0f) * 4];
                assert_eq!(h.options.as_slice(), copied_options(opts), "RFC 791");
            }
            (
                usize::from(h.fragment_offset.byte_offset()),
                ip.payload().payload,
            )
        };
        assert_eq!(offset, payload.len(), "{encap}: contiguous offsets");
        if more {
            assert_eq!(bytes.len() % 8, 0, "{encap}: 8-byte multiple");
        }
        payload.extend_from_slice(bytes);
    }
    // The packet the backend reassembles.
    let rebuilt = if v6 {
        let mut r = first[..54].to_vec();
        r[18..20].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        r[20] = first[54];
        r.extend_from_slice(&payload);
        r
    } else {
        let mut pool = etherparse::defrag::IpDefragPool::<(), ()>::new();
        let mut done = None;
        for f in train {
            let s = SlicedPacket::from_ethernet(f).unwrap();
            done = done.or(pool.process_sliced_packet(&s, (), ()).expect("defrag"));
        }
        let done = done.expect("etherparse reassembles the datagram");
        assert_eq!(done.payload, payload, "{encap}: etherparse agrees");
        let ihl = usize::from(first[14] & 0x0f) * 4;
        let mut r = first[..14 + ihl].to_vec();
        r[16..18].copy_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
        r[20] &= !0x20;
        r[24..26].fill(0);
        let c = csum(&r[14..]);
        r[24..26].copy_from_slice(&c.to_be_bytes());
        r.extend_from_slice(&payload);
        r
    };
    if encap == "l2" {
        assert_eq!(rebuilt[14..], input[14..], "l2: the client's packet again");
    }
    check_forward(encap, family, &rebuilt)
}

fn ip4_ident(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[18], frame[19]])
}

/// Checks an ICMP answer to the client: type, MTU, addresses, quote.
fn check_reply(encap: &str, family: u8, input: &[u8], out: &[u8]) {
    assert_eq!(out[..6], CLIENT_MAC, "back to the client");
    assert_eq!(out[6..12], PORT_MAC);
    let p = SlicedPacket::from_ethernet(out).expect("reply parses");
    let inp = SlicedPacket::from_ethernet(input).unwrap();
    // The backends of a VIP are of the VIP's family in this input.
    let mtu = MTU - overhead(encap, family);
    match (&p.net, &inp.net, &p.transport) {
        (Some(NetSlice::Ipv4(r)), Some(NetSlice::Ipv4(i)), Some(TransportSlice::Icmpv4(icmp))) => {
            assert_eq!(r.header().source(), i.header().destination());
            assert_eq!(r.header().destination(), i.header().source());
            let h = r.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            assert_eq!(
                icmp.icmp_type(),
                Icmpv4Type::DestinationUnreachable(
                    etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                        next_hop_mtu: mtu
                    }
                )
            );
            assert_eq!(csum(&out[34..]), 0, "ICMP checksum");
            assert_eq!(out.len(), 14 + 576);
            assert_eq!(out[42..], input[14..14 + 548], "quote");
        }
        (Some(NetSlice::Ipv6(r)), Some(NetSlice::Ipv6(i)), Some(TransportSlice::Icmpv6(icmp))) => {
            assert_eq!(r.header().source_addr(), i.header().destination_addr());
            assert_eq!(r.header().destination_addr(), i.header().source_addr());
            assert_eq!(
                icmp.icmp_type(),
                Icmpv6Type::PacketTooBig {
                    mtu: u32::from(mtu)
                }
            );
            assert!(icmp.is_checksum_valid(r.header().source(), r.header().destination()));
            assert_eq!(out[62..], input[14..14 + out.len() - 62], "quote");
        }
        other => panic!("not an ICMP reply: {other:?}"),
    }
}

fn check(encap: &str) {
    let dir = tempdir(&format!("golden-proto-{encap}"));
    let cases = input();
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, _)| f.clone()).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(encap, &dir)).unwrap();
    let metrics = run_sluice(&cfg, &dir);
    let output = read_pcap(&dir.join("out.pcap"));

    let sent: Vec<&(Vec<u8>, Want)> = cases
        .iter()
        .filter(|(_, w)| !matches!(w, Want::Drop(_)))
        .collect();
    let mut owner: HashMap<String, String> = HashMap::new();
    let mut per_backend: BTreeMap<String, usize> = BTreeMap::new();
    let (mut fragmented, mut fragments) = (0u64, 0u64);
    // Every non-dropped packet leaves, in order; a fragmented one as
    // consecutive frames.
    let mut outs = output.iter();
    for (inp, want) in &sent {
        let (group, backend, inner) = match want {
            Want::Forward { group, family } => {
                let out = outs
                    .next()
                    .unwrap_or_else(|| panic!("{encap}: {group} sent"));
                let (backend, inner) = check_forward(encap, *family, out);
                (group, backend, inner)
            }
            Want::Fragments { group, family } => {
                let train = take_fragments(&mut outs);
                fragmented += 1;
                fragments += train.len() as u64;
                let (backend, inner) = check_fragments(encap, *family, inp, &train);
                (group, backend, inner)
            }
            Want::Reply { family } => {
                let out = outs.next().expect("ICMP reply sent");
                check_reply(encap, *family, inp, out);
                continue;
            }
            Want::Drop(_) => unreachable!(),
        };
        let ip_start = inp.len() - inner.len();
        assert_eq!(
            inner,
            inp[ip_start..],
            "{encap}: inner packet untouched ({group})"
        );
        let prev = owner.entry(group.clone()).or_insert(backend.clone());
        assert_eq!(*prev, backend, "{encap}: {group} on one backend");
        *per_backend.entry(backend).or_default() += 1;
    }
    assert_eq!(outs.count(), 0, "{encap}: nothing sent beyond the input");
    assert_eq!(fragmented, 3, "{encap}: three fragmented inputs");
    assert_eq!(
        per_backend.len(),
        6,
        "{encap}: every backend used: {per_backend:?}"
    );

    compare_with_expected(&format!("proto-{encap}"), &output);

    let m = parse_metrics(&metrics);
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let rx = get("sluice_port_rx_packets_total{port=\"uplink\"}");
    let tx = get("sluice_port_tx_packets_total{port=\"uplink\"}");
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(rx, cases.len() as u64, "{metrics}");
    assert_eq!(tx, output.len() as u64, "{metrics}");
    assert_eq!(
        get("sluice_fragmented_packets_total"),
        fragmented,
        "{metrics}"
    );
    assert_eq!(
        get("sluice_fragments_created_total"),
        fragments,
        "{metrics}"
    );
    assert_eq!(fragments - fragmented, extra_fragments(&m));
    assert_eq!(
        rx + fragments - fragmented,
        tx + drops,
        "RX = TX + drops - (fragments created - packets fragmented)\n{metrics}"
    );
    let replies = sent
        .iter()
        .filter(|(_, w)| matches!(w, Want::Reply { .. }))
        .count() as u64;
    assert!(replies > 0);
    assert_eq!(
        get("sluice_icmp_replies_total"),
        replies,
        "AP-3: every ICMP answer counted\n{metrics}"
    );
    let mut want_drops: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, w) in &cases {
        if let Want::Drop(r) = w {
            *want_drops.entry(r).or_default() += 1;
        }
    }
    for (reason, n) in want_drops {
        let key = format!("sluice_dropped_packets_total{{reason=\"{reason}\"}}");
        assert_eq!(get(&key), n, "{key}\n{metrics}");
    }
}

/// AP-3 L2 DSR for every protocol and family (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_l2() {
    check("l2");
}

/// AP-3 GRE, outer IPv4 and IPv6 (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_gre() {
    check("gre");
}

/// AP-3 IP-in-IP (4in4, 6in6, 4in6, 6in4) (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_ipip() {
    check("ipip");
}

/// AP-3 GUE, UDP checksum over IPv6 (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_gue() {
    check("gue");
}

/// AP-3 GENEVE (RFC 8926): base header with the service's VNI, IP
/// payloads, UDP checksum over IPv6, ICMP answers with its 36/56-byte
/// overhead, IPv4 without DF fragmented (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_geneve() {
    check("geneve");
}

/// AP-3 VXLAN (RFC 7348): the header with the service's VNI, an inner
/// Ethernet header from the port to the service's `vxlan_mac`, UDP
/// checksum over IPv6, ICMP answers with its 50/70-byte overhead, IPv4
/// without DF fragmented (HA-1/2/4, FR-1/3/4/5).
#[test]
fn golden_protocols_vxlan() {
    check("vxlan");
}
