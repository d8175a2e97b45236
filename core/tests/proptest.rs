//! Property tests: `process` never panics on any bytes, and the frame
//! parser agrees with `etherparse` (an independent oracle) on addresses,
//! protocol and ports whenever both accept a frame.

mod common;

use std::net::IpAddr;

use common::state::state;
use common::*;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice, VlanId};
use proptest::prelude::*;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::wire::{parse, Parsed, Ports};

/// Frames that reach deep into the parser: valid ones from etherparse's
/// builder, then with a few bytes overwritten and cut at a random length.
fn built_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<(u16, u16)>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(vlans, v6, is_tcp, s, d, (sp, dp), payload)| {
            let eth = PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC);
            let id = |v| VlanId::try_new(v).unwrap();
            let mut out = Vec::new();
            macro_rules! finish {
                ($ip:expr) => {{
                    if is_tcp {
                        $ip.tcp(sp, dp, 1, 4096).write(&mut out, &payload).unwrap()
                    } else {
                        $ip.udp(sp, dp).write(&mut out, &payload).unwrap()
                    }
                }};
            }
            macro_rules! with_ip {
                ($l2:expr) => {{
                    if v6 {
                        finish!($l2.ipv6(s, d, 64))
                    } else {
                        let (s4, d4) = ([s[0], s[1], s[2], s[3]], [d[0], d[1], d[2], d[3]]);
                        finish!($l2.ipv4(s4, d4, 64))
                    }
                }};
            }
            match vlans {
                0 => with_ip!(eth),
                1 => with_ip!(eth.single_vlan(id(10))),
                _ => with_ip!(eth.double_vlan(id(10), id(20))),
            }
            out
        })
}

/// IPv6 frames with a chain of extension headers (hop-by-hop first when
/// present, then any of destination options, routing, fragment) before
/// TCP or UDP, optionally VLAN-tagged: the oracle's view of RFC 8200 §4.
fn ipv6_ext_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        proptest::collection::vec(0u8..3, 0..4),
        any::<bool>(),
        any::<bool>(),
        any::<[u8; 16]>(),
        any::<(u16, u16)>(),
        proptest::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(hbh, chain, is_tcp, vlan, s, (sp, dp), payload)| {
            const HBH: u8 = 0;
            const ROUTING: u8 = 43;
            const FRAG: u8 = 44;
            const DEST: u8 = 60;
            let upper = if is_tcp { TCP } else { UDP };
            let l4 = if is_tcp {
                tcp(sp, dp, SYN, &payload)
            } else {
                udp(sp, dp, &payload)
            };
            // Kinds in order; at most one fragment header (RFC 8200 §4.1).
            let mut kinds: Vec<u8> = Vec::new();
            if hbh {
                kinds.push(HBH);
            }
            for k in chain {
                let kind = [DEST, ROUTING, FRAG][usize::from(k)];
                if kind != FRAG || !kinds.contains(&FRAG) {
                    kinds.push(kind);
                }
            }
            let mut body = l4;
            let mut next = upper;
            for &kind in kinds.iter().rev() {
                let mut h = if kind == FRAG {
                    // Atomic fragment: offset 0, no more (both parsers
                    // then read the transport header).
                    frag6(next, 0, false, 7)
                } else {
                    opts6(next)
                };
                if kind == ROUTING {
                    // Type 0 would be deprecated; segments left 0.
                    h[2] = 4;
                    h[3] = 0;
                }
                h.extend_from_slice(&body);
                body = h;
                next = kind;
            }
            let ip = ipv6(v6("2001:db8::7"), std::net::Ipv6Addr::from(s), next, &body);
            let tags: &[u16] = if vlan { &[VLAN] } else { &[] };
            eth(tags, ETH_IPV6, &ip)
        })
}

fn mutated_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![built_frame(), ipv6_ext_frame()],
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        any::<usize>(),
    )
        .prop_map(|(mut f, edits, cut)| {
            for (at, b) in edits {
                let i = at % f.len();
                f[i] = b;
            }
            let len = f.len();
            f.truncate(cut % (len + 1));
            f
        })
}

