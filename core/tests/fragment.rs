//! AP-3 fragmentation: an oversize IPv4 packet without DF leaves as IP
//! fragments, each at most the egress MTU — the client's packet itself
//! under `l2` (RFC 791, as a router would), the outer IPv4 packet of GRE /
//! IP-in-IP / GUE (per-worker identification), or the outer IPv6 packet
//! with a Fragment header (RFC 8200 §4.5) — while IPv4 with DF and IPv6
//! clients still get ICMP.
//!
//! Every case is checked with a small reference reassembler written here
//! (lengths, offsets, MF, 8-byte multiples, IPv4 header checksums, payload
//! equality) and, where the datagram is complete, with `etherparse`'s
//! defragmenter. The tunnel cases compare against the same packet
//! encapsulated for a port whose MTU fits it: what the backend reassembles
//! must be exactly what it would have received unfragmented.

mod common;

use common::state::*;
use common::*;
use etherparse::defrag::IpDefragPool;
use etherparse::SlicedPacket;
use proptest::prelude::*;
use sluice_core::encap::{encapsulate, Encapsulation, Geneve, Gre, Gue, Ipip, Vxlan};
use sluice_core::fragment::{self, FragmentIds, MAX_FRAGMENTS};
use sluice_core::ids::ServiceId;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::port::PortState;
use sluice_core::snapshot::ForwardingState;
use sluice_core::wire::{parse, Parsed};
use sluice_core::DropReason;

const GENEVE: Encapsulation = Encapsulation::Geneve(Geneve { port: 6081, vni: 9 });
const VXLAN: Encapsulation = Encapsulation::Vxlan(Vxlan {
    port: 4789,
    vni: 9,
    mac: [0x02, 0, 0, 0, 0, 0x09],
});

/// What a fresh 2 KiB mbuf holds (the runtime's pool).
const ROOM: usize = 2048;
const MTU: u16 = 1000;

fn state_mtu(mtu: u16) -> ForwardingState {
    let mut st = state();
    for p in &mut st.ports {
        p.mtu = mtu;
    }
    st.lane_backends = st.build_lane_backends();
    st
}

/// `st` with the UDP service (VIP4, any port) using `encap`, both its
/// backends its own (their prebuilt headers are its encapsulation's), on
/// port 0 and of the family of `outer_v6`.
fn udp_service(mtu: u16, encap: Encapsulation, outer_v6: bool) -> ForwardingState {
    let mut st = state_mtu(mtu);
    st.services[usize::from(SVC_UDP_GRE)].encapsulation = encap;
    for (i, b) in st.backends.iter_mut().take(2).enumerate() {
        let b = b.as_mut().unwrap();
        b.service = ServiceId(SVC_UDP_GRE);
        b.egress.port = 0;
        b.address = if outer_v6 {
            ip(&format!("fd00::{}", 5 + i))
        } else {
            ip(&format!("10.1.0.{}", 5 + i))
        };
    }
    st.lane_backends = st.build_lane_backends();
    st
}

/// A UDP datagram from the client to VIP4 whose IP packet is `ip_len`
/// bytes, with `flags` (DF / MF | offset) and a recognisable payload.
fn udp4(ip_len: usize, flags: u16) -> (Vec<u8>, Vec<u8>) {
    let body: Vec<u8> = (0..ip_len - 28).map(|i| (i * 7 + 3) as u8).collect();
    let ip4 = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        UDP,
        flags,
        &udp(5000, 53, &body),
    );
    (eth(&[VLAN], ETH_IPV4, &ip4), ip4)
}

/// The same, TCP to port 80 (the `l2` service).
fn tcp4(ip_len: usize, flags: u16) -> (Vec<u8>, Vec<u8>) {
    let body: Vec<u8> = (0..ip_len - 40).map(|i| (i * 13 + 1) as u8).collect();
    let ip4 = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        TCP,
        flags,
        &tcp(40000, 80, 0x10, &body),
    );
    (eth(&[], ETH_IPV4, &ip4), ip4)
}

