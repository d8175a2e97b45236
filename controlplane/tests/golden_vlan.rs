//! Trunk ports through the real `sluice` binary on
//! `net_pcap`: a port with `vlan = 100` receives client traffic tagged 100
//! and every frame it sends carries the tag — L2 DSR rewrites, GRE outer
//! frames (prebuilt outer headers), the ICMP fragmentation-needed reply to
//! an oversize DF packet (AP-3) and the outer IPv4 fragments of an
//! oversize packet without DF (AP-3). Frames of another VLAN, untagged
//! frames and frames whose outer tag is 802.1ad are dropped under
//! `wrong_vlan`. The output is compared byte for byte with
//! `golden/vlan/expected.pcap` (`SLUICE_BLESS=1` rewrites it) and checked
//! independently by an `etherparse` oracle; RX + extra fragments = TX + Σ
//! drops exactly.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use etherparse::{Icmpv4Type, NetSlice, SlicedPacket, VlanSlice};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const PORT4: [u8; 4] = [192, 0, 2, 1];
const MTU: u16 = 1400;
const VLAN: u16 = 100;
/// TCP 80, L2 DSR.
const VIP_DSR: [u8; 4] = [203, 0, 113, 10];
/// Every protocol, GRE.
const VIP_GRE: [u8; 4] = [203, 0, 113, 20];
const DSR_BACKENDS: [(&str, u8); 3] = [
    ("192.0.2.10", 0x10),
    ("192.0.2.11", 0x11),
    ("192.0.2.12", 0x12),
];
const GRE_BACKENDS: [(&str, u8); 3] = [
    ("192.0.2.20", 0x20),
    ("192.0.2.21", 0x21),
    ("192.0.2.22", 0x22),
];
/// Outer IPv4 + GRE.
const GRE_OVERHEAD: usize = 24;
const TCP: u8 = 6;
const UDP: u8 = 17;

#[path = "golden_protocols/frames.rs"]
#[allow(dead_code)]
mod frames;
use frames::*;

fn backend_list(list: &[(&str, u8)]) -> String {
    list.iter()
        .map(|(a, m)| format!("{{ address = \"{a}\", mac = \"02:00:00:00:00:{m:02x}\" }}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn config(dir: &Path) -> String {
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "trunk"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"
mtu = {MTU}
vlan = {VLAN}

[[backend_service]]
name = "dsr"
encapsulation = "l2"
backend = [ {dsr} ]

[[backend_service]]
name = "gre"
encapsulation = "gre"
backend = [ {gre} ]

[[forwarding_rule]]
name = "web-dsr"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "dsr"

[[forwarding_rule]]
name = "all-gre"
vip = "203.0.113.20"
protocol = "L3_DEFAULT"
ports = "ALL"
backend_service = "gre"
"#,
        dir = dir.display(),
        port_mac = mac_str(&PORT_MAC),
        dsr = backend_list(&DSR_BACKENDS),
        gre = backend_list(&GRE_BACKENDS),
    )
}

/// A frame from the client tagged `vid` (TCI as given: priority bits too).
fn tagged(tci: u16, ip: &[u8]) -> Vec<u8> {
    vlan_tagged(eth(&[], 0x0800, ip), tci)
}

/// What the appliance must do with an input frame.
#[derive(Clone, Debug, PartialEq)]
enum Want {
    Dsr,
    Gre,
    /// ICMP fragmentation-needed with this MTU, back to the client.
    FragNeeded(u16),
    /// Outer IPv4 fragments of the GRE packet.
    GreFragments,
    WrongVlan,
}

fn input() -> Vec<(Vec<u8>, Want)> {
    let mut v = Vec::new();
    for i in 0..24u16 {
        let src = [10, 1, 0, i as u8 + 1];
        let ip = ip4(src, VIP_DSR, TCP, i, DF, &tcp(20_000 + i, 80, 10));
        // Priority bits (PCP 5) do not change the VLAN.
        let tci = if i == 3 { 0xa000 | VLAN } else { VLAN };
        v.push((tagged(tci, &ip), Want::Dsr));
        let ip = ip4(src, VIP_GRE, UDP, i, 0, &udp(30_000 + i, 53, 20));
        v.push((tagged(VLAN, &ip), Want::Gre));
    }
    let flow = ip4([10, 9, 0, 1], VIP_DSR, TCP, 7, DF, &tcp(4242, 80, 10));
    // Another VLAN, no tag, an 802.1ad outer tag of the same ID.
    v.push((tagged(200, &flow), Want::WrongVlan));
    v.push((eth(&[], 0x0800, &flow), Want::WrongVlan));
    let mut qinq = eth(&[], 0x0800, &flow);
    qinq.splice(12..12, [0x88, 0xa8, 0, VLAN as u8, 0x81, 0x00, 0, 7]);
    v.push((qinq, Want::WrongVlan));
    // AP-3: too big for the tunnel with DF → frag-needed; without DF →
    // fragments of the outer packet.
    let big = ip4([10, 9, 0, 2], VIP_GRE, TCP, 8, DF, &tcp(5555, 443, 1360));
    v.push((
        tagged(VLAN, &big),
        Want::FragNeeded(MTU - GRE_OVERHEAD as u16),
    ));
    let big = ip4([10, 9, 0, 3], VIP_GRE, UDP, 9, 0, &udp(5556, 53, 1500));
    v.push((tagged(VLAN, &big), Want::GreFragments));
    v
}

/// The frame's 802.1Q VLAN ID, as `etherparse` reads it; panics unless the
/// frame has exactly one tag.
fn vlan_of(frame: &[u8]) -> u16 {
    let p = SlicedPacket::from_ethernet(frame).expect("output parses");
    match p.vlan {
        Some(VlanSlice::SingleVlan(s)) => s.vlan_identifier().value(),
        other => panic!("output must carry one 802.1Q tag: {other:?}"),
    }
}

/// The outer IPv4 header and payload of a tagged frame.
fn outer_ipv4(frame: &[u8]) -> (etherparse::Ipv4Header, Vec<u8>) {
    let p = SlicedPacket::from_ethernet(frame).expect("output parses");
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("outer must be IPv4")
    };
    let h = ip.header().to_header();
    assert_eq!(
        h.header_checksum,
        h.calc_header_checksum(),
        "outer checksum"
    );
    (h, ip.payload().payload.to_vec())
}

