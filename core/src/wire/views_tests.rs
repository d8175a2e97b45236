//! The two-way wire views (`wire::{ipv4, ipv6, ipv6_ext, icmp, udp}`):
//! every setter round-trips through its getter and leaves the other
//! fields alone, `fill_checksum` agrees with etherparse, and checked
//! construction refuses short or inconsistent buffers.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::checksum;
use crate::wire::icmp::{self, IcmpPacket};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::ipv6_ext::{Ipv6FragInfo, Ipv6FragmentHeader, FRAGMENT_HEADER_LEN};
use crate::wire::udp::{self, UdpDatagram};
use crate::wire::Error;
use etherparse::{Icmpv4Type, Icmpv6Type, Ipv4HeaderSlice, Ipv6HeaderSlice, UdpHeader};
use proptest::prelude::*;

/// The fields of an IPv4 header a test sets.
#[derive(Clone, Debug)]
struct V4Fields {
    opt_words: usize,
    dscp_ecn: u8,
    ident: u16,
    df: bool,
    mf: bool,
    frag_offset: u16,
    ttl: u8,
    protocol: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    payload_len: usize,
}

fn v4_fields() -> impl Strategy<Value = V4Fields> {
    (
        (0usize..=10, any::<u8>(), any::<u16>(), any::<bool>()),
        (any::<bool>(), 0u16..=0x1fff, any::<u8>(), any::<u8>()),
        (any::<[u8; 4]>(), any::<[u8; 4]>(), 0usize..64),
    )
        .prop_map(
            |((opt_words, dscp_ecn, ident, df), (mf, frag_offset, ttl, protocol), (s, d, n))| {
                V4Fields {
                    opt_words,
                    dscp_ecn,
                    ident,
                    df,
                    mf,
                    frag_offset,
                    ttl,
                    protocol,
                    src: s.into(),
                    dst: d.into(),
                    payload_len: n,
                }
            },
        )
}

/// A packet written field by field over `garbage` (options 0x01, NOP).
fn build_v4(f: &V4Fields, garbage: u8) -> Vec<u8> {
    let hlen = ipv4::HEADER_LEN + 4 * f.opt_words;
    let mut buf = vec![garbage; hlen + f.payload_len];
    let mut p = Ipv4Packet::new_unchecked(&mut buf);
    p.set_header_len(hlen);
    p.set_dscp_ecn(f.dscp_ecn);
    p.set_total_len((hlen + f.payload_len) as u16);
    p.set_ident(f.ident);
    p.set_flags_frag(0);
    p.set_dont_frag(f.df);
    p.set_more_frags(f.mf);
    p.set_frag_offset(f.frag_offset);
    p.set_ttl(f.ttl);
    p.set_protocol(f.protocol);
    p.set_src_addr(f.src);
    p.set_dst_addr(f.dst);
    p.options_mut().fill(1);
    p.fill_checksum();
    buf
}