/// Runs the worker's part over `pkt` as the pipeline left it: plan, fresh
/// buffers, split. Returns every fragment frame, first to last.
fn split_all(mut pkt: VecPacket, mtu: u16, room: usize) -> Result<Vec<Vec<u8>>, DropReason> {
    let plan = fragment::plan(pkt.data(), mtu, room)?;
    let mut extra = vec![VecPacket::new(&[]); plan.extra()];
    fragment::split(&mut pkt, &plan, extra.iter_mut())?;
    Ok(std::iter::once(&pkt)
        .chain(&extra)
        .map(|p| p.data().to_vec())
        .collect())
}

/// The pipeline, then the worker's fragmentation for `Verdict::Fragment`.
fn run(st: &ForwardingState, ctx: &mut PipelineCtx, frame: &[u8]) -> (Verdict, Vec<Vec<u8>>) {
    let mut pkt = VecPacket::new(frame);
    let v = process(&mut pkt, 0, st, ctx);
    match v {
        Verdict::Fragment { port, .. } => {
            let mtu = st.ports[usize::from(port)].mtu;
            (v, split_all(pkt, mtu, ROOM).expect("fragments"))
        }
        _ => (v, vec![pkt.data().to_vec()]),
    }
}

// ------------------------------------------------------- reference reassembler

/// One fragment as the reference reassembler sees it.
#[derive(Debug)]
struct Frag {
    l2: Vec<u8>,
    /// IPv4 header with options, or IPv6 fixed header + Fragment header.
    hdr: Vec<u8>,
    offset: usize,
    more: bool,
    ident: u32,
    payload: Vec<u8>,
}

/// Parses and checks one fragment frame: lengths consistent, IPv4 header
/// checksum valid and DF clear, IPv6 Fragment header right after the fixed
/// header with reserved bits zero.
fn parse_frag(frame: &[u8]) -> Frag {
    let (l2, ip) = frame.split_at(14);
    match u16::from_be_bytes([l2[12], l2[13]]) {
        0x0800 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(total, ip.len(), "total length = IP bytes in the frame");
            assert_eq!(inet_checksum(&ip[..ihl]), 0, "IPv4 header checksum");
            let ff = u16::from_be_bytes([ip[6], ip[7]]);
            assert_eq!(ff & DF, 0, "fragments have DF clear");
            Frag {
                l2: l2.to_vec(),
                hdr: ip[..ihl].to_vec(),
                offset: usize::from(ff & 0x1fff) * 8,
                more: ff & MF != 0,
                ident: u32::from(u16::from_be_bytes([ip[4], ip[5]])),
                payload: ip[ihl..].to_vec(),
            }
        }
        0x86dd => {
            assert_eq!(ip[6], 44, "Fragment header first");
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            assert_eq!(plen, ip.len() - 40, "payload length");
            let f = &ip[40..48];
            assert_eq!(f[1], 0, "reserved");
            let fo = u16::from_be_bytes([f[2], f[3]]);
            assert_eq!(fo & 0b110, 0, "reserved bits");
            Frag {
                l2: l2.to_vec(),
                hdr: ip[..48].to_vec(),
                offset: usize::from(fo >> 3) * 8,
                more: fo & 1 != 0,
                ident: u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
                payload: ip[48..].to_vec(),
            }
        }
        t => panic!("ethertype {t:#06x}"),
    }
}

/// Reassembles fragments sent in order: same L2 header and identification,
/// contiguous offsets from the first one's, payloads of all but the last a
/// multiple of 8 with MF set, every IP packet ≤ `mtu`. Returns the parsed
/// fragments and the payload.
fn reassemble(frames: &[Vec<u8>], mtu: u16) -> (Vec<Frag>, Vec<u8>) {
    assert!(frames.len() >= 2, "fragmented: {} frame(s)", frames.len());
    let frags: Vec<Frag> = frames.iter().map(|f| parse_frag(f)).collect();
    let mut payload = Vec::new();
    let mut next = frags[0].offset;
    for (i, (f, frame)) in frags.iter().zip(frames).enumerate() {
        assert!(frame.len() - 14 <= usize::from(mtu), "fragment {i} ≤ MTU");
        assert_eq!(f.l2, frags[0].l2, "fragment {i}: same Ethernet header");
        assert_eq!(f.ident, frags[0].ident, "fragment {i}: same identification");
        assert_eq!(f.offset, next, "fragment {i}: contiguous offset");
        if i + 1 < frags.len() {
            assert!(f.more, "fragment {i}: more fragments");
            assert_eq!(f.payload.len() % 8, 0, "fragment {i}: 8-byte multiple");
        }
        next += f.payload.len();
        payload.extend_from_slice(&f.payload);
    }
    (frags, payload)
}

