//! `fragments = "follow_flow"` through the real `sluice` binary on
//! `net_pcap` (layer-2 DSR, so the backend is read from the destination
//! MAC): the fragments of a UDP datagram go to the backend of their flow's
//! unfragmented packets, their first fragment before or after the later
//! one, over IPv4 and IPv6; without the option they go where the 3-tuple
//! hashes (HA-2). Hostile cases are counted drops: a later fragment whose
//! first never comes (`fragment_unplaced`), a first fragment again with
//! other ports (`fragment_overlap`), and a flood of datagram
//! identifications stays within the table.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::*;
use etherparse::PacketBuilder;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x07];
const CLIENT4: [u8; 4] = [198, 51, 100, 7];
const VIP4: [u8; 4] = [203, 0, 113, 10];
const CLIENT6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
const VIP6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];
const FLOWS: u16 = 24;

fn config(dir: &std::path::Path, fragments: &str) -> String {
    let backends: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "{{ address = \"192.0.2.{}\", mac = \"02:00:00:00:00:{:02x}\" }}",
                10 + i,
                0x10 + i
            )
        })
        .collect();
    let backends6: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "{{ address = \"2001:db8:2::{}\", mac = \"02:00:00:00:00:{:02x}\" }}",
                10 + i,
                0x10 + i
            )
        })
        .collect();
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/out.pcap"
mac = "{mac}"
address = "192.0.2.1/24"
address6 = "2001:db8:2::1/64"

[[backend_service]]
name = "dns"
{fragments}
backend = [ {b4} ]

[[backend_service]]
name = "dns6"
{fragments}
backend = [ {b6} ]

[[forwarding_rule]]
name = "dns"
vip = "203.0.113.10"
protocol = "UDP"
backend_service = "dns"

[[forwarding_rule]]
name = "dns6"
vip = "2001:db8:1::10"
protocol = "UDP"
backend_service = "dns6"
"#,
        d = dir.display(),
        mac = mac_str(&PORT_MAC),
        b4 = backends.join(", "),
        b6 = backends6.join(", "),
    )
}

/// The UDP header and 32 bytes of payload of flow `sport`.
fn udp_bytes(sport: u16, v6: bool) -> Vec<u8> {
    let mut whole = Vec::new();
    let b = PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC);
    if v6 {
        b.ipv6(CLIENT6, VIP6, 64)
            .udp(sport, 53)
            .write(&mut whole, &[7u8; 32])
            .unwrap();
        whole[54..].to_vec()
    } else {
        b.ipv4(CLIENT4, VIP4, 64)
            .udp(sport, 53)
            .write(&mut whole, &[7u8; 32])
            .unwrap();
        whole[34..].to_vec()
    }
}

/// An unfragmented datagram of flow `sport`.
fn whole(sport: u16, v6: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC);
    if v6 {
        b.ipv6(CLIENT6, VIP6, 64)
            .udp(sport, 53)
            .write(&mut out, &[1u8; 8])
            .unwrap();
    } else {
        b.ipv4(CLIENT4, VIP4, 64)
            .udp(sport, 53)
            .write(&mut out, &[1u8; 8])
            .unwrap();
    }
    out
}

/// The fragments of one datagram of flow `sport` with identification
/// `id`: the first (UDP header and 16 bytes) and the later (16 bytes).
fn fragments(sport: u16, id: u32, v6: bool) -> [Vec<u8>; 2] {
    let l4 = udp_bytes(sport, v6);
    let (first, later) = l4.split_at(24);
    [
        fragment(id, 0, first, true, v6),
        fragment(id, 24, later, false, v6),
    ]
}

fn fragment(id: u32, offset: usize, body: &[u8], more: bool, v6: bool) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&PORT_MAC);
    f.extend_from_slice(&CLIENT_MAC);
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&((8 + body.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[44, 64]);
        f.extend_from_slice(&CLIENT6);
        f.extend_from_slice(&VIP6);
        let off = ((offset / 8) as u16) << 3 | u16::from(more);
        f.extend_from_slice(&[17, 0]);
        f.extend_from_slice(&off.to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
    } else {
        f.extend_from_slice(&[0x08, 0x00]);
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&((20 + body.len()) as u16).to_be_bytes());
        h.extend_from_slice(&(id as u16).to_be_bytes());
        let flags = ((offset / 8) as u16) | if more { 0x2000 } else { 0 };
        h.extend_from_slice(&flags.to_be_bytes());
        h.extend_from_slice(&[64, 17, 0, 0]);
        h.extend_from_slice(&CLIENT4);
        h.extend_from_slice(&VIP4);
        let sum = ipv4_header_checksum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&h);
    }
    f.extend_from_slice(body);
    f
}

