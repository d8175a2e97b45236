//! Jumbo frames through the real `sluice` binary on `net_pcap` (AP-3): a port of MTU 9000 receives 9000-byte client packets
//! whole — the mbuf data room follows the largest port MTU — instead of
//! dropping them as `multi_segment`.
//!
//! - `jumbo_gre`: one port, MTU 9000, GRE. A client packet that fits the
//!   tunnel (8976 bytes) leaves as one 9000-byte outer packet; a 9000-byte
//!   one without DF leaves as outer IPv4 fragments ≤ 9000 reassembling to
//!   the GRE packet; with DF it is answered with fragmentation-needed
//!   quoting MTU 8976 (9000 minus the tunnel).
//! - `jumbo_to_1500_path`: client port MTU 9000, backend port MTU 1500,
//!   `l2` (DSR). A 9000-byte client packet without DF is fragmented as a
//!   router would (≤ 1500 each, identification kept); with DF the client
//!   gets fragmentation-needed with MTU 1500 out of the port it came in on.
//!
//! Each output is compared byte for byte with `golden/jumbo-*/` (set
//! `SLUICE_BLESS=1` to rewrite) and checked independently with
//! `etherparse`; RX = TX + Σ drops − (fragments created − packets
//! fragmented) and no `multi_segment` drop.

mod common;

use std::path::Path;

use common::*;
use etherparse::{
    icmpv4::DestUnreachableHeader, Icmpv4Type, IpNumber, NetSlice, SlicedPacket, TransportSlice,
};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKEND_PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const VIP: [u8; 4] = [203, 0, 113, 10];
const CLIENT: [u8; 4] = [10, 1, 0, 1];
const BACKENDS: [([u8; 4], [u8; 6]); 2] = [
    ([192, 0, 2, 10], [0x02, 0, 0, 0, 0, 0x10]),
    ([192, 0, 2, 11], [0x02, 0, 0, 0, 0, 0x11]),
];
const BACKENDS_B: [([u8; 4], [u8; 6]); 2] = [
    ([198, 51, 100, 10], [0x02, 0, 0, 0, 0, 0x20]),
    ([198, 51, 100, 11], [0x02, 0, 0, 0, 0, 0x21]),
];
const DF: u16 = 0x4000;
const GRE_OVERHEAD: usize = 20 + 4;

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A client frame carrying a UDP datagram to the VIP whose IP packet is
/// `ip_len` bytes, with identification `id` and flags `flags`.
fn client_frame(sport: u16, ip_len: usize, id: u16, flags: u16) -> Vec<u8> {
    let udp_len = ip_len - 20;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(ip_len as u16).to_be_bytes());
    ip.extend_from_slice(&id.to_be_bytes());
    ip.extend_from_slice(&flags.to_be_bytes());
    ip.extend_from_slice(&[64, 17, 0, 0]);
    ip.extend_from_slice(&CLIENT);
    ip.extend_from_slice(&VIP);
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&sport.to_be_bytes());
    ip.extend_from_slice(&53u16.to_be_bytes());
    ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend((0..udp_len - 8).map(|i| (i % 251) as u8));
    let mut f = PORT_MAC.to_vec();
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f
}