/// etherparse's defragmenter over the same frames: the reassembled payload.
/// IPv4 only: etherparse 0.16 reads the IPv6 Fragment header's offset and
/// M flag from the wrong bits (JulianSchmid/etherparse#150, fixed in 0.20),
/// so IPv6 fragments rely on the reference reassembler above, which reads
/// them as RFC 8200 §4.5 lays them out (offset = word >> 3, M = bit 0).
fn etherparse_defrag(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut pool = IpDefragPool::<(), ()>::new();
    let mut done = None;
    for f in frames {
        let s = SlicedPacket::from_ethernet(f).expect("fragment parses");
        if let Some(p) = pool.process_sliced_packet(&s, (), ()).expect("defrag") {
            assert!(done.is_none(), "completed once");
            done = Some(p.payload);
        }
    }
    done.expect("etherparse completed the datagram")
}

/// The IPv4 header `h` with total length, flags/offset and checksum
/// zeroed: what fragments must keep from the original.
fn v4_fixed(h: &[u8]) -> Vec<u8> {
    let mut h = h.to_vec();
    h[2..4].fill(0);
    h[6..8].fill(0);
    h[10..12].fill(0);
    h
}

/// `frame` encapsulated for a port whose MTU fits it: the reference for
/// what the backend must reassemble.
fn unfragmented(st: &ForwardingState, frame: &[u8], backend: u32) -> Vec<u8> {
    unfragmented_in(st, SVC_UDP_GRE, frame, backend)
}

/// [`unfragmented`] for service `svc`.
fn unfragmented_in(st: &ForwardingState, svc: u16, frame: &[u8], backend: u32) -> Vec<u8> {
    let Ok(Parsed::Ip(info)) = parse(frame) else {
        panic!("parse")
    };
    let svc = &st.services[usize::from(svc)];
    let b = st.backends[backend as usize].as_ref().unwrap();
    let big = PortState {
        mtu: u16::MAX,
        ..st.ports[usize::from(b.egress.port)].clone()
    };
    let hash = sluice_core::flow::packet_hash(&info, svc.affinity);
    let mut pkt = VecPacket::new(frame);
    encapsulate(&mut pkt, &info, svc.encapsulation, b, &big, hash).expect("encapsulates");
    pkt.data().to_vec()
}

// ---------------------------------------------------------------------- l2

/// AP-3 `l2`: the client's IPv4 packet (DF clear) is fragmented as a router
/// would: identification, TTL, addresses and protocol kept, each fragment
/// ≤ MTU, offsets in 8-byte units, MF on all but the last, valid header
/// checksums, and the reassembled payload equals the original (reference
/// reassembler and etherparse).
#[test]
fn ap_3_l2_ipv4_without_df_is_fragmented_like_a_router() {
    let st = state_mtu(MTU);
    let (frame, ip4) = tcp4(2000, 0);
    let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
    let Verdict::Fragment { port, .. } = v else {
        panic!("{v:?}")
    };
    assert_eq!(out.len(), 3, "2000 bytes → 976 + 976 + 48 + headers");
    let (frags, payload) = reassemble(&out, st.ports[usize::from(port)].mtu);
    assert_eq!(payload, ip4[20..], "payload reassembles");
    assert_eq!(etherparse_defrag(&out), ip4[20..], "etherparse agrees");
    assert_eq!(frags[0].offset, 0);
    assert!(!frags[2].more);
    assert_eq!(frags[0].ident, 0xbeef, "identification kept");
    for f in &frags {
        assert_eq!(
            v4_fixed(&f.hdr),
            v4_fixed(&ip4[..20]),
            "rest of the header kept"
        );
        assert_eq!(f.l2[6..12], PORT_MAC);
        assert_eq!(f.l2[12..14], [0x08, 0x00]);
    }
    assert_eq!(out[0].len(), 14 + 996, "first fragment: 976 payload bytes");
}

