//! SPEC §2: the hash input per affinity and fragment status (every cell of
//! the table), HA-1…HA-3, and the pinned cross-appliance encoding (MG-2).

mod common;

use common::*;
use sluice_core::affinity::SessionAffinity as A;
use sluice_core::flow::{
    flow_hash, flow_hash_seeded, tuple_kind, FlowKey, FlowSeed, TupleKind, FLOW_HASH_SEED,
};
use sluice_core::hash::{stable_hash_pair, stable_hash_words};
use sluice_core::wire::{parse, IpInfo, Parsed, Ports};

const ALL_AFFINITIES: [A; 4] = [A::None, A::ClientIpPortProto, A::ClientIpProto, A::ClientIp];

fn info(frame: &[u8]) -> IpInfo {
    match parse(frame) {
        Ok(Parsed::Ip(i)) => i,
        other => panic!("{other:?}"),
    }
}

/// Packets of each kind in the table's columns, IPv4 and IPv6, all from
/// one client to one VIP.
fn tcp4(flags_frag: u16) -> IpInfo {
    let seg = tcp(40000, 80, 0, &[]);
    info(&eth(
        &[],
        ETH_IPV4,
        &ipv4(
            v4("198.51.100.7"),
            v4("203.0.113.10"),
            TCP,
            flags_frag,
            &seg,
        ),
    ))
}

fn udp4(flags_frag: u16) -> IpInfo {
    let d = udp(40000, 53, &[0; 8]);
    info(&eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("198.51.100.7"), v4("203.0.113.10"), UDP, flags_frag, &d),
    ))
}

fn other4(proto: u8) -> IpInfo {
    info(&eth(
        &[],
        ETH_IPV4,
        &ipv4(
            v4("198.51.100.7"),
            v4("203.0.113.10"),
            proto,
            0,
            &[8, 0, 0, 0],
        ),
    ))
}

fn udp6(fragment: Option<(u16, bool)>) -> IpInfo {
    let mut p = Vec::new();
    let first = match fragment {
        Some((off, more)) => {
            p.extend(frag6(UDP, off, more, 1));
            44
        }
        None => UDP,
    };
    p.extend(udp(40000, 53, &[0; 8]));
    info(&eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8::7"), v6("2001:db8::10"), first, &p),
    ))
}

fn expected(affinity: A, five_if_portful: bool) -> TupleKind {
    match affinity {
        A::ClientIp => TupleKind::Two,
        A::ClientIpProto => TupleKind::Three,
        A::None | A::ClientIpPortProto if five_if_portful => TupleKind::Five,
        A::None | A::ClientIpPortProto => TupleKind::Three,
    }
}

/// Every cell of the SPEC §2 table: rows = affinities, columns = TCP,
/// unfragmented UDP, fragmented UDP (first and later, v4 and v6), TCP
/// fragments, ESP/ICMP/GRE.
#[test]
fn spec_2_table_every_cell() {
    let portful = [tcp4(DF), udp4(0), udp6(None)];
    let fragmented_or_portless = [
        udp4(MF),
        udp4(5),
        tcp4(MF),
        udp6(Some((0, true))),
        udp6(Some((9, false))),
        udp6(Some((0, false))),
        other4(ESP),
        other4(ICMP),
        other4(47),
    ];
    for a in ALL_AFFINITIES {
        for p in &portful {
            assert_eq!(
                FlowKey::for_packet(p, a).kind(),
                expected(a, true),
                "{a:?} {p:?}"
            );
        }
        for p in &fragmented_or_portless {
            assert_eq!(
                FlowKey::for_packet(p, a).kind(),
                expected(a, false),
                "{a:?} {p:?}"
            );
        }
    }
}

/// The key holds exactly the fields of its tuple.
#[test]
fn spec_2_key_fields() {
    let p = tcp4(0);
    let five = FlowKey::for_packet(&p, A::None);
    assert_eq!(
        five,
        FlowKey::five_tuple(
            p.src,
            p.dst,
            TCP,
            Ports {
                src: 40000,
                dst: 80
            }
        )
    );
    assert_eq!(
        FlowKey::for_packet(&p, A::ClientIpProto),
        FlowKey::three_tuple(p.src, p.dst, TCP)
    );
    assert_eq!(
        FlowKey::for_packet(&p, A::ClientIp),
        FlowKey::two_tuple(p.src, p.dst)
    );
}

