//! What the `sluice explain` tests share: a configuration with known
//! answers (weight 0, a failover pool, CLIENT_IP affinity, IPv6), the
//! frames of a capture, `sluice run` in the background, and the binary's
//! answers.
// Shared by integration tests, each its own binary crate: `pub` here
// means "for the test files", never reachable from outside the test.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::Command;

use etherparse::PacketBuilder;
use serde_json::Value;

use crate::common::*;

pub const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
pub const KEY: &str = "8f2c6b1e0d9a47c3b5e81f6a2d4c9e07a1b3c5d7e9f10213";

pub fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
[dataplane]
{eal}
workers = 1
conntrack_capacity = 4096
flow_hash_key = "{KEY}"

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/in.pcap,tx_pcap={d}/out.pcap"
mac = "{port_mac}"
address = "192.0.2.1/24"
address6 = "2001:db8:2::1/64"

[[health_check]]
name = "tcp-80"
type = "TCP"
port = 80
initial_state = "HEALTHY"

[[backend_service]]
name = "web"
encapsulation = "l2"
health_check = "tcp-80"
failover_policy = {{ failover_ratio = 0.5 }}
backend = [
  {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }},
  {{ address = "192.0.2.11", mac = "02:00:00:00:00:11" }},
  {{ address = "192.0.2.12", mac = "02:00:00:00:00:12", weight = 0 }},
  {{ address = "192.0.2.20", mac = "02:00:00:00:00:20", failover = true }},
]

[[backend_service]]
name = "dns"
encapsulation = "l2"
session_affinity = "CLIENT_IP"
backend = [
  {{ address = "192.0.2.30", mac = "02:00:00:00:00:30" }},
  {{ address = "192.0.2.31", mac = "02:00:00:00:00:31" }},
]

[[backend_service]]
name = "web6"
encapsulation = "l2"
backend = [
  {{ address = "2001:db8:2::10", mac = "02:00:00:00:06:10" }},
  {{ address = "2001:db8:2::11", mac = "02:00:00:00:06:11" }},
]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rule]]
name = "dns-vip"
vip = "203.0.113.53"
protocol = "L3_DEFAULT"
ports = "ALL"
backend_service = "dns"

[[forwarding_rule]]
name = "web6-vip"
vip = "2001:db8:1::10"
protocol = "TCP"
ports = "80"
backend_service = "web6"
"#,
        eal = eal_args(256),
        port_mac = mac_str(&PORT_MAC),
    )
}

pub fn syn(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1, 65535)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

pub fn syn6(i: u16) -> Vec<u8> {
    let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    src[14..].copy_from_slice(&i.to_be_bytes());
    let dst: std::net::Ipv6Addr = "2001:db8:1::10".parse().unwrap();
    let mut out = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv6(src, dst.octets(), 64)
        .tcp(30_000 + i, 80, 1, 65535)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

pub fn udp(i: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv4([10, 9, (i >> 8) as u8, i as u8], [203, 0, 113, 53], 64)
        .udp(20_000 + i, 53)
        .write(&mut out, b"q")
        .unwrap();
    out
}

/// The capture: TCP SYNs to the IPv4 VIP, UDP to an L3_DEFAULT VIP,
/// IPv6 SYNs, and packets no rule takes.
pub fn capture() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for i in 0..120u16 {
        frames.push(syn(
            [198, 51, (i >> 8) as u8, i as u8],
            40_000 + i,
            [203, 0, 113, 10],
            80,
        ));
    }
    frames.extend((0..60).map(udp));
    frames.extend((0..40).map(syn6));
    frames.push(syn([198, 51, 100, 7], 40_000, [203, 0, 113, 10], 443));
    frames.push(syn([198, 51, 100, 7], 40_000, [203, 0, 113, 99], 80));
    frames
}

/// `sluice run` in the background on `cfg` with its control socket at
/// `sock` and no metrics server (tests run side by side); stopped with
/// SIGTERM and reaped when dropped.
pub struct Live(pub std::process::Child);

impl Live {
    pub fn start(cfg: &Path, sock: &Path) -> Self {
        Self::start_for(cfg, sock, 30)
    }

    /// [`Live::start`], stopping by itself after `seconds`.
    pub fn start_for(cfg: &Path, sock: &Path, seconds: u32) -> Self {
        let child = Command::new(sluice_bin())
            .args(["run", "--no-metrics-server", "--duration"])
            .arg(seconds.to_string())
            .arg("--config")
            .arg(cfg)
            .arg("--control-socket")
            .arg(sock)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn sluice run");
        Live(child)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

pub fn explain(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(sluice_bin())
        .arg("explain")
        .args(args)
        .output()
        .expect("spawn sluice");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn explain_json(args: &[&str]) -> Vec<Value> {
    let (ok, stdout, stderr) = explain(args);
    assert!(ok, "sluice explain failed: {stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `sluice explain ARGS`: (exit status, stdout, stderr).
pub fn explain_status(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(sluice_bin())
        .arg("explain")
        .args(args)
        .output()
        .expect("spawn sluice");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