/// AP-3 `l2`, RFC 791 §3.2: options go whole into the first fragment, and
/// only those with the copy flag (here Router Alert, not Record Route)
/// into the others, padded to a 4-byte multiple.
#[test]
fn ap_3_l2_options_copy_flag_into_later_fragments() {
    let st = state_mtu(MTU);
    let (_, plain) = tcp4(1500, 0);
    // Options: Record Route (7, 7 bytes, not copied), NOP, Router Alert
    // (148, copied), = 12 bytes, IHL 8.
    let opts = [7u8, 7, 4, 0, 0, 0, 0, 1, 148, 4, 0, 0];
    let mut ip4 = plain[..20].to_vec();
    ip4.extend_from_slice(&opts);
    ip4.extend_from_slice(&plain[20..]);
    ip4[0] = 0x48;
    let total = ip4.len() as u16;
    ip4[2..4].copy_from_slice(&total.to_be_bytes());
    ip4[10..12].fill(0);
    let c = inet_checksum(&ip4[..32]);
    ip4[10..12].copy_from_slice(&c.to_be_bytes());
    let frame = eth(&[], ETH_IPV4, &ip4);
    let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
    assert!(matches!(v, Verdict::Fragment { .. }), "{v:?}");
    let (frags, payload) = reassemble(&out, MTU);
    assert_eq!(payload, ip4[32..]);
    assert_eq!(etherparse_defrag(&out), ip4[32..]);
    assert_eq!(frags[0].hdr[20..], opts, "first fragment: every option");
    for f in &frags[1..] {
        assert_eq!(f.hdr.len(), 24, "later fragments: IHL 6");
        assert_eq!(f.hdr[20..], [148, 4, 0, 0], "only the copied option");
        assert_eq!(v4_fixed(&f.hdr[..20])[1..], v4_fixed(&ip4[..20])[1..]);
    }
}

/// AP-3 `l2`: a fragment (MF set, non-zero offset) can be fragmented again:
/// offsets continue from its own, the last piece keeps its MF.
#[test]
fn ap_3_l2_a_fragment_is_fragmented_again() {
    // A middle fragment (offset 185 × 8) of some datagram, to the UDP
    // service (all ports, FR-4) switched to `l2`.
    let st = udp_service(MTU, Encapsulation::L2, false);
    let (frame, ip4) = udp4(1800, MF | 185);
    let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
    assert!(matches!(v, Verdict::Fragment { .. }), "{v:?}");
    let (frags, payload) = reassemble(&out, MTU);
    assert_eq!(payload, ip4[20..]);
    assert_eq!(frags[0].offset, 185 * 8);
    assert!(frags.iter().all(|f| f.more), "the original MF carries on");
}

// ------------------------------------------------------------------ tunnels

/// Fragments of an outer packet reassemble to exactly the outer packet the
/// backend would have received on a big enough link.
fn check_tunnel(encap: Encapsulation, outer_v6: bool) {
    let st = udp_service(MTU, encap, outer_v6);
    let mut ctx = PipelineCtx {
        fragment_ids: FragmentIds::for_worker(1),
        ..PipelineCtx::default()
    };
    let (frame, _) = udp4(1900, 0);
    let (v, out) = run(&st, &mut ctx, &frame);
    let Verdict::Fragment { backend, .. } = v else {
        panic!("{encap:?}: {v:?}")
    };
    let want = unfragmented(&st, &frame, backend.0);
    let (frags, payload) = reassemble(&out, MTU);
    let outer_hdr = if outer_v6 { 40 } else { 20 };
    assert_eq!(payload, want[14 + outer_hdr..], "{encap:?}: reassembles");
    if !outer_v6 {
        assert_eq!(etherparse_defrag(&out), want[14 + outer_hdr..], "{encap:?}");
    }
    for f in &frags {
        assert_eq!(f.l2, want[..14], "{encap:?}: Ethernet header");
        if outer_v6 {
            let mut h = f.hdr[..40].to_vec();
            h[4..7].copy_from_slice(&want[14 + 4..14 + 7]);
            assert_eq!(h, want[14..54], "{encap:?}: IPv6 header kept");
            assert_eq!(f.hdr[40], want[14 + 6], "{encap:?}: next header");
            assert_eq!(f.ident, 0x8000_0000, "{encap:?}: worker 1's first ID");
        } else {
            let mut h = v4_fixed(&f.hdr);
            h[4..6].fill(0);
            assert_eq!(h, v4_fixed(&want[14..34]), "{encap:?}: outer header kept");
            assert_eq!(f.ident, 0x8000, "{encap:?}: worker 1's first ID");
        }
    }
    // The next oversize packet takes the next identification.
    let (v, out) = run(&st, &mut ctx, &frame);
    assert!(matches!(v, Verdict::Fragment { .. }));
    let want_id = if outer_v6 { 0x8000_0001 } else { 0x8001 };
    assert_eq!(parse_frag(&out[0]).ident, want_id, "{encap:?}");
}