/// What identifies an output frame's datagram: the source port of an
/// unfragmented one, or the identification of a fragment; and the
/// backend it went to (its destination MAC's last byte).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
enum Seen {
    Whole { v6: bool, sport: u16 },
    Fragment { v6: bool, id: u32 },
}

fn seen(frame: &[u8]) -> (Seen, u8) {
    let backend = frame[5];
    let v6 = frame[12..14] == [0x86, 0xdd];
    let s = if v6 {
        if frame[20] == 44 {
            Seen::Fragment {
                v6,
                id: u32::from_be_bytes(frame[58..62].try_into().unwrap()),
            }
        } else {
            Seen::Whole {
                v6,
                sport: u16::from_be_bytes([frame[54], frame[55]]),
            }
        }
    } else {
        let flags = u16::from_be_bytes([frame[20], frame[21]]);
        if flags & 0x3fff != 0 {
            Seen::Fragment {
                v6,
                id: u32::from(u16::from_be_bytes([frame[18], frame[19]])),
            }
        } else {
            Seen::Whole {
                v6,
                sport: u16::from_be_bytes([frame[34], frame[35]]),
            }
        }
    };
    (s, backend)
}

/// Each flow: its unfragmented datagram, then a fragmented one whose
/// later fragment comes first for every other flow; IPv4 and IPv6.
fn traffic() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for v6 in [false, true] {
        for i in 0..FLOWS {
            let sport = 40_000 + i;
            frames.push(whole(sport, v6));
            let [first, later] = fragments(sport, 1000 + u32::from(i), v6);
            if i % 2 == 0 {
                frames.extend([first, later]);
            } else {
                frames.extend([later, first]);
            }
        }
    }
    frames
}

/// Per flow (v6, index): the backend of its unfragmented datagram and the
/// backends its fragments went to.
fn backends(out: &[Vec<u8>]) -> BTreeMap<(bool, u16), (u8, Vec<u8>)> {
    let mut flows: BTreeMap<(bool, u16), (u8, Vec<u8>)> = BTreeMap::new();
    for f in out {
        match seen(f) {
            (Seen::Whole { v6, sport }, b) => flows.entry((v6, sport - 40_000)).or_default().0 = b,
            (Seen::Fragment { v6, id }, b) => {
                flows.entry((v6, (id - 1000) as u16)).or_default().1.push(b)
            }
        }
    }
    flows
}

/// HA-2 opt-out: with `follow_flow` every fragment goes with its flow, in
/// order or not, IPv4 and IPv6; without it, where the 3-tuple hashes.
#[test]
fn ha_2_fragments_follow_their_flow_when_asked() {
    let dir = tempdir("follow_flow");
    let r = replay(
        &dir,
        &config(&dir, "fragments = \"follow_flow\""),
        &traffic(),
        &[],
    );
    let get = |k: &str| r.metrics.get(k).copied().unwrap_or(0);
    assert_eq!(r.out.len(), traffic().len(), "every packet forwarded");
    let flows = backends(&r.out);
    assert_eq!(flows.len(), 2 * usize::from(FLOWS));
    let mut spread = std::collections::BTreeSet::new();
    for (flow, (whole, frags)) in &flows {
        assert_eq!(frags.len(), 2, "{flow:?}");
        assert!(
            frags.iter().all(|b| b == whole),
            "{flow:?}: fragments to {frags:?}, the flow to {whole}"
        );
        spread.insert(*whole);
    }
    assert!(
        spread.len() > 1,
        "the flows spread over backends: {spread:?}"
    );
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"fragment_unplaced\"}"),
        0
    );

    // Without the option: each family's fragments all at one backend (the
    // 3-tuple's), some not where their flow goes.
    let dir = tempdir("three_tuple");
    let r = replay(&dir, &config(&dir, ""), &traffic(), &[]);
    let flows = backends(&r.out);
    for v6 in [false, true] {
        let family: Vec<_> = flows.iter().filter(|((f6, _), _)| *f6 == v6).collect();
        let frag_backends: std::collections::BTreeSet<u8> = family
            .iter()
            .flat_map(|(_, (_, f))| f.iter().copied())
            .collect();
        assert_eq!(frag_backends.len(), 1, "v6 {v6}: {frag_backends:?}");
        assert!(
            family.iter().any(|(_, (w, f))| f.iter().any(|b| b != w)),
            "v6 {v6}: some flow's fragments leave its backend under HA-2"
        );
    }
}