/// HA-1: NONE hashes exactly like CLIENT_IP_PORT_PROTO, for every kind.
#[test]
fn ha_1_none_hashes_like_client_ip_port_proto() {
    for p in [
        tcp4(0),
        udp4(0),
        udp4(MF),
        udp6(Some((3, false))),
        other4(ESP),
    ] {
        let a = flow_hash(&FlowKey::for_packet(&p, A::None));
        let b = flow_hash(&FlowKey::for_packet(&p, A::ClientIpPortProto));
        assert_eq!(a, b);
    }
    assert_eq!(tuple_kind(A::None, TCP, true, false), TupleKind::Five);
}

/// HA-2: all fragments of one datagram (first included) hash alike under
/// every affinity, v4 and v6.
#[test]
fn ha_2_fragments_of_a_datagram_hash_alike() {
    for a in ALL_AFFINITIES {
        let h = |i: &IpInfo| flow_hash(&FlowKey::for_packet(i, a));
        assert_eq!(h(&udp4(MF)), h(&udp4(MF | 185)), "{a:?}");
        assert_eq!(h(&udp4(MF)), h(&udp4(370)), "{a:?}");
        assert_eq!(
            h(&udp6(Some((0, true)))),
            h(&udp6(Some((185, false)))),
            "{a:?}"
        );
    }
    // …and under the default they do not hash like the unfragmented 5-tuple.
    assert_ne!(
        flow_hash(&FlowKey::for_packet(&udp4(MF), A::None)),
        flow_hash(&FlowKey::for_packet(&udp4(0), A::None))
    );
}

/// HA-3: with CLIENT_IP / CLIENT_IP_PROTO, fragments and unfragmented
/// packets of one client hash alike (so they reach the same backend).
#[test]
fn ha_3_client_affinities_ignore_fragmentation() {
    for a in [A::ClientIp, A::ClientIpProto] {
        let h = |i: &IpInfo| flow_hash(&FlowKey::for_packet(i, a));
        assert_eq!(h(&udp4(0)), h(&udp4(MF)), "{a:?}");
        assert_eq!(h(&udp4(0)), h(&udp4(MF | 99)), "{a:?}");
        assert_eq!(h(&udp6(None)), h(&udp6(Some((7, false)))), "{a:?}");
    }
    // CLIENT_IP ignores the protocol too; CLIENT_IP_PROTO does not.
    let ip_only = |i: &IpInfo| flow_hash(&FlowKey::for_packet(i, A::ClientIp));
    assert_eq!(ip_only(&tcp4(0)), ip_only(&udp4(0)));
    let ip_proto = |i: &IpInfo| flow_hash(&FlowKey::for_packet(i, A::ClientIpProto));
    assert_ne!(ip_proto(&tcp4(0)), ip_proto(&udp4(0)));
}

/// MG-2 / AP-6: the documented encoding, recomputed by hand, and pinned
/// values. Changing either breaks agreement between appliances.
#[test]
fn mg_2_flow_hash_encoding_is_documented_and_pinned() {
    let key = FlowKey::five_tuple(
        ip("192.0.2.1"),
        ip("203.0.113.10"),
        TCP,
        Ports {
            src: 0x1234,
            dst: 80,
        },
    );
    let meta = (1 << 40) | (1 << 41) | (6u64 << 32) | (0x1234 << 16) | 80;
    let by_hand = stable_hash_pair(FLOW_HASH_SEED, 0xc000_0201_cb00_710a, meta);
    assert_eq!(flow_hash(&key), by_hand);

    let key6 = FlowKey::three_tuple(ip("2001:db8::1"), ip("2001:db8:0:0:1::a"), UDP);
    let meta6 = (1 << 40) | (1 << 42) | (17u64 << 32);
    let words = [
        0x2001_0db8_0000_0000,
        1,
        0x2001_0db8_0000_0000,
        0x0001_0000_0000_000a,
        meta6,
    ];
    assert_eq!(flow_hash(&key6), stable_hash_words(FLOW_HASH_SEED, &words));

    let two = FlowKey::two_tuple(ip("192.0.2.1"), ip("203.0.113.10"));
    assert_eq!(
        flow_hash(&two),
        stable_hash_pair(FLOW_HASH_SEED, 0xc000_0201_cb00_710a, 0)
    );

    assert_eq!(
        [flow_hash(&key), flow_hash(&key6)],
        PINNED,
        "{:#x?}",
        [flow_hash(&key), flow_hash(&key6)]
    );
}

const PINNED: [u64; 2] = [0x7877_5ea0_99bb_b0f6, 0x0214_bcd8_fccb_1b38];