/// AP-3 GRE / IP-in-IP / GUE / GENEVE / VXLAN over an outer IPv4 header: the outer packet
/// (DF clear, since the inner has none) is fragmented, per-worker IDs.
#[test]
fn ap_3_tunnels_over_ipv4_fragment_the_outer_packet() {
    for encap in [
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
        Encapsulation::Gue(Gue { port: 6080 }),
        GENEVE,
        VXLAN,
    ] {
        check_tunnel(encap, false);
    }
}

/// AP-3, RFC 8200 §4.5, FR-5 (IPv4 in IPv6): the appliance is the source
/// of the outer IPv6 packet and fragments it with a Fragment header; GUE's,
/// GENEVE's and VXLAN's UDP checksum, computed over the whole datagram, verifies after
/// reassembly (it equals the unfragmented packet's).
#[test]
fn ap_3_tunnels_over_ipv6_use_a_fragment_header() {
    for encap in [
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
        Encapsulation::Gue(Gue { port: 6080 }),
        GENEVE,
        VXLAN,
    ] {
        check_tunnel(encap, true);
    }
}

// ---------------------------------------------------- what is not fragmented

/// AP-3: IPv4 with DF is still answered with ICMP fragmentation-needed,
/// under every encapsulation; nothing is fragmented.
#[test]
fn ap_3_ipv4_with_df_still_gets_icmp() {
    for encap in [
        Encapsulation::L2,
        Encapsulation::Gre(Gre),
        Encapsulation::Ipip(Ipip),
    ] {
        let st = udp_service(MTU, encap, false);
        let (frame, _) = udp4(1200, DF);
        let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
        assert_eq!(v, Verdict::Reply, "{encap:?}");
        // VLAN-tagged reply: IPv4 at 18, ICMP at 38.
        assert_eq!(out[0][38..40], [3, 4], "{encap:?}: fragmentation needed");
    }
}

/// AP-3: an IPv6 client packet is never fragmented (packet-too-big).
#[test]
fn ap_3_ipv6_clients_get_packet_too_big() {
    let st = state_mtu(MTU);
    let ip6 = ipv6(
        v6("2001:db8:c::7"),
        v6(VIP6),
        UDP,
        &udp(5000, 53, &[7; 1400]),
    );
    let (v, _) = run(&st, &mut PipelineCtx::default(), &eth(&[], ETH_IPV6, &ip6));
    assert_eq!(v, Verdict::Reply);
}

/// A packet that fits is forwarded whole (no fragmentation verdict).
#[test]
fn ap_3_packets_that_fit_are_not_fragmented() {
    let st = udp_service(MTU, Encapsulation::Gre(Gre), false);
    let (frame, _) = udp4(usize::from(MTU) - 24, 0);
    let (v, out) = run(&st, &mut PipelineCtx::default(), &frame);
    assert!(matches!(v, Verdict::Forward { .. }), "{v:?}");
    assert_eq!(out[0].len(), 14 + usize::from(MTU));
}

// ------------------------------------------------------------ worker side

/// Too few buffers (the pool ran out): `fragment_alloc_failed`, and the
/// original packet is left whole (the worker then drops it, counted once).
#[test]
fn ap_3_missing_buffers_fail_without_touching_the_packet() {
    let st = udp_service(MTU, Encapsulation::Gre(Gre), false);
    let (frame, _) = udp4(2000, 0);
    let mut pkt = VecPacket::new(&frame);
    let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
    assert!(matches!(v, Verdict::Fragment { .. }));
    let before = pkt.data().to_vec();
    let plan = fragment::plan(pkt.data(), MTU, ROOM).unwrap();
    assert_eq!(plan.count(), 3);
    let mut extra = vec![VecPacket::new(&[]); plan.extra() - 1];
    assert_eq!(
        fragment::split(&mut pkt, &plan, extra.iter_mut()),
        Err(DropReason::FragmentAllocFailed)
    );
    assert_eq!(pkt.data(), before);
}