/// A later fragment whose first never comes, a first fragment again with
/// other ports, and a flood of identifications: counted, bounded, the
/// rest forwarded.
#[test]
fn hostile_fragments_are_counted_drops() {
    let dir = tempdir("follow_flow_hostile");
    let mut frames = Vec::new();
    let [_, orphan] = fragments(41_000, 7, false);
    frames.push(orphan);
    let [first, later] = fragments(41_001, 8, false);
    let [overlap, _] = fragments(41_002, 8, false);
    frames.extend([first, overlap, later]);
    for id in 0..10_000u32 {
        let [first, _] = fragments(42_000 + (id % 1000) as u16, 100_000 + id, true);
        frames.push(first);
    }
    let r = replay(
        &dir,
        &config(&dir, "fragments = \"follow_flow\""),
        &frames,
        &[],
    );
    let get = |k: &str| r.metrics.get(k).copied().unwrap_or(0);
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"fragment_unplaced\"}"),
        1
    );
    assert_eq!(
        get("sluice_dropped_packets_total{reason=\"fragment_overlap\"}"),
        1
    );
    let drops = sum_metrics(&r.metrics, "sluice_dropped_packets_total");
    assert_eq!(drops, 2, "only those two");
    assert_eq!(r.out.len(), frames.len() - 2);
    let ip: IpAddr = CLIENT4.into();
    assert!(ip.is_ipv4());
}

/// With two workers, each datagram's fragments arriving on different
/// queues: software steering brings them to the one worker owning the
/// address pair, whose table learns the ports; they still follow their
/// flow (AP-1 with HA-2's opt-out).
#[test]
fn ha_2_fragments_follow_their_flow_on_two_workers() {
    let dir = tempdir("follow_flow_two");
    let d = dir.display().to_string();
    let cfg = config(&dir, "fragments = \"follow_flow\"")
        .replace("workers = 1", "workers = 2")
        .replace(
            &format!("rx_pcap={d}/in.pcap,tx_pcap={d}/out.pcap"),
            &format!("rx_pcap={d}/a.pcap,rx_pcap={d}/b.pcap,tx_pcap={d}/c.pcap,tx_pcap={d}/d.pcap"),
        );
    let frames = traffic();
    let (a, b): (Vec<_>, Vec<_>) = frames
        .iter()
        .cloned()
        .enumerate()
        .partition(|(k, _)| k % 2 == 0);
    let strip = |v: Vec<(usize, Vec<u8>)>| v.into_iter().map(|(_, f)| f).collect::<Vec<_>>();
    write_pcap(&dir.join("a.pcap"), &strip(a));
    write_pcap(&dir.join("b.pcap"), &strip(b));
    let path = dir.join("sluice.toml");
    std::fs::write(&path, cfg).unwrap();
    let m = parse_metrics(&run_sluice(&path, &dir));
    let mut out = read_pcap(&dir.join("c.pcap"));
    out.extend(read_pcap(&dir.join("d.pcap")));
    let drops = sum_metrics(&m, "sluice_dropped_packets_total");
    assert_eq!(
        out.len(),
        frames.len(),
        "every packet forwarded ({drops} dropped)"
    );
    assert!(m["sluice_steered_packets_total{direction=\"out\"}"] > 0);
    for (flow, (whole, frags)) in backends(&out) {
        assert_eq!(frags.len(), 2, "{flow:?}");
        assert!(
            frags.iter().all(|b| *b == whole),
            "{flow:?}: fragments to {frags:?}, the flow to {whole}"
        );
    }
}
