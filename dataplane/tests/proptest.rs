//! Property tests: `process` never panics on any bytes, and the frame
//! parser agrees with `etherparse` (an independent oracle) on addresses,
//! protocol and ports whenever both accept a frame.

mod common;

use std::net::IpAddr;

use common::state::state;
use common::*;
use dataplane::packet::{PacketBuf, VecPacket};
use dataplane::pipeline::{process, PipelineCtx, Verdict};
use dataplane::wire::{parse, Parsed, Ports};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice, VlanId};
use proptest::prelude::*;

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

fn mutated_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        built_frame(),
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
        if let Verdict::Forward { .. } = v {
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

    /// On damaged frames, whenever both parsers accept, they agree.
    #[test]
    fn parser_agrees_with_etherparse_on_mutated_frames(frame in mutated_frame()) {
        if let (Some(want), Ok(Parsed::Ip(got))) = (oracle(&frame), parse(&frame)) {
            // etherparse skips the ports of first fragments; we keep them (FR-4).
            let ports = if got.fragment.is_fragmented() { want.3 } else { got.ports };
            prop_assert_eq!((got.src, got.dst, got.protocol, ports), want, "{:02x?}", frame);
        }
    }
}