fn backend_by_mac(list: &[(&str, u8)], frame: &[u8]) -> usize {
    list.iter()
        .position(|(_, m)| frame[..6] == [0x02, 0, 0, 0, 0, *m])
        .unwrap_or_else(|| panic!("destination {:02x?} is no backend", &frame[..6]))
}

/// GRE to `backend`: outer header from the port's address, the inner IP
/// packet returned.
fn check_gre(h: &etherparse::Ipv4Header, payload: &[u8], backend: usize) -> Vec<u8> {
    assert_eq!(h.protocol, etherparse::IpNumber::GRE);
    assert_eq!(h.source, PORT4);
    let want: std::net::Ipv4Addr = GRE_BACKENDS[backend].0.parse().unwrap();
    assert_eq!(h.destination, want.octets());
    assert_eq!(&payload[..4], &[0, 0, 0x08, 0x00], "GRE carrying IPv4");
    payload[4..].to_vec()
}

#[test]
fn trunk_port_sends_every_frame_tagged_and_drops_other_vlans() {
    let dir = tempdir("golden-vlan");
    let cases = input();
    let frames: Vec<Vec<u8>> = cases.iter().map(|(f, _)| f.clone()).collect();
    let Replay {
        metrics: m,
        out: output,
        ..
    } = replay(&dir, &config(&dir), &frames, &[]);

    let mut outs = output.iter();
    let mut dsr_flows: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for (input, want) in &cases {
        let ip = &input[18..];
        match want {
            Want::WrongVlan => continue,
            Want::Dsr => {
                let out = outs.next().expect("a DSR frame");
                assert_eq!(vlan_of(out), VLAN);
                assert_eq!(out[12..16], [0x81, 0x00, 0, VLAN as u8], "PCP 0");
                assert_eq!(out[6..12], PORT_MAC);
                let b = backend_by_mac(&DSR_BACKENDS, out);
                assert_eq!(&out[18..], ip, "IP packet untouched");
                dsr_flows.insert(ip[12..16].to_vec(), b);
            }
            Want::Gre => {
                let out = outs.next().expect("a GRE frame");
                assert_eq!(vlan_of(out), VLAN);
                assert_eq!(out[6..12], PORT_MAC);
                let b = backend_by_mac(&GRE_BACKENDS, out);
                let (h, payload) = outer_ipv4(out);
                assert_eq!(check_gre(&h, &payload, b), ip, "inner untouched");
                assert_eq!(out.len(), 18 + 20 + 4 + ip.len());
            }
            Want::FragNeeded(mtu) => {
                let out = outs.next().expect("an ICMP reply");
                assert_eq!(vlan_of(out), VLAN, "the reply leaves on the VLAN");
                assert_eq!(out[..6], CLIENT_MAC, "back to the client");
                assert_eq!(out[6..12], PORT_MAC);
                let p = SlicedPacket::from_ethernet(out).unwrap();
                let Some(etherparse::TransportSlice::Icmpv4(icmp)) = &p.transport else {
                    panic!("ICMPv4 reply")
                };
                match icmp.icmp_type() {
                    Icmpv4Type::DestinationUnreachable(
                        etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                            next_hop_mtu,
                        },
                    ) => assert_eq!(next_hop_mtu, *mtu),
                    other => panic!("frag-needed, not {other:?}"),
                }
                let (h, _) = outer_ipv4(out);
                assert_eq!(h.source, VIP_GRE, "from the VIP");
                assert_eq!(h.destination, ip[12..16], "to the client");
            }
            Want::GreFragments => {
                let mut whole = Vec::new();
                let mut backend = None;
                loop {
                    let out = outs.next().expect("a fragment");
                    assert_eq!(vlan_of(out), VLAN, "every fragment is tagged");
                    let b = backend_by_mac(&GRE_BACKENDS, out);
                    assert_eq!(*backend.get_or_insert(b), b, "one backend");
                    let (h, payload) = outer_ipv4(out);
                    assert!(usize::from(h.total_len) <= usize::from(MTU), "≤ MTU");
                    assert_eq!(usize::from(h.fragment_offset.byte_offset()), whole.len());
                    whole.extend_from_slice(&payload);
                    if !h.more_fragments {
                        let inner = check_gre(&h, &whole, b);
                        assert_eq!(inner, ip, "reassembles to the GRE packet");
                        break;
                    }
                }
            }
        }
    }
    assert!(outs.next().is_none(), "no frame beyond the expected ones");
    assert!(
        dsr_flows
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1,
        "DSR spread over backends: {dsr_flows:?}"
    );
    compare_with_expected("vlan", &output);

    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let wrong = cases.iter().filter(|(_, w)| *w == Want::WrongVlan).count();
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"wrong_vlan\"}"),
        wrong as u64,
        "{m:?}"
    );
    let rx = get("sluice_port_rx_packets_total{port=\"trunk\"}");
    let tx = get("sluice_port_tx_packets_total{port=\"trunk\"}");
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(rx, cases.len() as u64, "{m:?}");
    assert_eq!(tx, output.len() as u64, "{m:?}");
    assert_eq!(drops, wrong as u64, "only the other VLANs dropped\n{m:?}");
    assert_eq!(rx + extra_fragments(&m), tx + drops, "{m:?}");
}