/// MG-2 with a fleet key (`dataplane.flow_hash_key`): no key is exactly
/// the pinned unkeyed hash; a key moves flows to other table slots; the
/// same key gives the same hashes (every appliance of the fleet), and the
/// key's seed is pinned too, so that builds agree.
#[test]
fn mg_2_a_fleet_key_rehashes_every_flow_the_same_way_everywhere() {
    assert_eq!(FlowSeed::default().get(), FLOW_HASH_SEED);
    let key = [0x5a_u8; 32];
    let seed = FlowSeed::keyed(&key);
    assert_eq!(seed, FlowSeed::keyed(&[0x5a_u8; 32]));
    assert_ne!(seed, FlowSeed::keyed(&[0x5b_u8; 32]));
    assert_eq!(seed.get(), PINNED_KEYED_SEED, "{:#x}", seed.get());
    let flows: Vec<FlowKey> = (0..1000u16)
        .map(|i| {
            FlowKey::five_tuple(
                ip("192.0.2.1"),
                ip("203.0.113.10"),
                TCP,
                Ports {
                    src: 1024 + i,
                    dst: 80,
                },
            )
        })
        .collect();
    // Slots of a 65,537-entry Maglev table, as `MaglevTable` scales the
    // low 32 bits.
    let slot = |h: u64| ((h & 0xffff_ffff) * 65_537) >> 32;
    let moved = flows
        .iter()
        .filter(|f| slot(flow_hash(f)) != slot(flow_hash_seeded(seed, f)))
        .count();
    assert!(
        moved > 990,
        "only {moved} of 1000 flows changed slot under a key"
    );
    for f in &flows {
        assert_eq!(flow_hash_seeded(FlowSeed::default(), f), flow_hash(f));
        assert_eq!(
            flow_hash_seeded(seed, f),
            flow_hash_seeded(FlowSeed::keyed(&key), f)
        );
    }
}

const PINNED_KEYED_SEED: u64 = 0xf41e_07fb_47a4_9563;

/// Direction and field order matter: swapping src/dst or ports changes the
/// hash (a flow and its reverse need not share a backend).
#[test]
fn fields_are_not_commutative() {
    let a = FlowKey::five_tuple(
        ip("10.0.0.1"),
        ip("10.0.0.2"),
        UDP,
        Ports { src: 1, dst: 2 },
    );
    let b = FlowKey::five_tuple(
        ip("10.0.0.2"),
        ip("10.0.0.1"),
        UDP,
        Ports { src: 1, dst: 2 },
    );
    let c = FlowKey::five_tuple(
        ip("10.0.0.1"),
        ip("10.0.0.2"),
        UDP,
        Ports { src: 2, dst: 1 },
    );
    assert_ne!(flow_hash(&a), flow_hash(&b));
    assert_ne!(flow_hash(&a), flow_hash(&c));
    // Presence flags keep a zero proto/port distinct from an absent one.
    let z = FlowKey::three_tuple(ip("10.0.0.1"), ip("10.0.0.2"), 0);
    assert_ne!(flow_hash(&z), flow_hash(&FlowKey::two_tuple(z.src, z.dst)));
}

proptest::proptest! {
    /// `packet_hash` (the per-packet fast path) is exactly the documented
    /// `flow_hash` of the packet's key, for every affinity, protocol,
    /// family and fragment status (MG-2: appliances must agree).
    #[test]
    fn packet_hash_equals_flow_hash_of_key(
        v6 in proptest::bool::ANY,
        a in proptest::prelude::any::<u128>(),
        b in proptest::prelude::any::<u128>(),
        proto in proptest::prelude::prop_oneof![proptest::prelude::Just(6u8), proptest::prelude::Just(17u8), proptest::prelude::any::<u8>()],
        ports in proptest::option::of((proptest::prelude::any::<u16>(), proptest::prelude::any::<u16>())),
        frag in 0u8..3,
        aff in 0u8..4,
    ) {
        use sluice_core::flow::packet_hash;
        use sluice_core::wire::Fragment;
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let (src, dst) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
        } else {
            (IpAddr::V4(Ipv4Addr::from(a as u32)), IpAddr::V4(Ipv4Addr::from(b as u32)))
        };
        let mut info = ip_info_template();
        info.src = src;
        info.dst = dst;
        info.protocol = proto;
        info.ports = ports.map(|(s, d)| Ports { src: s, dst: d });
        info.fragment = [Fragment::No, Fragment::First, Fragment::Later][usize::from(frag)];
        let affinity = [A::None, A::ClientIpPortProto, A::ClientIpProto, A::ClientIp][usize::from(aff)];
        proptest::prop_assert_eq!(
            packet_hash(&info, affinity),
            flow_hash(&FlowKey::for_packet(&info, affinity))
        );
    }
}

/// Any parsed packet, as a template to overwrite fields of.
fn ip_info_template() -> IpInfo {
    tcp4(0)
}
