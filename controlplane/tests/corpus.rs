//! Hostile input through the real binary: every capture of the tcpdump test
//! corpus (`../shared/corpus/tcpdump` from the repository root) replayed
//! through `sluice run` on `net_pcap` — hundreds of protocols, truncated
//! and malformed packets written to break dissectors.
//!
//! The files are merged into one Ethernet pcap (one process, one port:
//! a port per file would need hundreds of vdevs): pcap and pcapng are read
//! with `pcap-file`'s slice parsers (no allocation driven by a length field
//! of the file), Ethernet captures are taken as they are, raw-IP, Linux
//! cooked (SLL) and BSD loopback captures get an Ethernet header, and files
//! of any other link type or that do not parse are skipped and counted.
//!
//! Asserts: the binary exits 0, and RX = TX + punted + Σ drops − extra
//! fragments (every packet accounted for under a named reason, FR-3 /
//! core/src/drop_reason.rs; AP-3 fragments counted once per packet).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::DataLink;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// `SLUICE_CORPUS` overrides the location (e.g. from a scratch worktree).
fn corpus_dir() -> PathBuf {
    match std::env::var_os("SLUICE_CORPUS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus/tcpdump"),
    }
}

/// The frame as Ethernet, or None for a link type we cannot convert.
fn to_ethernet(link: DataLink, data: &[u8]) -> Option<Vec<u8>> {
    let with_type = |ethertype: u16, payload: &[u8]| {
        let mut f = PORT_MAC.to_vec();
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0xcc]);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let by_version = |payload: &[u8]| match payload.first().map(|b| b >> 4) {
        Some(6) => with_type(0x86dd, payload),
        _ => with_type(0x0800, payload),
    };
    match link {
        DataLink::ETHERNET => Some(data.to_vec()),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(by_version(data)),
        DataLink::LINUX_SLL => {
            let proto = u16::from_be_bytes([*data.get(14)?, *data.get(15)?]);
            Some(with_type(proto, data.get(16..)?))
        }
        DataLink::NULL | DataLink::LOOP => Some(by_version(data.get(4..)?)),
        _ => None,
    }
}

/// Frames of one capture file, or None if it is not a readable capture
/// of a link type we convert. A file damaged part-way keeps what parsed.
fn frames_of(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    if let Ok((mut rest, parser)) = PcapParser::new(bytes) {
        let link = parser.header().datalink;
        let mut out = Vec::new();
        while !rest.is_empty() {
            let Ok((r, pkt)) = parser.next_packet(rest) else {
                break;
            };
            rest = r;
            out.push(to_ethernet(link, &pkt.data)?);
        }
        return (!out.is_empty()).then_some(out);
    }
    let (mut rest, mut parser) = PcapNgParser::new(bytes).ok()?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Ok((r, block)) = parser.next_block(rest) else {
            break;
        };
        rest = r;
        let (link, data) = match &block {
            Block::EnhancedPacket(p) => (
                parser.packet_interface(p).map(|i| i.linktype),
                p.data.to_vec(),
            ),
            Block::SimplePacket(p) => (
                parser.interfaces().first().map(|i| i.linktype),
                p.data.to_vec(),
            ),
            _ => continue,
        };
        if let Some(f) = to_ethernet(link?, &data) {
            out.push(f);
        }
    }
    (!out.is_empty()).then_some(out)
}

fn config(dir: &Path) -> String {
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--log-level=error"]
workers = 1
# Fewer mbufs than frames: every dropped packet's mbuf must go back to the
# pool (freed in bulk per burst) or the replay stalls short of the end.
mbufs = 2047

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"

[[backend_service]]
name = "any"
encapsulation = "gre"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "everything"
vip = "203.0.113.10"
protocol = "L3_DEFAULT"
ports = "ALL"
backend_service = "any"
"#,
        dir = dir.display()
    )
}

/// Hostile input: the whole tcpdump corpus through the binary.
#[test]
fn tcpdump_corpus_replays_without_crash_and_every_packet_is_accounted() {
    let dir = corpus_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("SKIP: corpus directory {dir:?} is absent");
        return;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let (mut used, mut skipped) = (0usize, 0usize);
    let mut frames = Vec::new();
    for p in &paths {
        let Ok(bytes) = std::fs::read(p) else {
            skipped += 1;
            continue;
        };
        match frames_of(&bytes) {
            Some(f) => {
                used += 1;
                // The pcap writer's snap length; longer frames are cut.
                frames.extend(f.into_iter().map(|mut f| {
                    f.truncate(65_535);
                    f
                }));
            }
            None => skipped += 1,
        }
    }
    eprintln!(
        "corpus: {} files, {used} replayed ({} frames), {skipped} skipped (unreadable or unconvertible link type)",
        paths.len(),
        frames.len()
    );
    assert!(used > 0, "no capture in {dir:?} could be read");

    let work = tempdir("corpus");
    write_pcap(&work.join("in.pcap"), &frames);
    let cfg = work.join("sluice.toml");
    std::fs::write(&cfg, config(&work)).unwrap();
    let metrics = run_sluice(&cfg, &work);
    let m = parse_metrics(&metrics);
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let rx = get("sluice_port_rx_packets_total{port=\"uplink\"}");
    let tx = get("sluice_port_tx_packets_total{port=\"uplink\"}");
    let punted = get("sluice_punted_packets_total");
    let drops: u64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("sluice_dropped_packets_total"))
        .map(|(_, v)| v)
        .sum();
    eprintln!("corpus: rx {rx} tx {tx} punted {punted} dropped {drops}");
    assert!(rx > 0, "{metrics}");
    assert_eq!(
        rx + extra_fragments(&m),
        tx + punted + drops,
        "RX = TX + punted + drops - extra fragments (AP-3)\n{metrics}"
    );
    // Every frame received, through a pool a quarter the capture's size:
    // no mbuf leaks on any drop path.
    assert!(frames.len() > 2 * 2047);
    assert_eq!(rx, frames.len() as u64, "mbufs recycled\n{metrics}");
}
