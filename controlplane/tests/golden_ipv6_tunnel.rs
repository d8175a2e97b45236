//! IPv6 through a tunnel whose MTU is below the IPv6 minimum, through the
//! real `sluice` binary on `net_pcap` (AP-3, RFC 2473
//! §7.1). Port MTU 1280, GRE to an IPv6 backend: the tunnel MTU is 1236.
//!
//! - An IPv6 client packet of 1237–1280 bytes leaves in an outer IPv6
//!   packet with a Fragment header, split into fragments ≤ 1280 that
//!   reassemble to GRE + the client's packet (before: Packet Too Big with
//!   MTU 1236, which hosts ignore, so the packet never got through).
//! - A larger one is answered with Packet Too Big of 1280, never less.
//! - One that fits the tunnel is sent whole.
//!
//! The output is compared byte for byte with
//! `golden/ipv6-small-tunnel/expected.pcap` (`SLUICE_BLESS=1` rewrites it)
//! and checked independently (etherparse, and a reassembler reading the
//! Fragment header as RFC 8200 §4.5 lays it out).

mod common;

use std::net::Ipv6Addr;

use common::*;
use etherparse::{Icmpv6Type, NetSlice, SlicedPacket, TransportSlice};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKEND_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const PORT6: &str = "2001:db8:b::1";
const BACKEND6: &str = "2001:db8:b::10";
const VIP6: &str = "2001:db8:10::10";
const CLIENT6: &str = "2001:db8:c::7";
const MTU: usize = 1280;
/// Outer IPv6 + GRE.
const TUNNEL_MTU: usize = MTU - 40 - 4;

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An IPv6 UDP datagram from the client to the VIP, `ip_len` bytes.
fn client_frame(sport: u16, ip_len: usize) -> Vec<u8> {
    let plen = ip_len - 40;
    let mut f = PORT_MAC.to_vec();
    f.extend_from_slice(&CLIENT_MAC);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&(plen as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&v6(CLIENT6).octets());
    f.extend_from_slice(&v6(VIP6).octets());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&(plen as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..plen - 8).map(|i| (i % 253) as u8));
    f
}

fn config(dir: &std::path::Path) -> String {
    format!(
        r#"
{dataplane}
address6 = "{PORT6}/64"
mtu = {MTU}

[[backend_service]]
name = "web"
encapsulation = "gre"
backend = [ {{ address = "{BACKEND6}", mac = "{bmac}" }} ]

[[forwarding_rule]]
name = "web-dns"
vip = "{VIP6}"
protocol = "UDP"
ports = "53"
backend_service = "web"
"#,
        dataplane = pcap_dataplane(dir, &PORT_MAC, "192.0.2.1/24", ""),
        bmac = mac_str(&BACKEND_MAC),
    )
}

/// The outer IPv6 packet's fixed fields towards the backend.
fn check_outer(frame: &[u8]) {
    assert_eq!(frame[..6], BACKEND_MAC);
    assert_eq!(frame[6..12], PORT_MAC);
    assert_eq!(frame[12..14], [0x86, 0xdd]);
    let ip = &frame[14..];
    assert!(ip.len() <= MTU, "outer packet ≤ MTU: {}", ip.len());
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[4], ip[5]])),
        ip.len() - 40
    );
    assert_eq!(ip[8..24], v6(PORT6).octets(), "outer source = port address");
    assert_eq!(ip[24..40], v6(BACKEND6).octets(), "outer destination");
}

