//! The checked-in corpus of malformed packets (`fuzz/seeds/malformed/`,
//! also the fuzzers' seeds): truncations at every header boundary, bad
//! IHL, IPv4 total length beyond the frame or below the header, IPv6
//! extension-header chains too long / out of order / overrunning, zero-length
//! options, GRE with bad flags, bad TCP data offset, garbage ICMP quotes.
//!
//! Every file goes through `process`: no panic, and a packet that is not
//! forwarded is untouched; the generated cases also name their exact drop
//! reason. `SLUICE_BLESS=1` rewrites the directory from the generator.

mod common;

use std::path::PathBuf;

use common::state::*;
use common::*;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::DropReason;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/malformed")
}

/// (file name, frame, the reason it must be dropped under; None: any
/// verdict, as long as nothing panics).
fn generated() -> Vec<(String, Vec<u8>, Option<DropReason>)> {
    use DropReason::*;
    let mut v: Vec<(String, Vec<u8>, Option<DropReason>)> = Vec::new();
    let tcp4 = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        TCP,
        DF,
        &tcp(4000, 80, SYN, b"x"),
    );
    let full4 = eth(&[QINQ, VLAN], ETH_IPV4, &tcp4);
    // Truncations at every header boundary: MACs, each tag, ethertype,
    // mid IPv4, IPv4 end, mid TCP.
    for (cut, reason) in [
        (0, TruncatedEthernet),
        (6, TruncatedEthernet),
        (12, TruncatedEthernet),
        (16, TruncatedEthernet),
        (20, TruncatedEthernet),
        (22, BadIpv4Header),
        (32, BadIpv4Header),
        (42, BadIpv4Header),
    ] {
        v.push((format!("trunc4-{cut}"), full4[..cut].to_vec(), Some(reason)));
    }
    // Truncated frames whose IPv4 total length still claims the whole packet.
    let mut short = full4[..50].to_vec();
    short[22 + 2..22 + 4].copy_from_slice(&60u16.to_be_bytes());
    v.push((
        "ipv4-total-len-beyond-frame".into(),
        short,
        Some(BadIpv4Header),
    ));
    // TCP header cut inside a correctly sized IPv4 packet.
    let cut_tcp = ipv4(
        v4("198.51.100.7"),
        v4(VIP4),
        TCP,
        DF,
        &tcp(4000, 80, SYN, b"")[..10],
    );
    v.push((
        "tcp-truncated".into(),
        eth(&[], ETH_IPV4, &cut_tcp),
        Some(BadL4Header),
    ));
    let mut doff = tcp(4000, 80, SYN, b"");
    doff[12] = 0x40; // data offset 4 < 5
    let bad_doff = ipv4(v4("198.51.100.7"), v4(VIP4), TCP, DF, &doff);
    v.push((
        "tcp-data-offset-4".into(),
        eth(&[], ETH_IPV4, &bad_doff),
        Some(BadL4Header),
    ));
    // Bad IHL: below 5, and above the total length.
    for (name, byte0) in [
        ("ihl-4", 0x44u8),
        ("ihl-0", 0x40),
        ("ihl-15", 0x4f),
        ("version-5", 0x55),
    ] {
        let mut p = tcp4.clone();
        p[0] = byte0;
        let mut f = eth(&[], ETH_IPV4, &p);
        f.truncate(14 + 40);
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        v.push((name.into(), f, Some(BadIpv4Header)));
    }
    let mut below = tcp4.clone();
    below[2..4].copy_from_slice(&10u16.to_be_bytes());
    v.push((
        "ipv4-total-len-below-ihl".into(),
        eth(&[], ETH_IPV4, &below),
        Some(BadIpv4Header),
    ));
    // Zero-length and overrunning IPv4 options: passed on untouched (a
    // forwarder does not judge options), never a panic.
    for (name, opts) in [
        ("opt-zero-len", [0x44u8, 0, 0, 0]),
        ("opt-overrun", [0x83, 0xff, 0, 0]),
    ] {
        let mut p = vec![0x46, 0, 0, 0, 0, 1, 0x40, 0, 64, UDP, 0, 0];
        p.extend_from_slice(&v4("198.51.100.7").octets());
        p.extend_from_slice(&v4(VIP4).octets());
        p.extend_from_slice(&opts);
        p.extend_from_slice(&udp(5000, 53, b"q"));
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        v.push((name.into(), eth(&[], ETH_IPV4, &p), None));
    }
    // IPv6 extension headers: a chain longer than the walk allows (a
    // "loop" of destination options), hop-by-hop not first, a header
    // running past the payload, two fragment headers.
    let mut chain = udp(5000, 53, b"q");
    let mut next = UDP;
    for _ in 0..9 {
        chain = [opts6(next), chain].concat();
        next = 60;
    }
    let f = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8::7"), v6(VIP6), next, &chain),
    );
    v.push(("ipv6-ext-loop".into(), f, Some(BadIpv6ExtensionHeader)));
    let hbh_late = [opts6(0), opts6(UDP), udp(5000, 53, b"q")].concat();
    let f = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8::7"), v6(VIP6), 60, &hbh_late),
    );
    v.push(("ipv6-hbh-not-first".into(), f, Some(BadIpv6ExtensionHeader)));
    let mut overrun = opts6(UDP);
    overrun[1] = 200;
    let f = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8::7"), v6(VIP6), 60, &overrun),
    );
    v.push(("ipv6-ext-overrun".into(), f, Some(BadIpv6ExtensionHeader)));
    let two_frags = [
        frag6(44, 0, true, 1),
        frag6(UDP, 0, true, 1),
        udp(1, 2, b""),
    ]
    .concat();
    let f = eth(
        &[],
        ETH_IPV6,
        &ipv6(v6("2001:db8::7"), v6(VIP6), 44, &two_frags),
    );
    v.push((
        "ipv6-two-fragment-headers".into(),
        f,
        Some(BadIpv6ExtensionHeader),
    ));
    let mut p6 = ipv6(v6("2001:db8::7"), v6(VIP6), UDP, &udp(1, 2, b"abc"));
    p6[4..6].copy_from_slice(&500u16.to_be_bytes());
    v.push((
        "ipv6-payload-len-beyond-frame".into(),
        eth(&[], ETH_IPV6, &p6),
        Some(BadIpv6Header),
    ));
    // GRE with bad flags (version 7, routing, every optional field) to an
    // L3_DEFAULT VIP: balanced as an opaque 3-tuple packet.
    for (name, flags) in [
        ("gre-version-7", [0x00u8, 0x07]),
        ("gre-all-flags", [0xff, 0xff]),
    ] {
        let mut g = flags.to_vec();
        g.extend_from_slice(&[0x08, 0x00]);
        let f = eth(&[], ETH_IPV6, &ipv6(v6("2001:db8::7"), v6(VIP6), 47, &g));
        v.push((name.into(), f, None));
    }
    // ICMP errors with garbage or cut quotes: not steered, no panic.
    for (name, quote) in [
        ("icmp6-quote-garbage", vec![0xffu8; 12]),
        (
            "icmp6-quote-cut",
            ipv6(v6(VIP6), v6("2001:db8::7"), TCP, &[])[..30].to_vec(),
        ),
    ] {
        let mut m = vec![2u8, 0, 0, 0, 0, 0, 5, 0];
        m.extend_from_slice(&quote);
        let f = eth(
            &[],
            ETH_IPV6,
            &ipv6(v6("2001:db8::9"), v6(VIP6), ICMPV6, &m),
        );
        v.push((name.into(), f, None));
    }
    v.push((
        "vlan-tag-only".into(),
        eth(&[VLAN, VLAN, VLAN], 0x0800, &[]),
        None,
    ));
    v
}