fn backends_toml(list: &[([u8; 4], [u8; 6])]) -> String {
    list.iter()
        .map(|(a, m)| {
            format!(
                "{{ address = \"{}.{}.{}.{}\", mac = \"{}\" }}",
                a[0],
                a[1],
                a[2],
                a[3],
                mac_str(m)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn service_toml(encap: &str, backends: &str) -> String {
    format!(
        r#"
[[backend_service]]
name = "web"
encapsulation = "{encap}"
backend = [ {backends} ]

[[forwarding_rule]]
name = "web-dns"
vip = "203.0.113.10"
protocol = "UDP"
ports = "53"
backend_service = "web"
"#
    )
}

/// What one input frame must become.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Forwarded whole to a backend.
    Whole,
    /// Sent as this many IP fragments to a backend.
    Fragments(usize),
    /// Answered with fragmentation-needed quoting this MTU.
    FragNeeded(u16),
}

struct Case {
    name: &'static str,
    encap: &'static str,
    /// Egress MTU towards the backends.
    mtu: u16,
    input: Vec<(Vec<u8>, Want)>,
}

fn gre_case() -> Case {
    let fits = 9000 - GRE_OVERHEAD;
    Case {
        name: "jumbo-gre",
        encap: "gre",
        mtu: 9000,
        input: vec![
            (client_frame(1000, fits, 1, 0), Want::Whole),
            (client_frame(1001, fits, 2, DF), Want::Whole),
            (client_frame(1002, 4000, 3, DF), Want::Whole),
            (client_frame(1003, 9000, 4, 0), Want::Fragments(2)),
            (client_frame(1004, 9000, 5, DF), Want::FragNeeded(9000 - 24)),
        ],
    }
}

fn to_1500_case() -> Case {
    Case {
        name: "jumbo-to-1500",
        encap: "l2",
        mtu: 1500,
        input: vec![
            (client_frame(2000, 1500, 1, DF), Want::Whole),
            // 8980 payload bytes in 1480-byte pieces: 7 fragments.
            (client_frame(2001, 9000, 7, 0), Want::Fragments(7)),
            (client_frame(2002, 9000, 8, DF), Want::FragNeeded(1500)),
            (client_frame(2003, 3000, 9, 0), Want::Fragments(3)),
        ],
    }
}

fn config(case: &Case, dir: &Path) -> String {
    let d = dir.display();
    // Clients (and, for GRE, backends) behind a jumbo port that reads
    // `in.pcap` and writes `out.pcap`.
    let jumbo_port = |name: &str| {
        format!(
            r#"
[[dataplane.port]]
name = "{name}"
device = "net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/out.pcap"
mac = "{mac}"
address = "192.0.2.1/24"
mtu = 9000
"#,
            mac = mac_str(&PORT_MAC),
        )
    };
    let header = format!("\n[dataplane]\n{}\nworkers = 1\n", eal_args(256));
    if case.name == "jumbo-gre" {
        format!(
            "{header}{}{}",
            jumbo_port("uplink"),
            service_toml(case.encap, &backends_toml(&BACKENDS))
        )
    } else {
        format!(
            r#"{header}{clients}
[[dataplane.port]]
name = "backends"
device = "net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out-backends.pcap"
mac = "{mac_b}"
address = "198.51.100.1/24"
mtu = 1500
{svc}"#,
            clients = jumbo_port("clients"),
            mac_b = mac_str(&BACKEND_PORT_MAC),
            svc = service_toml(case.encap, &backends_toml(&BACKENDS_B)),
        )
    }
}

/// The backend (index) a frame is addressed to, checked: source MAC is the
/// egress port's, and for GRE the outer header is the tunnel's. Returns
/// the IP packet the backend receives (for GRE: the outer payload after
/// the GRE header, of an unfragmented outer packet).
fn backend_of(case: &Case, frame: &[u8]) -> usize {
    let (list, src_mac) = if case.encap == "gre" {
        (&BACKENDS, PORT_MAC)
    } else {
        (&BACKENDS_B, BACKEND_PORT_MAC)
    };
    assert_eq!(frame[6..12], src_mac, "source MAC is the egress port's");
    let b = list
        .iter()
        .position(|(_, m)| frame[..6] == m[..])
        .unwrap_or_else(|| panic!("destination MAC {:02x?} is no backend", &frame[..6]));
    if case.encap == "gre" {
        let Ok(SlicedPacket {
            net: Some(NetSlice::Ipv4(outer)),
            ..
        }) = SlicedPacket::from_ethernet(frame)
        else {
            panic!("GRE outer must be IPv4")
        };
        let h = outer.header();
        assert_eq!(h.protocol(), IpNumber::GRE);
        assert_eq!(h.source(), [192, 0, 2, 1]);
        assert_eq!(h.destination(), list[b].0);
        let hh = h.to_header();
        assert_eq!(hh.header_checksum, hh.calc_header_checksum());
    }
    b
}

/// IPv4 header fields of a frame's (outer) packet: (id, MF, offset bytes,
/// total length, header length).
fn ip4_fields(frame: &[u8]) -> (u16, bool, usize, usize, usize) {
    let ip = &frame[14..];
    let ff = u16::from_be_bytes([ip[6], ip[7]]);
    (
        u16::from_be_bytes([ip[4], ip[5]]),
        ff & 0x2000 != 0,
        usize::from(ff & 0x1fff) * 8,
        usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        usize::from(ip[0] & 0xf) * 4,
    )
}

/// What the backend must end up with: the client's IP packet, inside GRE
/// (GRE header + packet) or as is.
fn delivered(case: &Case, input: &[u8]) -> Vec<u8> {
    match case.encap {
        "gre" => {
            let mut v = vec![0, 0, 0x08, 0x00];
            v.extend_from_slice(&input[14..]);
            v
        }
        _ => input[14 + 20..].to_vec(),
    }
}

fn check_fragments(case: &Case, input: &[u8], train: &[Vec<u8>]) {
    let backend = backend_of(case, &train[0]);
    let (id0, ..) = ip4_fields(&train[0]);
    if case.encap == "l2" {
        assert_eq!(
            id0,
            ip4_fields(input).0,
            "a router keeps the identification"
        );
    }
    let mut payload = Vec::new();
    for (i, f) in train.iter().enumerate() {
        assert_eq!(backend_of(case, f), backend, "one datagram, one backend");
        let (id, mf, off, total, hl) = ip4_fields(f);
        assert_eq!(id, id0);
        assert!(
            total <= usize::from(case.mtu),
            "fragment {i}: {total} > MTU"
        );
        assert_eq!(f.len(), 14 + total);
        assert_eq!(off, payload.len(), "fragment {i} continues the datagram");
        assert_eq!(mf, i + 1 < train.len(), "MF on all but the last");
        assert_eq!(csum(&f[14..14 + hl]), 0, "fragment {i} header checksum");
        payload.extend_from_slice(&f[14 + hl..]);
    }
    assert_eq!(
        payload,
        delivered(case, input),
        "reassembles to the original"
    );
}

fn check_reply(input: &[u8], out: &[u8], mtu: u16) {
    assert_eq!(out[..6], CLIENT_MAC, "back to the client");
    assert_eq!(out[6..12], PORT_MAC, "out of the port it came in on");
    let p = SlicedPacket::from_ethernet(out).expect("reply parses");
    let (Some(NetSlice::Ipv4(r)), Some(TransportSlice::Icmpv4(icmp))) = (&p.net, &p.transport)
    else {
        panic!("not an ICMP reply: {p:?}")
    };
    assert_eq!(r.header().source(), VIP);
    assert_eq!(r.header().destination(), CLIENT);
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: mtu
        })
    );
    assert_eq!(csum(&out[34..]), 0, "ICMP checksum");
    assert_eq!(out.len(), 14 + 576);
    assert_eq!(out[42..], input[14..14 + 548], "quote");
}