/// ICMP echo request (id 7, seq 1) from `src` to `dst`.
fn echo_request(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0, 0, 7, 0, 1];
    icmp.extend_from_slice(b"sluice trunk port");
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    ip4(src, dst, 1, 1, 0, &icmp)
}

/// The exception path of a trunk port (AP-4): ARP and ping to the port's
/// address, tagged 100, reach the kernel untagged on the TAP (which has no
/// VLAN interface: a tagged frame would go unanswered), and the kernel's
/// answers leave the port tagged 100. An ARP request on VLAN 200 is
/// dropped as `wrong_vlan`, not punted. Run in a private network
/// namespace (`unshare -n`, as the TAP tests in `limits.rs`).
#[test]
fn trunk_port_exception_path_is_untagged_on_the_tap_and_tagged_on_the_wire() {
    let dir = tempdir("golden-vlan-tap");
    let client = [192, 0, 2, 99];
    let frames = vec![
        vlan_tagged(arp_request(client, PORT4), VLAN),
        vlan_tagged(arp_request(client, PORT4), 200),
        tagged(VLAN, &echo_request(client, PORT4)),
    ];
    write_pcap(&dir.join("in.pcap"), &frames);
    let cfg = dir.join("sluice.toml");
    let text = config(&dir).replace(
        &format!("vlan = {VLAN}\n"),
        &format!("vlan = {VLAN}\ntap = \"slvlan-t\"\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    let dump = dir.join("metrics.txt");
    let out = std::process::Command::new("unshare")
        .arg("-n")
        .arg(sluice_bin())
        .args([
            "run",
            "--no-metrics-server",
            "--no-control-socket",
            "--exit-on-idle",
            "400",
            "--config",
        ])
        .arg(&cfg)
        .arg("--metrics-dump")
        .arg(&dump)
        .output()
        .expect("spawn unshare");
    assert!(
        out.status.success(),
        "sluice failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let output = read_pcap(&dir.join("out.pcap"));
    // Everything the kernel sent (its own IPv6 chatter included) is tagged.
    for f in &output {
        assert_eq!(vlan_of(f), VLAN, "injected frame {f:02x?}");
        assert_eq!(f[6..12], PORT_MAC, "from the port's MAC");
    }
    let arp_reply = output.iter().any(|f| {
        f[16..18] == [0x08, 0x06]
            && f[24..26] == [0, 2]
            && f[26..32] == PORT_MAC
            && f[32..36] == PORT4
            && f[42..46] == client
    });
    assert!(arp_reply, "ARP reply for {PORT4:?}, tagged: {output:02x?}");
    let echo_reply = output
        .iter()
        .any(|f| f[..6] == CLIENT_MAC && is_echo_reply(f, PORT4, client));
    assert!(echo_reply, "echo reply, tagged: {output:02x?}");
    assert_eq!(
        get("sluice_port_punted_packets_total{port=\"trunk\"}"),
        2,
        "ARP and ping punted"
    );
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"wrong_vlan\"}"),
        1,
        "VLAN 200 dropped"
    );
    assert_eq!(
        get("sluice_port_injected_packets_total{port=\"trunk\"}"),
        output.len() as u64
    );
}