fn run(frame: &[u8]) -> Verdict {
    let mut pkt = VecPacket::new(frame);
    let v = process(&mut pkt, 0, &state(), &mut PipelineCtx::default());
    if !matches!(
        v,
        Verdict::Forward { .. } | Verdict::Fragment { .. } | Verdict::Reply
    ) {
        assert_eq!(pkt.data(), frame, "not forwarded: untouched");
    }
    v
}

/// Hostile input: the generated cases drop under their named
/// reason, and every file of the checked-in corpus goes through without a
/// panic.
#[test]
fn malformed_corpus_is_dropped_under_named_reasons() {
    let cases = generated();
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(dir()).unwrap();
        for (name, frame, _) in &cases {
            std::fs::write(dir().join(format!("{name}.bin")), frame).unwrap();
        }
    }
    for (name, frame, want) in &cases {
        let got = run(frame);
        if let Some(reason) = want {
            assert_eq!(got, Verdict::Drop(*reason), "{name}");
        }
        let on_disk = std::fs::read(dir().join(format!("{name}.bin")))
            .unwrap_or_else(|e| panic!("{name}: {e} (run with SLUICE_BLESS=1)"));
        assert_eq!(
            &on_disk, frame,
            "{name}: checked-in file differs from the generator"
        );
    }
    let mut n = 0;
    for entry in std::fs::read_dir(dir()).unwrap() {
        let frame = std::fs::read(entry.unwrap().path()).unwrap();
        let _ = run(&frame);
        n += 1;
    }
    assert!(n >= cases.len());
}