fn any_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..128),
        built_frame(),
        ipv6_ext_frame(),
        mutated_frame(),
    ]
}

fn oracle(frame: &[u8]) -> Option<(IpAddr, IpAddr, u8, Option<Ports>)> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (src, dst, payload) = match p.net? {
        NetSlice::Ipv4(v) => (
            IpAddr::V4(v.header().source_addr()),
            IpAddr::V4(v.header().destination_addr()),
            v.payload().clone(),
        ),
        NetSlice::Ipv6(v) => (
            IpAddr::V6(v.header().source_addr()),
            IpAddr::V6(v.header().destination_addr()),
            v.payload().clone(),
        ),
    };
    let ports = match p.transport {
        Some(TransportSlice::Tcp(t)) => Some(Ports {
            src: t.source_port(),
            dst: t.destination_port(),
        }),
        Some(TransportSlice::Udp(u)) => Some(Ports {
            src: u.source_port(),
            dst: u.destination_port(),
        }),
        _ => None,
    };
    Some((src, dst, payload.ip_number.0, ports))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Principle 4 (no panics): any bytes, any headroom; a Forward verdict
    /// leaves a frame at least an Ethernet header long.
    #[test]
    fn process_never_panics(frame in any_frame(), headroom in 0usize..64) {
        let st = state();
        let mut pkt = VecPacket::with_headroom(&frame, headroom);
        let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
        if let Verdict::Forward { .. } | Verdict::Fragment { .. } | Verdict::Reply = v {
            prop_assert!(pkt.data().len() >= 14);
        } else {
            prop_assert_eq!(pkt.data(), &frame[..], "non-forwarded packets stay untouched");
        }
    }

    /// The parser and etherparse agree on everything the flow hash and rule
    /// lookup read, for unmodified frames (both must accept them).
    #[test]
    fn parser_agrees_with_etherparse_on_built_frames(frame in built_frame()) {
        let want = oracle(&frame);
        prop_assert!(want.is_some());
        let Ok(Parsed::Ip(got)) = parse(&frame) else {
            return Err(TestCaseError::fail(format!("rejected {frame:02x?}")));
        };
        prop_assert_eq!(Some((got.src, got.dst, got.protocol, got.ports)), want);
    }

    /// IPv6 extension-header chains: both parsers accept and agree on the
    /// upper-layer protocol and its ports.
    #[test]
    fn parser_agrees_with_etherparse_on_ipv6_extension_chains(frame in ipv6_ext_frame()) {
        let want = oracle(&frame);
        prop_assert!(want.is_some(), "etherparse rejected {:02x?}", frame);
        let Ok(Parsed::Ip(got)) = parse(&frame) else {
            return Err(TestCaseError::fail(format!("rejected {frame:02x?}")));
        };
        let want = want.unwrap();
        // A fragmented datagram reports the Fragment header's next header
        // (HA-2: what its later fragments show); etherparse walks on.
        let proto = if got.fragment.is_fragmented() { want.2 } else { got.protocol };
        prop_assert_eq!((got.src, got.dst, proto, got.ports), want);
    }

    /// On damaged frames, whenever both parsers accept, they agree.
    #[test]
    fn parser_agrees_with_etherparse_on_mutated_frames(frame in mutated_frame()) {
        if let (Some(want), Ok(Parsed::Ip(got))) = (oracle(&frame), parse(&frame)) {
            // etherparse skips the ports of first fragments; we keep them (FR-4).
            let ports = if got.fragment.is_fragmented() { want.3 } else { got.ports };
            // After a non-first IPv6 fragment's header the bytes are the
            // middle of the datagram; etherparse still reads them as
            // headers, we stop (the fragment header's next header).
            // For any fragment we report the Fragment header's next header
            // (HA-2), etherparse the header after any that follow it.
            let proto = if got.fragment.is_fragmented() { want.2 } else { got.protocol };
            prop_assert_eq!((got.src, got.dst, proto, ports), want, "{:02x?}", frame);
        }
    }
}
