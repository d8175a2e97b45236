//! AP-3 with ZA-3 through the real `sluice` binary on `net_pcap`: the MTU
//! a too-big packet is answered with is that of the path to the backend
//! the packet was delivered to, not to the backend the no-zone table
//! names for its hash.
//!
//! Clients in zone "a" reach backend A, the zone's only backend, out of
//! the 9000-byte client port; the no-zone table also holds backend B,
//! behind a 1500-byte port. Every client flow of the zone goes to A (one
//! 8000-byte datagram arrives whole), so every 9000-byte datagram with DF
//! is answered with A's MTU, 9000, whichever backend the no-zone table
//! names for its hash (B for about half of the flows).

mod common;

use std::path::Path;

use common::*;
use etherparse::{
    icmpv4::DestUnreachableHeader, Icmpv4Type, NetSlice, SlicedPacket, TransportSlice,
};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKEND_PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const A_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
const B_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x20];
const VIP: [u8; 4] = [203, 0, 113, 10];
const CLIENT: [u8; 4] = [10, 1, 0, 1];
const DF: u16 = 0x4000;
/// Client flows (source ports) that send a too-big datagram.
const FLOWS: u16 = 16;

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

/// A client frame carrying a UDP datagram to the VIP's port 53 whose IP
/// packet is `ip_len` bytes, with DF.
fn client_frame(sport: u16, ip_len: usize) -> Vec<u8> {
    let udp_len = ip_len - 20;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&(ip_len as u16).to_be_bytes());
    ip.extend_from_slice(&sport.to_be_bytes());
    ip.extend_from_slice(&DF.to_be_bytes());
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

fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"[dataplane]
{eal}
workers = 1

[[dataplane.port]]
name = "clients"
device = "net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"
mtu = 9000

[[dataplane.port]]
name = "backends"
device = "net_pcap1,rx_pcap={d}/empty.pcap,tx_pcap={d}/out-backends.pcap"
mac = "{backend_port_mac}"
address = "198.51.100.1/24"
mtu = 1500

[[zone]]
name = "a"
client_subnets = ["10.1.0.0/24"]

[[backend_service]]
name = "web"
encapsulation = "l2"
zonal_affinity = {{ spillover = "ZONAL_AFFINITY_STAY_WITHIN_ZONE" }}
backend = [
  {{ address = "192.0.2.10", mac = "{a_mac}", zone = "a" }},
  {{ address = "198.51.100.10", mac = "{b_mac}" }},
]

[[forwarding_rule]]
name = "web-dns"
vip = "203.0.113.10"
protocol = "UDP"
ports = "53"
backend_service = "web"
"#,
        eal = eal_args(256),
        port_mac = mac_str(&PORT_MAC),
        backend_port_mac = mac_str(&BACKEND_PORT_MAC),
        a_mac = mac_str(&A_MAC),
        b_mac = mac_str(&B_MAC),
    )
}

fn advertised_mtu(reply: &[u8]) -> u16 {
    assert_eq!(reply[..6], CLIENT_MAC, "back to the client");
    assert_eq!(reply[6..12], PORT_MAC, "out of the port it came in on");
    let p = SlicedPacket::from_ethernet(reply).expect("reply parses");
    let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Icmpv4(icmp))) = (&p.net, &p.transport)
    else {
        panic!("not an ICMP reply: {p:?}")
    };
    assert_eq!(ip.header().source(), VIP);
    assert_eq!(ip.header().destination(), CLIENT);
    match icmp.icmp_type() {
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu,
        }) => next_hop_mtu,
        other => panic!("not fragmentation-needed: {other:?}"),
    }
}

/// AP-3, ZA-3: too-big packets of the zone's flows are answered with the
/// MTU of the zone backend's path.
#[test]
fn ap_3_za_3_frag_needed_quotes_the_delivered_backends_path() {
    let dir = tempdir("golden-mtu-backend");
    let mut frames = vec![client_frame(2999, 8000)];
    frames.extend((3000..3000 + FLOWS).map(|sport| client_frame(sport, 9001)));
    write_pcap(&dir.join("in.pcap"), &frames);
    write_pcap(&dir.join("empty.pcap"), &[]);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();
    let metrics = run_sluice(&cfg, &dir);

    let out = read_pcap(&dir.join("out.pcap"));
    let (to_a, replies): (Vec<_>, Vec<_>) = out.iter().partition(|f| f[..6] == A_MAC);
    assert_eq!(to_a.len(), 1, "the 8000-byte datagram reaches A\n{metrics}");
    assert_eq!(to_a[0][14..], frames[0][14..], "whole, as DSR leaves it");
    assert!(
        read_pcap(&dir.join("out-backends.pcap")).is_empty(),
        "nothing for B: every flow of the zone goes to A"
    );
    let mtus: Vec<u16> = replies.iter().map(|r| advertised_mtu(r)).collect();
    assert_eq!(mtus, vec![9000; usize::from(FLOWS)], "{metrics}");
}