/// Fragments also fit the buffers: with a room below MTU + Ethernet, the
/// fragments are cut to the room.
#[test]
fn ap_3_fragments_fit_the_buffer_room() {
    let st = udp_service(1500, Encapsulation::Gre(Gre), false);
    let (frame, _) = udp4(1600, 0);
    let mut pkt = VecPacket::new(&frame);
    let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
    let Verdict::Fragment { backend, .. } = v else {
        panic!("{v:?}")
    };
    let out = split_all(pkt, 1500, 600).unwrap();
    assert!(out.iter().all(|f| f.len() <= 600), "each frame ≤ room");
    let (_, payload) = reassemble(&out, 1500);
    assert_eq!(payload, unfragmented(&st, &frame, backend.0)[34..]);
}

/// The largest frame a runtime buffer can hold: the data room sized for
/// the largest MTU (9216 + Ethernet + two VLAN tags + 128 bytes headroom,
/// rounded to 64: 9408), all of it filled when the encapsulation has used
/// the headroom up.
const LARGEST_FRAME: usize = 9408;

/// Jumbo buffers keep `MAX_FRAGMENTS` out of reach. The
/// largest frame any buffer holds, towards the smallest MTU (576), becomes
/// 17 fragments; IPv4 options repeated in every fragment (at most 40
/// bytes) make it 19.
#[test]
fn ap_3_the_largest_buffer_stays_within_max_fragments() {
    let (_, ip4) = udp4(LARGEST_FRAME - 14, 0);
    let frame = eth(&[], ETH_IPV4, &ip4);
    assert_eq!(frame.len(), LARGEST_FRAME);
    let plan = fragment::plan(&frame, 576, LARGEST_FRAME).unwrap();
    assert_eq!(plan.count(), (LARGEST_FRAME - 14 - 20).div_ceil(552));
    assert!(plan.count() <= MAX_FRAGMENTS);
    let out = split_all(VecPacket::new(&frame), 576, LARGEST_FRAME).unwrap();
    let (_, payload) = reassemble(&out, 576);
    assert_eq!(payload, ip4[20..]);
}

/// More than MAX_FRAGMENTS pieces: `mtu_exceeded` (unreachable with the
/// runtime's buffers, see above; bounded anyway); DF set: never planned.
#[test]
fn ap_3_too_many_fragments_are_refused() {
    let untagged = |ip4: &[u8]| eth(&[], ETH_IPV4, ip4);
    let (_, big) = udp4(60_000, 0);
    const { assert!(60_000 / 552 > MAX_FRAGMENTS) };
    assert_eq!(
        fragment::plan(&untagged(&big), 576, 65535),
        Err(DropReason::MtuExceeded)
    );
    let (_, df) = udp4(1500, DF);
    assert_eq!(
        fragment::plan(&untagged(&df), 576, ROOM),
        Err(DropReason::MtuExceeded)
    );
}

// ------------------------------------------------- IPv6 in small tunnels

/// The IPv6 VIP's service (every protocol to VIP6) using `encap`, both
/// its backends on port 0 (MTU `mtu`) and of the family of `outer_v6`.
fn v6_service(mtu: u16, encap: Encapsulation, outer_v6: bool) -> ForwardingState {
    let mut st = udp_service(mtu, encap, outer_v6);
    st.services[usize::from(SVC_V6_GUE)].encapsulation = encap;
    st.lane_backends = st.build_lane_backends();
    st
}

/// A UDP datagram from an IPv6 client to VIP6 whose IP packet is `ip_len`
/// bytes.
fn udp6(ip_len: usize) -> Vec<u8> {
    let body: Vec<u8> = (0..ip_len - 48).map(|i| (i * 5 + 2) as u8).collect();
    let ip6 = ipv6(v6("2001:db8:c::7"), v6(VIP6), UDP, &udp(5000, 53, &body));
    eth(&[], ETH_IPV6, &ip6)
}

