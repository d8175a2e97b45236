//! A virtio-net port with one queue pair per worker (AP-1), as a VM with
//! `virtio-net-pci,mq=on` gives the appliance: DPDK's virtio PMD over a
//! vhost-user backend (`dpdk-testpmd` with `net_vhost`, as a VM's host
//! side would be), driven by the real `sluice` binary with two workers.
//! Such a device has no VIRTIO_NET_F_RSS, so sluice must not ask it for
//! RSS and must steer between workers in software. Needs `dpdk-testpmd`
//! (package dpdk-dev).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `dpdk-testpmd` serving a vhost-user socket with `queues` queue pairs;
/// killed and its runtime directory removed on drop.
struct VhostBackend {
    child: Child,
    runtime: PathBuf,
}

impl VhostBackend {
    fn start(socket: &Path, queues: u16, log: &Path) -> Option<Self> {
        let prefix = format!("sluice-test-vhost-{}", std::process::id());
        let child = Command::new("dpdk-testpmd")
            .args(["-l", "0-1", "--no-huge", "-m", "256", "--no-pci"])
            .args(["--file-prefix", &prefix, "--log-level=error", "--vdev"])
            .arg(format!(
                "net_vhost0,iface={},queues={queues}",
                socket.display()
            ))
            .arg("--")
            .arg(format!("--rxq={queues}"))
            .arg(format!("--txq={queues}"))
            .args(["--nb-cores=1", "--total-num-mbufs=8192"])
            // testpmd runs until a line on stdin: the pipe stays open.
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let runtime = if rustix::process::geteuid().is_root() {
            PathBuf::from("/var/run")
        } else {
            std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| "/tmp".into(), PathBuf::from)
        }
        .join("dpdk")
        .join(prefix);
        Some(Self { child, runtime })
    }
}

impl Drop for VhostBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.runtime);
    }
}

/// Two workers on a virtio port without RSS: the port starts with two
/// queue pairs, link up, and software steering keeps each address pair on
/// one worker's shard. Before: `rte_eth_dev_configure(net_virtio_user0):
/// Operation not supported` (the PMD refuses RSS mode on a device without
/// VIRTIO_NET_F_RSS) and sluice did not start.
#[test]
fn two_workers_start_on_a_virtio_port_without_rss() {
    let in_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    if !in_path("dpdk-testpmd") {
        eprintln!("skipped: needs dpdk-testpmd (package dpdk-dev)");
        return;
    }
    let dir = tempdir("virtio-multiqueue");
    let socket = dir.join("vhost.sock");
    let backend_log = dir.join("testpmd.log");
    let Some(_backend) = VhostBackend::start(&socket, 2, &backend_log) else {
        panic!("dpdk-testpmd did not start");
    };
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no vhost-user socket; testpmd said:\n{}",
            std::fs::read_to_string(&backend_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let cfg = dir.join("sluice.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci"]
workers = 2
conntrack_capacity = 1024

[[dataplane.port]]
name = "data0"
device = "net_virtio_user0,path={},queues=2"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
backend_service = "web"
"#,
            socket.display()
        ),
    )
    .unwrap();
    let out = Command::new(sluice_bin())
        .args(["run", "--no-metrics-server", "--no-control-socket"])
        .args(["--duration", "2", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("software steering between 2 workers")
            && stderr.contains("for port(s) [\"net_virtio_user0\"]"),
        "{stderr}"
    );
    assert!(
        stderr.contains("data0=net_virtio_user0(dpdk 0, link up speed unknown)"),
        "{stderr}"
    );
}