proptest! {
    /// Setters then getters: every field reads back as written, whatever
    /// the buffer held before, and the packet passes `new_checked`.
    #[test]
    fn ipv4_setters_round_trip(f in v4_fields(), garbage in any::<u8>()) {
        let buf = build_v4(&f, garbage);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.version(), 4);
        prop_assert_eq!(p.header_len(), ipv4::HEADER_LEN + 4 * f.opt_words);
        prop_assert_eq!(p.dscp_ecn(), f.dscp_ecn);
        prop_assert_eq!(usize::from(p.total_len()), buf.len());
        prop_assert_eq!(p.ident(), f.ident);
        prop_assert_eq!(p.dont_frag(), f.df);
        prop_assert_eq!(p.more_frags(), f.mf);
        prop_assert_eq!(p.frag_offset(), f.frag_offset);
        prop_assert_eq!(p.is_fragment(), f.mf || f.frag_offset != 0);
        prop_assert_eq!(p.flags_frag() & 0x8000, 0);
        prop_assert_eq!((p.ttl(), p.protocol()), (f.ttl, f.protocol));
        prop_assert_eq!((p.src_addr(), p.dst_addr()), (f.src, f.dst));
        prop_assert_eq!(p.options().len(), 4 * f.opt_words);
        prop_assert_eq!(p.payload().len(), f.payload_len);
        prop_assert!(p.verify_checksum());
    }

    /// `fill_checksum` (options included) is etherparse's header checksum,
    /// and etherparse reads every field as the getters do.
    #[test]
    fn ipv4_fill_checksum_agrees_with_etherparse(f in v4_fields(), garbage in any::<u8>()) {
        let buf = build_v4(&f, garbage);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        let e = Ipv4HeaderSlice::from_slice(&buf).unwrap();
        prop_assert_eq!(p.checksum(), e.to_header().calc_header_checksum());
        prop_assert_eq!(p.checksum(), e.header_checksum());
        prop_assert_eq!(usize::from(e.ihl()) * 4, p.header_len());
        prop_assert_eq!(e.total_len(), p.total_len());
        prop_assert_eq!(e.identification(), p.ident());
        prop_assert_eq!((e.dont_fragment(), e.more_fragments()), (p.dont_frag(), p.more_frags()));
        prop_assert_eq!(e.fragments_offset().value(), p.frag_offset());
        prop_assert_eq!((e.ttl(), e.protocol().0), (p.ttl(), p.protocol()));
        prop_assert_eq!((e.source_addr(), e.destination_addr()), (p.src_addr(), p.dst_addr()));
        prop_assert_eq!(e.options(), p.options());
    }

    /// Each flag setter changes its own bit only: the reserved bit, the
    /// other flag and the offset stay as they were.
    #[test]
    fn ipv4_flag_setters_keep_the_rest_of_the_word(word in any::<u16>(), df in any::<bool>(),
                                                   mf in any::<bool>(), off in any::<u16>()) {
        let mut h = [0u8; ipv4::HEADER_LEN];
        let mut p = Ipv4Packet::new_unchecked(&mut h);
        p.set_flags_frag(word);
        p.set_dont_frag(df);
        prop_assert_eq!(p.flags_frag() & !ipv4::FLAG_DF, word & !ipv4::FLAG_DF);
        p.set_more_frags(mf);
        p.set_frag_offset(off);
        prop_assert_eq!(p.flags_frag() & 0x8000, word & 0x8000);
        prop_assert_eq!((p.dont_frag(), p.more_frags()), (df, mf));
        prop_assert_eq!(p.frag_offset(), off & ipv4::FRAG_OFFSET_MASK);
    }

    /// IPv6: setters then getters, and etherparse reads the same header.
    #[test]
    fn ipv6_setters_round_trip_and_agree_with_etherparse(
        tc in any::<u8>(), label in any::<u32>(), next in any::<u8>(), hops in any::<u8>(),
        s in any::<[u8; 16]>(), d in any::<[u8; 16]>(), n in 0usize..64, garbage in any::<u8>(),
    ) {
        let mut buf = vec![garbage; ipv6::HEADER_LEN + n];
        let mut p = Ipv6Packet::new_unchecked(&mut buf);
        p.set_version(6);
        p.set_traffic_class(tc);
        p.set_flow_label(label);
        p.set_payload_len(n as u16);
        p.set_next_header(next);
        p.set_hop_limit(hops);
        p.set_src_addr(s.into());
        p.set_dst_addr(d.into());
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!((p.version(), p.traffic_class()), (6, tc));
        prop_assert_eq!(p.flow_label(), label & 0xf_ffff);
        prop_assert_eq!((p.payload_len(), p.next_header(), p.hop_limit()), (n as u16, next, hops));
        prop_assert_eq!((p.src_addr(), p.dst_addr()), (Ipv6Addr::from(s), Ipv6Addr::from(d)));
        prop_assert_eq!((p.payload().len(), p.total_len()), (n, buf.len()));
        let e = Ipv6HeaderSlice::from_slice(&buf).unwrap();
        prop_assert_eq!(e.traffic_class(), tc);
        prop_assert_eq!(e.flow_label().value(), label & 0xf_ffff);
        prop_assert_eq!((e.payload_length(), e.next_header().0, e.hop_limit()), (n as u16, next, hops));
        prop_assert_eq!(e.source(), s);
        prop_assert_eq!(e.destination(), d);
    }

    /// The Fragment header: emit, setters and getters agree; the setters
    /// keep the reserved bits. (etherparse 0.16 misreads this header's
    /// offset and M bits, JulianSchmid/etherparse#150, so the layout is
    /// checked against RFC 8200 §4.5 by hand.)
    #[test]
    fn ipv6_fragment_header_round_trips(next in any::<u8>(), off in 0u16..0x2000,
                                        more in any::<bool>(), ident in any::<u32>(),
                                        reserved in 0u8..4) {
        let mut h = [0xffu8; FRAGMENT_HEADER_LEN];
        let info = Ipv6FragInfo { offset: off, more, ident, next };
        info.emit(&mut h);
        let word = (off << 3) | u16::from(more);
        let id = ident.to_be_bytes();
        let w = word.to_be_bytes();
        prop_assert_eq!(h, [next, 0, w[0], w[1], id[0], id[1], id[2], id[3]]);
        prop_assert_eq!(Ipv6FragmentHeader::new_checked(&h[..]).unwrap().info(), info);
        h[3] |= reserved << 1;
        let mut v = Ipv6FragmentHeader::new_unchecked(&mut h);
        v.set_frag_offset(off ^ 0x155);
        v.set_more_frags(!more);
        prop_assert_eq!((v.frag_offset(), v.more_frags()), (off ^ 0x155, !more));
        prop_assert_eq!((h[3] >> 1) & 3, reserved);
    }

    /// ICMP: `fill_checksum_v4` is etherparse's ICMPv4 checksum of the
    /// same message, and the setters read back.
    #[test]
    fn icmpv4_fill_checksum_agrees_with_etherparse(t in any::<u8>(), code in any::<u8>(),
                                                   mtu in any::<u16>(),
                                                   body in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut msg = vec![0xaa; icmp::HEADER_LEN];
        msg.extend_from_slice(&body);
        let mut m = IcmpPacket::new_checked(&mut msg[..]).unwrap();
        m.set_msg_type(t);
        m.set_code(code);
        m.set_rest_of_header(0);
        m.set_next_hop_mtu(mtu);
        m.fill_checksum_v4();
        prop_assert_eq!((m.msg_type(), m.code(), m.next_hop_mtu()), (t, code, mtu));
        prop_assert_eq!(m.rest_of_header(), u32::from(mtu));
        prop_assert_eq!(m.payload(), &body[..]);
        prop_assert!(m.verify_checksum_v4());
        let bytes5to8 = [0, 0, (mtu >> 8) as u8, mtu as u8];
        let oracle = Icmpv4Type::Unknown { type_u8: t, code_u8: code, bytes5to8 }.calc_checksum(&body);
        prop_assert_eq!(m.checksum(), oracle);
    }

    /// ICMPv6: `fill_checksum_v6` is etherparse's, pseudo-header included.
    #[test]
    fn icmpv6_fill_checksum_agrees_with_etherparse(t in any::<u8>(), mtu in any::<u32>(),
                                                   s in any::<[u8; 16]>(), d in any::<[u8; 16]>(),
                                                   body in proptest::collection::vec(any::<u8>(), 0..1300)) {
        let mut msg = vec![0x55; icmp::HEADER_LEN];
        msg.extend_from_slice(&body);
        let (src, dst) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
        let mut m = IcmpPacket::new_checked(&mut msg[..]).unwrap();
        m.set_msg_type(t);
        m.set_code(0);
        m.set_mtu(mtu);
        m.fill_checksum_v6(&src, &dst);
        prop_assert_eq!(m.mtu(), mtu);
        prop_assert!(m.verify_checksum_v6(&src, &dst));
        let oracle = Icmpv6Type::Unknown { type_u8: t, code_u8: 0, bytes5to8: mtu.to_be_bytes() }
            .calc_checksum(s, d, &body)
            .unwrap();
        prop_assert_eq!(m.checksum(), oracle);
    }

    /// UDP: both `fill_checksum`s are etherparse's (0 sent as 0xffff).
    #[test]
    fn udp_fill_checksum_agrees_with_etherparse(sp in any::<u16>(), dp in any::<u16>(),
                                                s6 in any::<[u8; 16]>(), d6 in any::<[u8; 16]>(),
                                                s4 in any::<[u8; 4]>(), d4 in any::<[u8; 4]>(),
                                                body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut dgram = vec![0u8; udp::HEADER_LEN];
        dgram.extend_from_slice(&body);
        let len = dgram.len() as u16;
        let mut u = UdpDatagram::new_checked(&mut dgram[..]).unwrap();
        u.set_src_port(sp);
        u.set_dst_port(dp);
        u.set_len(len);
        prop_assert_eq!((u.src_port(), u.dst_port(), u.len()), (sp, dp, len));
        let header = UdpHeader { source_port: sp, destination_port: dp, length: len, checksum: 0 };
        u.fill_checksum_v6(&s6.into(), &d6.into());
        prop_assert_eq!(u.checksum(), header.calc_checksum_ipv6_raw(s6, d6, &body).unwrap());
        prop_assert!(u.verify_checksum_v6(&s6.into(), &d6.into()));
        u.fill_checksum_v4(s4.into(), d4.into());
        prop_assert_eq!(u.checksum(), header.calc_checksum_ipv4_raw(s4, d4, &body).unwrap());
        prop_assert!(u.verify_checksum_v4(s4.into(), d4.into()));
    }

    /// Checked construction over arbitrary bytes: accepted exactly when the
    /// header is whole and consistent with the buffer, and then every
    /// length the view reports lies inside the buffer.
    #[test]
    fn checked_construction_accepts_only_consistent_buffers(
        mut buf in proptest::collection::vec(any::<u8>(), 0..80), v4 in any::<bool>(),
    ) {
        if let Some(b) = buf.first_mut() {
            *b = (*b & 0x0f) | if v4 { 0x40 } else { 0x60 };
        }
        if v4 {
            let ihl = buf.first().map(|b| usize::from(b & 0x0f) * 4);
            let total = buf.get(2..4).map(|t| usize::from(u16::from_be_bytes([t[0], t[1]])));
            let want = match (buf.len() >= 20, ihl, total) {
                (false, ..) => Err(Error::Truncated),
                (true, Some(ihl), _) if ihl < 20 => Err(Error::Malformed),
                (true, Some(ihl), Some(total)) if total < ihl => Err(Error::Malformed),
                (true, _, Some(total)) if total > buf.len() => Err(Error::Truncated),
                _ => Ok(()),
            };
            let got = Ipv4Packet::new_checked(&buf[..]);
            prop_assert_eq!(got.as_ref().map(|_| ()).map_err(|e| *e), want);
            if let Ok(p) = got {
                prop_assert_eq!(p.header_len() + p.payload().len(), usize::from(p.total_len()));
                prop_assert!(usize::from(p.total_len()) <= buf.len());
            }
        } else {
            let plen = buf.get(4..6).map(|t| usize::from(u16::from_be_bytes([t[0], t[1]])));
            let want = match plen {
                Some(plen) if buf.len() >= 40 && 40 + plen <= buf.len() => Ok(()),
                _ => Err(Error::Truncated),
            };
            let got = Ipv6Packet::new_checked(&buf[..]);
            prop_assert_eq!(got.as_ref().map(|_| ()).map_err(|e| *e), want);
            if let Ok(p) = got {
                prop_assert_eq!(p.payload().len(), usize::from(p.payload_len()));
            }
        }
    }
}