/// RFC 2473 §7.1 (a) / RFC 4213 §3.2: an IPv6 client
/// packet of at most 1280 bytes that does not fit the tunnel is sent in a
/// fragmented outer packet — over IPv6 with a Fragment header (GRE, port
/// MTU 1280: tunnel MTU 1236), over IPv4 with DF clear (GUE, port MTU
/// 576: tunnel MTU 544) — reassembling to exactly the unfragmented tunnel
/// packet. Before, the client got a Packet Too Big of 1236 or 544, below
/// the IPv6 minimum, which hosts ignore: the packet never got through.
#[test]
fn ap_3_small_ipv6_packets_fragment_the_tunnel() {
    for (encap, outer_v6, mtu) in [
        (Encapsulation::Gre(Gre), true, 1280u16),
        (Encapsulation::Ipip(Ipip), true, 1280),
        (Encapsulation::Gue(Gue { port: 6080 }), true, 1300),
        (Encapsulation::Gue(Gue { port: 6080 }), false, 576),
        (Encapsulation::Gre(Gre), false, 1000),
        (GENEVE, true, 1300),
        (GENEVE, false, 576),
        (VXLAN, true, 1300),
        (VXLAN, false, 576),
    ] {
        let st = v6_service(mtu, encap, outer_v6);
        let tunnel_mtu = usize::from(mtu)
            - sluice_core::encap::overhead(encap, st.backends[0].as_ref().unwrap().address);
        for ip_len in [tunnel_mtu + 1, 1280] {
            let frame = udp6(ip_len);
            let mut pkt = VecPacket::new(&frame);
            let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
            let Verdict::Fragment { backend, .. } = v else {
                panic!("{encap:?} over {mtu}, {ip_len} bytes: {v:?}")
            };
            let out = split_all(pkt, mtu, ROOM).unwrap();
            let (_, payload) = reassemble(&out, mtu);
            let want = unfragmented_in(&st, SVC_V6_GUE, &frame, backend.0);
            let outer_hdr = if outer_v6 { 40 } else { 20 };
            assert_eq!(
                payload,
                want[14 + outer_hdr..],
                "{encap:?} over {mtu}: reassembles"
            );
        }
        // What fits the tunnel is sent whole.
        let mut pkt = VecPacket::new(&udp6(tunnel_mtu));
        let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
        assert!(matches!(v, Verdict::Forward { .. }), "{encap:?}: {v:?}");
    }
}

/// RFC 2473 §7.1 (b): a larger IPv6 packet gets a
/// Packet Too Big of max(tunnel MTU, 1280): 1280 through a tunnel of 1236
/// (before: 1236, which the client ignores).
#[test]
fn ap_3_ipv6_packet_too_big_is_never_below_1280() {
    let st = v6_service(1280, Encapsulation::Gre(Gre), true);
    let mut pkt = VecPacket::new(&udp6(1281));
    let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
    assert_eq!(v, Verdict::Reply);
    let p = SlicedPacket::from_ethernet(pkt.data()).expect("reply parses");
    let Some(etherparse::TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("ICMPv6: {p:?}")
    };
    assert_eq!(
        icmp.icmp_type(),
        etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 }
    );
    // IPv4 with DF keeps the tunnel MTU: IPv4's minimum is 68.
    let st = udp_service(1280, Encapsulation::Gre(Gre), true);
    let (frame, _) = udp4(1281, DF);
    let mut pkt = VecPacket::new(&frame);
    assert_eq!(
        process(&mut pkt, 0, &st, &mut PipelineCtx::default()),
        Verdict::Reply
    );
    let p = SlicedPacket::from_ethernet(pkt.data()).expect("reply parses");
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("ICMP: {p:?}")
    };
    assert_eq!(
        icmp.icmp_type(),
        etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1236 }
        )
    );
}

