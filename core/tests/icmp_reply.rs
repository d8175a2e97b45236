//! AP-3: a packet that encapsulation would push over the egress MTU and
//! that may not be fragmented is answered with ICMP fragmentation-needed /
//! ICMPv6 packet-too-big carrying the MTU left after the tunnel overhead,
//! sent back out the receive port; rate-limited per worker; never about
//! ICMP errors (RFC 1122, RFC 4443). Checked with the `etherparse` oracle.

mod common;

use common::state::*;
use common::*;
use std::sync::Arc;

use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, SlicedPacket, TransportSlice};
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;
use sluice_core::zones::{Zone, ZoneMap};
use sluice_core::DropReason;

const MTU: u16 = 1000;

fn small_mtu_state() -> ForwardingState {
    let mut st = state();
    for p in &mut st.ports {
        p.mtu = MTU;
    }
    st
}

fn run(st: &ForwardingState, ctx: &mut PipelineCtx, frame: &[u8]) -> (Verdict, Vec<u8>) {
    let mut pkt = VecPacket::new(frame);
    let v = process(&mut pkt, 0, st, ctx);
    (v, pkt.data().to_vec())
}

/// A UDP datagram to VIP4:53 (GRE service) whose IP packet is `len` bytes.
fn udp4(len: usize, flags: u16) -> (Vec<u8>, Vec<u8>) {
    let ip4 = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        UDP,
        flags,
        &udp(5000, 53, &vec![0xab; len - 28]),
    );
    (eth(&[VLAN], ETH_IPV4, &ip4), ip4)
}

/// AP-3: IPv4 with DF, 1 byte over MTU − GRE overhead → frag-needed with
/// MTU 976, from the VIP to the client, MACs swapped, VLAN kept, valid
/// checksums, quoting the first 548 bytes of the packet (576-byte reply).
#[test]
fn ap_3_ipv4_df_oversize_answers_frag_needed_with_the_tunnel_mtu() {
    let st = small_mtu_state();
    let mut ctx = PipelineCtx::default();
    let (ok, _) = udp4(usize::from(MTU) - 24, DF);
    assert!(matches!(run(&st, &mut ctx, &ok).0, Verdict::Forward { .. }));
    let (frame, ip4) = udp4(usize::from(MTU) - 23, DF);
    let (v, out) = run(&st, &mut ctx, &frame);
    assert_eq!(v, Verdict::Reply);
    assert_eq!(out[..6], CLIENT_MAC);
    assert_eq!(out[6..12], PORT_MAC);
    assert_eq!(out[12..18], frame[12..18], "VLAN tag kept");
    assert_eq!(out.len(), 18 + 576);
    let p = SlicedPacket::from_ethernet(&out).expect("reply parses");
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("IPv4 reply")
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, v4(VIP4).octets());
    assert_eq!(h.destination, v4("198.51.100.7").octets());
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("ICMP")
    };
    match icmp.icmp_type() {
        Icmpv4Type::DestinationUnreachable(d) => assert_eq!(
            d,
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: MTU - 24
            }
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(inet_checksum(&out[18 + 20..]), 0, "ICMP checksum");
    assert_eq!(out[18 + 28..], ip4[..548], "quote");
}

/// AP-3: IPv6 (never fragmented in flight) over the GUE service with IPv4
/// backends → packet-too-big, ICMPv6 checksum valid. The tunnel MTU (MTU −
/// 32 = 968) is below the IPv6 minimum, which a client ignores, so the
/// reply says 1280 (RFC 2473 §7.1 (b)); packets up to that are fragmented
/// in the tunnel (`tests/fragment.rs`).
#[test]
fn ap_3_ipv6_oversize_answers_packet_too_big() {
    let st = small_mtu_state();
    let mut ctx = PipelineCtx::default();
    let client = v6("2001:db8:c::7");
    let ip6 = ipv6(client, v6(VIP6), UDP, &udp(5000, 53, &vec![1; 1500]));
    let frame = eth(&[], ETH_IPV6, &ip6);
    let (v, out) = run(&st, &mut ctx, &frame);
    assert_eq!(v, Verdict::Reply);
    assert_eq!(out.len(), 14 + 1280);
    let p = SlicedPacket::from_ethernet(&out).expect("reply parses");
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("IPv6 reply")
    };
    assert_eq!(ip.header().source_addr(), v6(VIP6));
    assert_eq!(ip.header().destination_addr(), client);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("ICMPv6")
    };
    assert_eq!(
        icmp.icmp_type(),
        Icmpv6Type::PacketTooBig {
            mtu: u32::from(MTU - 32).max(1280)
        }
    );
    let icmp_bytes = &out[14 + 40..];
    let mut pseudo = v6(VIP6).octets().to_vec();
    pseudo.extend_from_slice(&client.octets());
    pseudo.extend_from_slice(&(icmp_bytes.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(icmp_bytes);
    assert_eq!(inet_checksum(&pseudo), 0, "ICMPv6 checksum");
    assert_eq!(icmp_bytes[8..], ip6[..1232], "quote");
}

/// AP-3: IPv4 without DF is not answered with ICMP but left, encapsulated
/// whole, for the worker to fragment (`tests/fragment.rs` checks the
/// fragments).
#[test]
fn ap_3_ipv4_without_df_oversize_is_fragmented_not_answered() {
    let st = small_mtu_state();
    let (frame, ip4) = udp4(usize::from(MTU), 0);
    let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
    assert!(matches!(v, Verdict::Fragment { .. }), "{v:?}");
    assert_eq!(out.len(), 14 + 24 + ip4.len(), "GRE-encapsulated, oversize");
    assert_eq!(out[14 + 24..], ip4[..], "inner packet untouched");
}

/// AP-3: replies are rate-limited per worker (burst 100, 1000/s).
#[test]
fn ap_3_replies_are_rate_limited() {
    let st = small_mtu_state();
    let mut ctx = PipelineCtx::default();
    let (frame, _) = udp4(usize::from(MTU), DF);
    for _ in 0..100 {
        assert_eq!(run(&st, &mut ctx, &frame).0, Verdict::Reply);
    }
    assert_eq!(
        run(&st, &mut ctx, &frame).0,
        Verdict::Drop(DropReason::IcmpRateLimited)
    );
    ctx.now = Millis(5);
    for _ in 0..5 {
        assert_eq!(run(&st, &mut ctx, &frame).0, Verdict::Reply);
    }
    assert_eq!(
        run(&st, &mut ctx, &frame).0,
        Verdict::Drop(DropReason::IcmpRateLimited)
    );
}

/// RFC 4443 §2.4: no error about an ICMPv6 error, even oversize (larger
/// than 1280 bytes, so not fragmented in the tunnel instead).
#[test]
fn no_icmp_error_about_an_icmp_error() {
    let st = small_mtu_state();
    let mut msg = vec![1u8, 0, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(&[0u8; 1300]);
    let frame = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8:c::7"), v6(VIP6), ICMPV6, &msg),
    );
    assert_eq!(
        run(&st, &mut PipelineCtx::default(), &frame).0,
        Verdict::Drop(DropReason::IcmpNotAllowed)
    );
}

/// Backend 0 reached out of port 0 with a 9000-byte MTU, backend 1 out of
/// port 1 with 1500: two paths whose MTUs an answer must not confuse.
fn jumbo_and_standard_paths() -> ForwardingState {
    let mut st = state();
    st.ports[0].mtu = 9000;
    st.ports[1].mtu = 1500;
    st
}

/// A table whose every slot is `backend`.
fn all_to(backend: u32) -> Arc<MaglevTable> {
    Arc::new(MaglevTable {
        slots: vec![BackendId(backend); 7].into(),
    })
}

/// The MTU a frag-needed reply advertises.
fn advertised_mtu(reply: &[u8]) -> u16 {
    let p = SlicedPacket::from_ethernet(reply).expect("reply parses");
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("ICMP")
    };
    match icmp.icmp_type() {
        Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu },
        ) => next_hop_mtu,
        other => panic!("{other:?}"),
    }
}