/// Every cut short of a header is refused by the checked constructors;
/// the header-only ones accept a quote whose announced length runs past
/// the buffer, the whole-packet ones do not.
#[test]
fn checked_construction_refuses_short_buffers() {
    let f = V4Fields {
        opt_words: 1,
        dscp_ecn: 0,
        ident: 1,
        df: true,
        mf: false,
        frag_offset: 0,
        ttl: 64,
        protocol: 17,
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        payload_len: 12,
    };
    let v4 = build_v4(&f, 0);
    for cut in 0..v4.len() {
        assert_eq!(
            Ipv4Packet::new_checked(&v4[..cut]).err(),
            Some(Error::Truncated),
            "{cut}"
        );
        let header_only = Ipv4Packet::new_checked_header(&v4[..cut]);
        assert_eq!(header_only.is_ok(), cut >= ipv4::HEADER_LEN, "{cut}");
        if let Ok(q) = header_only {
            assert_eq!((q.src_addr(), q.protocol()), (f.src, 17));
            assert!(q.payload().is_empty(), "the quote ends before the packet");
        }
    }
    let mut v6 = vec![0u8; ipv6::HEADER_LEN + 8];
    let mut p = Ipv6Packet::new_unchecked(&mut v6);
    p.set_version(6);
    p.set_payload_len(8);
    for cut in 0..v6.len() {
        assert_eq!(
            Ipv6Packet::new_checked(&v6[..cut]).err(),
            Some(Error::Truncated),
            "{cut}"
        );
        assert_eq!(
            Ipv6Packet::new_checked_header(&v6[..cut]).is_ok(),
            cut >= ipv6::HEADER_LEN,
            "{cut}"
        );
    }
    for cut in 0..8 {
        let b = [0u8; 8];
        assert_eq!(
            IcmpPacket::new_checked(&b[..cut]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            UdpDatagram::new_checked(&b[..cut]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&b[..cut]).err(),
            Some(Error::Truncated)
        );
    }
}

/// Inconsistent headers: a wrong version, an IHL below 5, a total length
/// below the IHL are malformed; the header-only check refuses the first
/// two as well.
#[test]
fn checked_construction_refuses_inconsistent_headers() {
    let mut v4 = [0u8; 40];
    let mut p = Ipv4Packet::new_unchecked(&mut v4);
    p.set_header_len(24);
    p.set_total_len(40);
    assert!(Ipv4Packet::new_checked(&v4[..]).is_ok());
    let mut bad_version = v4;
    bad_version[0] = 0x66;
    let mut short_ihl = v4;
    short_ihl[0] = 0x44;
    for bad in [bad_version, short_ihl] {
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).err(),
            Some(Error::Malformed)
        );
        assert_eq!(
            Ipv4Packet::new_checked_header(&bad[..]).err(),
            Some(Error::Malformed)
        );
    }
    let mut total_in_header = v4;
    Ipv4Packet::new_unchecked(&mut total_in_header).set_total_len(23);
    assert_eq!(
        Ipv4Packet::new_checked(&total_in_header[..]).err(),
        Some(Error::Malformed)
    );
    let mut v6 = [0u8; 40];
    v6[0] = 0x40;
    assert_eq!(
        Ipv6Packet::new_checked(&v6[..]).err(),
        Some(Error::Malformed)
    );
    assert_eq!(
        Ipv6Packet::new_checked_header(&v6[..]).err(),
        Some(Error::Malformed)
    );
}