/// A packet that cannot be prepared is dropped as it came, like every
/// drop: headroom for the tunnel but not for the IPv6 Fragment header →
/// `no_headroom`; an outer packet beyond 65,535 bytes → `mtu_exceeded`.
#[test]
fn ap_3_failed_preparation_leaves_the_packet_untouched() {
    let st = udp_service(1280, Encapsulation::Gre(Gre), true);
    let (_, ip4) = udp4(1500, 0);
    let frame = eth(&[], ETH_IPV4, &ip4);
    // Ethernet + IPv6 + GRE is 44 bytes more than the client's Ethernet
    // header; the Fragment header 8 more.
    for (headroom, fits) in [(44, false), (51, false), (52, true)] {
        let mut pkt = VecPacket::with_headroom(&frame, headroom);
        let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
        if fits {
            assert!(matches!(v, Verdict::Fragment { .. }), "{headroom}: {v:?}");
        } else {
            assert_eq!(v, Verdict::Drop(DropReason::NoHeadroom), "{headroom}");
            assert_eq!(pkt.data(), frame, "{headroom}: untouched");
        }
    }
    let st = udp_service(MTU, Encapsulation::Gre(Gre), false);
    let (_, huge) = udp4(65_535, 0);
    let frame = eth(&[], ETH_IPV4, &huge);
    let mut pkt = VecPacket::new(&frame);
    let v = process(&mut pkt, 0, &st, &mut PipelineCtx::default());
    assert_eq!(v, Verdict::Drop(DropReason::MtuExceeded));
    assert_eq!(pkt.data(), frame, "untouched");
}

/// The new verdict does not grow what stage 2 returns per packet.
#[test]
fn verdict_stays_small() {
    assert!(std::mem::size_of::<Verdict>() <= 8);
}

// ----------------------------------------------------------------- property

fn encap_strategy() -> impl Strategy<Value = (Encapsulation, bool)> {
    prop_oneof![
        Just((Encapsulation::L2, false)),
        Just((Encapsulation::Gre(Gre), false)),
        Just((Encapsulation::Ipip(Ipip), false)),
        Just((Encapsulation::Gue(Gue { port: 6080 }), false)),
        Just((Encapsulation::Gre(Gre), true)),
        Just((Encapsulation::Ipip(Ipip), true)),
        Just((Encapsulation::Gue(Gue { port: 6080 }), true)),
        Just((GENEVE, false)),
        Just((GENEVE, true)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// AP-3: for any size, MTU and encapsulation, an IPv4 packet without
    /// DF is forwarded whole when it fits and otherwise fragmented into
    /// pieces ≤ MTU that reassemble to exactly what an unlimited link
    /// would have carried.
    #[test]
    fn ap_3_fragments_always_reassemble(
        ip_len in 28usize..4000,
        mtu in 576u16..2100,
        (encap, outer_v6) in encap_strategy(),
        worker in 0usize..8,
    ) {
        let mtu = if outer_v6 { mtu.max(1280) } else { mtu };
        let st = udp_service(mtu, encap, outer_v6);
        let mut ctx = PipelineCtx {
            fragment_ids: FragmentIds::for_worker(worker),
            ..PipelineCtx::default()
        };
        let (frame, ip4) = udp4(ip_len, 0);
        let mut pkt = VecPacket::new(&frame);
        let v = process(&mut pkt, 0, &st, &mut ctx);
        let backend = match v {
            Verdict::Forward { backend, .. } | Verdict::Fragment { backend, .. } => backend,
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        };
        let want = if matches!(encap, Encapsulation::L2) {
            let mut f = pkt.data()[..14].to_vec();
            f.extend_from_slice(&ip4);
            f
        } else {
            unfragmented(&st, &frame, backend.0)
        };
        let address = st.backends[backend.0 as usize].as_ref().unwrap().address;
        let overhead = sluice_core::encap::overhead(encap, address);
        if ip_len + overhead <= usize::from(mtu) {
            prop_assert!(matches!(v, Verdict::Forward { .. }), "{:?}", v);
            prop_assert_eq!(pkt.data(), &want[..]);
        } else {
            prop_assert!(matches!(v, Verdict::Fragment { .. }), "{:?}", v);
            let out = split_all(pkt, mtu, ROOM).unwrap();
            let (_, payload) = reassemble(&out, mtu);
            let hdr = if outer_v6 { 40 } else { 20 };
            prop_assert_eq!(&payload[..], &want[14 + hdr..]);
            prop_assert!(out.iter().all(|f| f.len() <= ROOM));
        }
    }
}
