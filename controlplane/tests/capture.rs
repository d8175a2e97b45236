//! Capture with DPDK's own tool: the stock `dpdk-dumpcap` attaches to a
//! running `sluice run` (EAL's multi-process channel under
//! `--file-prefix`, librte_pdump enabled by the primary) and captures a
//! port's traffic through a BPF filter without stopping it.
//!
//! A secondary process maps the primary's memory, which only hugepages
//! share: the test reserves 2 MiB pages for itself and mounts a private
//! hugetlbfs (as root, which the suite runs as), runs on them and compares
//! the capture with what was replayed. Where pages cannot be had (not
//! root, no memory), it runs `--no-huge` and checks that dumpcap refuses
//! the way docs/operations.md describes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use etherparse::PacketBuilder;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

const NR_HUGEPAGES: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

/// 2 MiB pages reserved and a hugetlbfs mounted at a private directory for
/// this test; both given back on drop.
struct Hugepages {
    dir: PathBuf,
    /// `nr_hugepages` before the test raised it (None: left as it was).
    restore: Option<u64>,
}

impl Hugepages {
    /// At least `pages` free pages on a private mount, or None.
    fn reserve(pages: u64) -> Option<Self> {
        let free = meminfo("HugePages_Free:")?;
        let restore = if free < pages {
            let total: u64 = std::fs::read_to_string(NR_HUGEPAGES)
                .ok()?
                .trim()
                .parse()
                .ok()?;
            std::fs::write(NR_HUGEPAGES, (total + pages - free).to_string()).ok()?;
            Some(total)
        } else {
            None
        };
        let dir = PathBuf::from(format!("/tmp/schp{:x}", std::process::id()));
        let mut h = Self { dir, restore };
        std::fs::create_dir_all(&h.dir).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "hugetlbfs", "-o", "pagesize=2M", "nodev"])
            .arg(&h.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&h.dir);
            h.dir = PathBuf::new();
            return None;
        }
        (meminfo("HugePages_Free:")? >= pages).then_some(h)
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let _ = Command::new("umount").arg(&self.dir).status();
            let _ = std::fs::remove_dir(&self.dir);
        }
        if let Some(total) = self.restore {
            let _ = std::fs::write(NR_HUGEPAGES, total.to_string());
        }
    }
}

fn meminfo(field: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .parse()
        .ok()
}

fn config(dir: &Path, memory: &str) -> String {
    let d = dir.display();
    format!(
        r#"
[dataplane]
eal_args = [{memory}, "--no-pci", "--log-level=error"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/i.pcap,infinite_rx=1,tx_pcap=/dev/null"
mac = "{mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "dns"
encapsulation = "l2"
backend = [{{ address = "192.0.2.30", mac = "02:00:00:00:00:30" }}]

[[forwarding_rule]]
name = "dns"
vip = "203.0.113.53"
protocol = "UDP"
ports = "53"
backend_service = "dns"
"#,
        mac = mac_str(&PORT_MAC),
    )
}

fn frames() -> Vec<Vec<u8>> {
    (0..20u16)
        .map(|i| {
            let mut out = Vec::new();
            let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0xee, 0x01], PORT_MAC).ipv4(
                [10, 9, 0, i as u8],
                [203, 0, 113, 53],
                64,
            );
            if i % 2 == 0 {
                b.udp(20_000 + i, 53).write(&mut out, b"q").unwrap();
            } else {
                b.tcp(20_000 + i, 53, 1, 1000).write(&mut out, b"").unwrap();
            }
            out
        })
        .collect()
}

/// `sluice run` on `dir`'s config, for `seconds`, under `prefix`.
fn start(dir: &Path, prefix: &str, seconds: u32) -> Child {
    Command::new(sluice_bin())
        .args([
            "run",
            "--no-metrics-server",
            "--no-control-socket",
            "--file-prefix",
            prefix,
        ])
        .args(["--duration", &seconds.to_string(), "--config"])
        .arg(dir.join("sluice.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice")
}

fn dumpcap(prefix: &str, out: &Path) -> std::process::Output {
    Command::new("dpdk-dumpcap")
        .args([
            "--file-prefix",
            prefix,
            "-i",
            "net_pcap0",
            "-f",
            "udp",
            "-P",
            "-c",
            "40",
            "-q",
        ])
        .args(["-a", "duration:5", "-w"])
        .arg(out)
        .output()
        .expect("spawn dpdk-dumpcap")
}

/// `dpdk-dumpcap -f udp` on a running sluice captures the UDP packets it
/// receives (as replayed) and sends (the same with the backend's MAC,
/// layer-2 DSR), and no TCP; or, without hugepages, refuses to attach.
#[test]
fn dumpcap_captures_from_a_running_sluice() {
    if Command::new("dpdk-dumpcap").arg("-v").output().is_err() {
        eprintln!("SKIPPED: dpdk-dumpcap not installed (Debian package `dpdk`)");
        return;
    }
    // A secondary gets a vdev's arguments cut to 63 bytes, and net_pcap
    // in the secondary opens its files again: short paths, and no TX file
    // for the secondary to truncate.
    let dir = PathBuf::from(format!("/tmp/sc{:x}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sent = frames();
    write_pcap(&dir.join("i.pcap"), &sent);
    let prefix = format!("sluice-cap-{}", std::process::id());
    let huge = Hugepages::reserve(64);
    let memory = match &huge {
        Some(h) => format!(r#""--huge-dir", "{}", "-m", "96""#, h.dir.display()),
        None => r#""--no-huge", "-m", "128""#.to_string(),
    };
    std::fs::write(dir.join("sluice.toml"), config(&dir, &memory)).unwrap();
    let mut run = start(&dir, &prefix, 8);
    let socket = PathBuf::from(format!("/var/run/dpdk/{prefix}/mp_socket"));
    assert!(
        wait_for_path(&socket, Duration::from_secs(10)),
        "EAL's mp socket"
    );
    std::thread::sleep(Duration::from_millis(500));
    let capture = dir.join("cap.pcap");
    let out = dumpcap(&prefix, &capture);
    let status = run.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // EAL leaves its hugepage files for the next run under the prefix.
    if let Some(h) = &huge {
        for f in std::fs::read_dir(&h.dir).unwrap().flatten() {
            if f.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(f.path());
            }
        }
    }
    assert!(status.success(), "sluice ran on through the capture");
    if huge.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!out.status.success());
        assert!(
            stderr.contains("Cannot get hugepage information"),
            "{stderr}"
        );
        eprintln!("no free hugepages: dumpcap refused as documented");
        return;
    }
    assert!(out.status.success(), "dumpcap: {stderr}");
    let got = read_pcap(&capture);
    assert!(got.len() >= 20, "captured {}", got.len());
    let udp: Vec<&Vec<u8>> = sent.iter().step_by(2).collect();
    let (mut rx, mut tx) = (0, 0);
    for f in &got {
        let same_packet = udp.iter().any(|s| s[12..] == f[12..]);
        assert!(same_packet, "a captured frame is a replayed UDP packet");
        match &f[..6] {
            d if d == PORT_MAC => rx += 1,
            d if d == [2, 0, 0, 0, 0, 0x30] => tx += 1,
            d => panic!("captured frame to {d:02x?}"),
        }
    }
    assert!(rx > 0 && tx > 0, "both directions: rx {rx}, tx {tx}");
    eprintln!(
        "captured {} frames on hugepages: {rx} received, {tx} sent",
        got.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