/// A view over a buffer too short for its header (only `new_unchecked`
/// makes one) reads zeros and writes nothing, never panics.
#[test]
fn unchecked_views_over_short_buffers_are_inert() {
    let mut short = [0xffu8; 7];
    let mut p = Ipv4Packet::new_unchecked(&mut short);
    p.set_ttl(1);
    p.set_dont_frag(true);
    p.fill_checksum();
    assert_eq!((p.ttl(), p.total_len(), p.header_len()), (0, 0, 0));
    assert!(p.payload().is_empty() && p.options().is_empty());
    let mut q = Ipv6Packet::new_unchecked(&mut short);
    q.set_flow_label(5);
    assert_eq!(q.flow_label(), 0);
    let mut m = IcmpPacket::new_unchecked(&mut short);
    m.fill_checksum_v4();
    assert_eq!(m.checksum(), 0);
    assert_eq!(short, [0xff; 7]);
}

/// The checksum helpers against a header summed by hand: combining the
/// sums of a header's parts gives the whole header's.
#[test]
fn combine_and_fold_agree_with_a_whole_sum() {
    let f = V4Fields {
        opt_words: 2,
        dscp_ecn: 0xb8,
        ident: 0xbeef,
        df: false,
        mf: true,
        frag_offset: 3,
        ttl: 9,
        protocol: 6,
        src: Ipv4Addr::new(198, 51, 100, 1),
        dst: Ipv4Addr::new(203, 0, 113, 9),
        payload_len: 0,
    };
    let buf = build_v4(&f, 0);
    let (a, b) = buf.split_at(ipv4::HEADER_LEN);
    let whole = checksum::ones_complement_sum(&buf);
    assert_eq!(
        checksum::combine(&[
            checksum::ones_complement_sum(a),
            checksum::ones_complement_sum(b)
        ]),
        whole
    );
    assert_eq!(whole, 0xffff, "a filled header sums to all ones");
}