/// AP-3 with CT-7: a tracked connection stays on backend 0 (9000-byte
/// path) after the table moved its hash to backend 1 (1500-byte path); a
/// packet too big for backend 0's path is answered with backend 0's MTU,
/// the path the connection takes, not the table's.
#[test]
fn ap_3_ct_7_a_tracked_connection_is_answered_with_its_backends_mtu() {
    let mut st = jumbo_and_standard_paths();
    let svc = usize::from(SVC_TCP80_L2);
    st.services[svc].tables = vec![all_to(0)];
    st.lane_backends = st.build_lane_backends();
    let mut ctx = PipelineCtx::default();
    let client = v4("198.51.100.7");
    let segment = |flags, len: usize| {
        let seg = tcp(40000, 80, flags, &vec![0x5a; len - 40]);
        eth(&[], ETH_IPV4, &ipv4(client, v4(VIP4), TCP, DF, &seg))
    };
    let forwarded_to = |v| match v {
        Verdict::Forward { backend, .. } => backend,
        other => panic!("expected Forward, got {other:?}"),
    };
    let (v, _) = run(&st, &mut ctx, &segment(SYN, 60));
    assert_eq!(forwarded_to(v), BackendId(0));

    st.services[svc].tables = vec![all_to(1)];
    st.lane_backends = st.build_lane_backends();
    let (v, _) = run(&st, &mut ctx, &segment(0x10, 8000));
    assert_eq!(forwarded_to(v), BackendId(0), "CT-7: the connection stays");
    let (v, out) = run(&st, &mut ctx, &segment(0x10, 9001));
    assert_eq!(v, Verdict::Reply);
    assert_eq!(advertised_mtu(&out), 9000, "backend 0's path, not 1's 1500");
}

/// AP-3 with ZA-3: an untracked UDP flow from a client of zone "a" goes to
/// the zone's backend 0 (9000-byte path, GRE: 8976 left) while the no-zone
/// table names backend 1 (1500-byte path); a packet too big for backend
/// 0's path is answered with 8976.
#[test]
fn ap_3_za_3_a_zonal_flow_is_answered_with_its_zones_backends_mtu() {
    let mut st = jumbo_and_standard_paths();
    st.zones = ZoneMap {
        zones: vec![Zone {
            name: "a".into(),
            subnets: vec![(ip("198.51.100.0"), 24)],
        }],
    };
    st.services[usize::from(SVC_UDP_GRE)].tables = vec![all_to(1), all_to(0)];
    for b in st.backends.iter_mut().flatten() {
        b.service = ServiceId(SVC_UDP_GRE);
    }
    st.lane_backends = st.build_lane_backends();
    let mut ctx = PipelineCtx::default();
    let datagram = |len: usize| {
        let d = udp(5000, 53, &vec![0xab; len - 28]);
        eth(
            &[],
            ETH_IPV4,
            &ipv4(v4("198.51.100.7"), v4(VIP4), UDP, DF, &d),
        )
    };
    let (v, _) = run(&st, &mut ctx, &datagram(8976));
    assert!(
        matches!(
            v,
            Verdict::Forward {
                backend: BackendId(0),
                ..
            }
        ),
        "{v:?}"
    );
    let (v, out) = run(&st, &mut ctx, &datagram(8977));
    assert_eq!(v, Verdict::Reply);
    assert_eq!(advertised_mtu(&out), 9000 - 24, "backend 0's path, not 1's");
}
