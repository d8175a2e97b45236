//! Helpers for tests that run the real `sluice` binary on DPDK.
// Shared by integration tests, each its own binary crate: `pub` here
// means "for the test files", never reachable from outside the test.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};

mod admin_client;
mod config;
pub mod diagnostics;
mod http_target;
mod running;
#[allow(unused_imports)]
pub use admin_client::*;
#[allow(unused_imports)]
pub use config::*;
#[allow(unused_imports)]
pub use http_target::*;
#[allow(unused_imports)]
pub use running::*;

pub fn sluice_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

pub fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A fresh directory under the target dir (kept after the test for
/// inspection; overwritten by the next run).
pub fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn tcp_frame(
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(src, dst, 64)
        .tcp(sport, dport, seq, 65535)
        .ack(1)
        .write(&mut out, b"hello")
        .unwrap();
    out
}

pub fn udp_frame(
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], dst_mac)
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut out, payload)
        .unwrap();
    out
}

/// Inserts an 802.1Q tag after the MAC addresses.
pub fn vlan_tagged(frame: Vec<u8>, vid: u16) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&[0x81, 0x00]);
    out.extend_from_slice(&vid.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
    out
}

pub fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0xee, 0x01]);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0xee, 0x01]);
    f.extend_from_slice(&sender);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f.resize(60, 0);
    f
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::new(file).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = std::time::Duration::from_micros(i as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
}

pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut r = PcapReader::new(file).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// Runs `sluice run` until its input has been idle, returns the metrics dump.
pub fn run_sluice(cfg: &Path, dir: &Path) -> String {
    run_sluice_with(cfg, dir, &[]).1
}

/// [`run_sluice`] with extra arguments; returns (stderr, metrics dump).
pub fn run_sluice_with(cfg: &Path, dir: &Path, extra: &[&str]) -> (String, String) {
    let dump = dir.join("metrics.txt");
    let out = Command::new(sluice_bin())
        .args([
            "run",
            "--no-metrics-server",
            "--no-control-socket",
            "--exit-on-idle",
            "400",
            "--config",
        ])
        .arg(cfg)
        .arg("--metrics-dump")
        .arg(&dump)
        .args(extra)
        .output()
        .expect("spawn sluice");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "sluice failed: {}\nstdout: {}\nstderr: {stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
    );
    (stderr, std::fs::read_to_string(&dump).unwrap())
}

/// What a [`replay`] left behind.
pub struct Replay {
    /// `sluice run`'s standard error.
    pub stderr: String,
    /// The metrics dump, parsed by [`parse_metrics`].
    pub metrics: BTreeMap<String, u64>,
    /// The frames written to `dir/out.pcap`.
    pub out: Vec<Vec<u8>>,
}

/// Writes `frames` to `dir/in.pcap` and `config` to `dir/sluice.toml`,
/// then runs `sluice run` (with `extra` arguments) until its input has
/// been idle; the port reads and writes as [`pcap_uplink`]'s does.
pub fn replay(dir: &Path, config: &str, frames: &[Vec<u8>], extra: &[&str]) -> Replay {
    write_pcap(&dir.join("in.pcap"), frames);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config).unwrap();
    let (stderr, metrics) = run_sluice_with(&cfg, dir, extra);
    Replay {
        stderr,
        metrics: parse_metrics(&metrics),
        out: read_pcap(&dir.join("out.pcap")),
    }
}

/// Waits up to `limit` for `path` to appear (a socket a server creates);
/// returns whether it did.
pub fn wait_for_path(path: &Path, limit: std::time::Duration) -> bool {
    let t0 = std::time::Instant::now();
    while !path.exists() && t0.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    path.exists()
}

/// `sluice status` against the control socket `sock`.
pub fn sluice_status(sock: &Path) -> std::process::Output {
    Command::new(sluice_bin())
        .arg("status")
        .arg("--control-socket")
        .arg(sock)
        .output()
        .expect("spawn sluice status")
}

/// Compares `output` byte for byte with `tests/golden/<case>/expected.pcap`
/// (timestamps ignored); `SLUICE_BLESS=1` rewrites the file first.
pub fn compare_with_expected(case: &str, output: &[Vec<u8>]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(case);
    let expected_path = dir.join("expected.pcap");
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        write_pcap(&expected_path, output);
    }
    let expected = read_pcap(&expected_path);
    assert_eq!(
        output.len(),
        expected.len(),
        "{case}: packet count differs from {expected_path:?}"
    );
    for (i, (o, e)) in output.iter().zip(&expected).enumerate() {
        assert_eq!(o, e, "{case}: packet {i} differs from {expected_path:?}");
    }
}

/// Sum of every metric whose `name{labels}` key starts with `prefix`.
pub fn sum_metrics(m: &BTreeMap<String, u64>, prefix: &str) -> u64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// AP-3: frames sent beyond one per received packet — fragments created
/// minus the packets they were made of — so that every packet is accounted
/// for as RX + extra_fragments = TX + punted + Σ drops.
pub fn extra_fragments(m: &BTreeMap<String, u64>) -> u64 {
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    get("sluice_fragments_created_total").saturating_sub(get("sluice_fragmented_packets_total"))
}

/// Prometheus text → {"name{labels}": value}.
pub fn parse_metrics(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// The worker (of `workers`) that software steering gives this frame to:
/// the library's own choice, so tests predict it rather than restate it.
pub fn steering_owner(frame: &[u8], workers: usize) -> usize {
    let Ok(sluice_core::wire::Parsed::Ip(ip)) = sluice_core::wire::parse(frame) else {
        panic!("test frame does not parse")
    };
    // The key under affinity NONE with connection tracking (every test
    // service tracks so): a 5-tuple for TCP and unfragmented UDP, else the
    // address pair.
    match ip.ports {
        Some(ports) if !ip.fragment.is_fragmented() => {
            sluice_core::steering::owner_of_five_tuple(ip.src, ip.dst, ip.protocol, ports, workers)
        }
        _ => sluice_core::steering::owner_of(ip.src, ip.dst, workers),
    }
}

/// Whether `frame` (untagged or 802.1Q-tagged) is an ICMP echo reply from
/// `from` to `to`.
pub fn is_echo_reply(frame: &[u8], from: [u8; 4], to: [u8; 4]) -> bool {
    use etherparse::{Icmpv4Type, NetSlice, SlicedPacket, TransportSlice};
    let Ok(p) = SlicedPacket::from_ethernet(frame) else {
        return false;
    };
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        return false;
    };
    let reply = matches!(&p.transport,
        Some(TransportSlice::Icmpv4(i)) if matches!(i.icmp_type(), Icmpv4Type::EchoReply(_)));
    reply && ip.header().source() == from && ip.header().destination() == to
}

/// The IPv4 header checksum of `h` (its checksum field zero), for tests
/// that build fragments by hand.
pub fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