/// Reassembles one outer datagram's fragments (in order): the payload
/// after the Fragment header, i.e. GRE + the client's packet.
fn reassemble(train: &[&Vec<u8>]) -> Vec<u8> {
    let mut payload = Vec::new();
    let mut ident = None;
    for (i, f) in train.iter().enumerate() {
        check_outer(f);
        let ip = &f[14..];
        assert_eq!(ip[6], 44, "Fragment header first");
        let fh = &ip[40..48];
        assert_eq!(fh[0], 47, "then GRE");
        let word = u16::from_be_bytes([fh[2], fh[3]]);
        let id = u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]);
        assert_eq!(*ident.get_or_insert(id), id, "one identification");
        assert_eq!(usize::from(word >> 3) * 8, payload.len(), "offset {i}");
        assert_eq!(word & 1 == 1, i + 1 < train.len(), "M on all but the last");
        if i + 1 < train.len() {
            assert_eq!((ip.len() - 48) % 8, 0, "8-byte multiples");
        }
        payload.extend_from_slice(&ip[48..]);
    }
    payload
}

fn gre_and(inner: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0x86, 0xdd];
    v.extend_from_slice(inner);
    v
}

/// RFC 2473 §7.1 through the binary.
#[test]
fn ipv6_through_a_tunnel_below_the_ipv6_minimum() {
    let dir = tempdir("golden-ipv6-small-tunnel");
    let whole = client_frame(1000, TUNNEL_MTU);
    let just_over = client_frame(1001, TUNNEL_MTU + 1);
    let minimum = client_frame(1002, 1280);
    let larger = client_frame(1003, 1400);
    let run = replay(
        &dir,
        &config(&dir),
        &[
            whole.clone(),
            just_over.clone(),
            minimum.clone(),
            larger.clone(),
        ],
        &[],
    );
    let (metrics, out) = (run.metrics, run.out);

    let to_backend: Vec<&Vec<u8>> = out.iter().filter(|f| f[..6] == BACKEND_MAC).collect();
    let replies: Vec<&Vec<u8>> = out.iter().filter(|f| f[..6] == CLIENT_MAC).collect();
    assert_eq!(
        to_backend.len(),
        1 + 2 + 2,
        "one whole packet, two 2-fragment trains"
    );
    assert_eq!(replies.len(), 1, "one Packet Too Big");

    // Fits the tunnel: one outer packet, no Fragment header.
    check_outer(to_backend[0]);
    assert_eq!(to_backend[0][14 + 6], 47, "GRE, unfragmented");
    assert_eq!(to_backend[0][14 + 40..], gre_and(&whole[14..])[..]);
    // ≤ 1280 but over the tunnel MTU: fragmented outer packets.
    assert_eq!(reassemble(&to_backend[1..3]), gre_and(&just_over[14..]));
    assert_eq!(reassemble(&to_backend[3..5]), gre_and(&minimum[14..]));

    // Larger: Packet Too Big of 1280 (the tunnel MTU, 1236, is below it).
    let p = SlicedPacket::from_ethernet(replies[0]).expect("reply parses");
    let (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Icmpv6(icmp))) = (&p.net, &p.transport)
    else {
        panic!("ICMPv6 reply: {p:?}")
    };
    assert_eq!(ip.header().source_addr(), v6(VIP6));
    assert_eq!(ip.header().destination_addr(), v6(CLIENT6));
    assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1280 });
    assert!(icmp.is_checksum_valid(ip.header().source(), ip.header().destination()));
    assert_eq!(
        replies[0][62..],
        larger[14..14 + replies[0].len() - 62],
        "quote"
    );

    compare_with_expected("ipv6-small-tunnel", &out);
    let get = |k: &str| metrics.get(k).copied().unwrap_or(0);
    assert_eq!(get("sluice_fragmented_packets_total"), 2);
    assert_eq!(get("sluice_fragments_created_total"), 4);
    let rx = sum_metrics(&metrics, "sluice_port_rx_packets_total");
    let tx = sum_metrics(&metrics, "sluice_port_tx_packets_total");
    let drops = sum_metrics(&metrics, "sluice_dropped_packets_total");
    assert_eq!((rx, tx, drops), (4, out.len() as u64, 0));
    assert_eq!(rx + extra_fragments(&metrics), tx + drops);
}