fn run(case: &Case) {
    let dir = tempdir(&format!("golden-{}", case.name));
    let frames: Vec<Vec<u8>> = case.input.iter().map(|(f, _)| f.clone()).collect();
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(case, &dir)).unwrap();
    let metrics = run_sluice(&cfg, &dir);
    let m = parse_metrics(&metrics);
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"multi_segment\"}"),
        0,
        "jumbo frames arrive in one segment\n{metrics}"
    );

    let out = read_pcap(&dir.join("out.pcap"));
    let to_backends = if case.encap == "gre" {
        out.clone()
    } else {
        read_pcap(&dir.join("out-backends.pcap"))
    };
    let replies: Vec<&Vec<u8>> = out.iter().filter(|f| f[..6] == CLIENT_MAC).collect();
    let mut fwd = to_backends.iter().filter(|f| f[..6] != CLIENT_MAC);
    let mut replies = replies.into_iter();
    let mut want_replies = 0;
    let mut want_frames = 0;
    for (input, want) in &case.input {
        match *want {
            Want::Whole => {
                let f = fwd.next().expect("a forwarded frame");
                backend_of(case, f);
                let (_, mf, off, total, hl) = ip4_fields(f);
                assert!(!mf && off == 0 && total <= usize::from(case.mtu));
                assert_eq!(f[14 + hl..], delivered(case, input)[..], "delivered whole");
                if case.encap == "l2" {
                    assert_eq!(f[14..], input[14..], "DSR leaves the packet as it is");
                }
                want_frames += 1;
            }
            Want::Fragments(n) => {
                let train: Vec<Vec<u8>> = fwd.by_ref().take(n).cloned().collect();
                assert_eq!(train.len(), n, "{n} fragments");
                check_fragments(case, input, &train);
                want_frames += n;
            }
            Want::FragNeeded(mtu) => {
                check_reply(input, replies.next().expect("an ICMP reply"), mtu);
                want_replies += 1;
            }
        }
    }
    assert!(fwd.next().is_none(), "nothing else sent to backends");
    assert!(replies.next().is_none(), "no other reply");
    let mut all = to_backends.clone();
    if case.encap != "gre" {
        all.extend(out.iter().cloned());
    }
    assert_eq!(all.len(), want_frames + want_replies);
    compare_with_expected(case.name, &all);

    let rx = sum_metrics(&m, "sluice_port_rx_packets_total");
    let tx = sum_metrics(&m, "sluice_port_tx_packets_total");
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(rx, case.input.len() as u64, "{metrics}");
    assert_eq!(tx, all.len() as u64, "{metrics}");
    assert_eq!(rx + extra_fragments(&m), tx + drops, "{metrics}");
}

/// AP-3: 9000-byte frames through GRE on a 9000 MTU port.
#[test]
fn jumbo_gre() {
    run(&gre_case());
}

/// AP-3: jumbo client packets towards a 1500-byte backend
/// path: fragmented without DF, fragmentation-needed with DF.
#[test]
fn jumbo_to_1500_path() {
    run(&to_1500_case());
}
