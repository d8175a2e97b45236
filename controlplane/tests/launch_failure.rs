//! A start-up that fails after workers were launched, through the real
//! `sluice` binary on DPDK: two workers on `net_pcap`, the launch of the
//! second fails (`--test-fail-launch-of-worker 1`, a test hook) while the
//! first is in the middle of a replay. The run must stop and join the
//! running worker before it closes the ports, frees the pool and cleans up
//! EAL, and exit with the error — not crash, hang, or tear a port down
//! under a polling worker.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Packets on queue 0: enough that worker 0 is still replaying when
/// worker 1's launch fails.
const PER_QUEUE: usize = 100_000;

fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
[dataplane]
{eal}
workers = 2
conntrack_capacity = 4096

[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={d}/a.pcap,rx_pcap={d}/b.pcap,tx_pcap={d}/c.pcap,tx_pcap={d}/d.pcap"
mac = "{mac}"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#,
        eal = eal_args(512),
        mac = mac_str(&PORT_MAC),
    )
}

/// The launch of worker 1 fails while worker 0 forwards: `sluice run`
/// exits 1 with the launch error, after saying it stopped the running
/// worker, and the port was closed properly (net_pcap wrote a readable
/// TX file holding what worker 0 sent). Before the runtime owned the
/// lifecycle, this `?` dropped the ports and the pool under the running
/// worker (DPDK logged it polling a port that was not ready), and
/// `rte_eal_cleanup` then waited for that worker for ever: the run hung.
#[test]
fn a_failed_worker_launch_stops_the_running_workers_first() {
    let dir = tempdir("launch_failure");
    let frames: Vec<Vec<u8>> = (0..PER_QUEUE)
        .map(|i| {
            tcp_frame(
                PORT_MAC,
                [10, 9, (i >> 8) as u8, i as u8],
                [203, 0, 113, 10],
                1024 + (i % 50_000) as u16,
                80,
                1,
            )
        })
        .collect();
    write_pcap(&dir.join("a.pcap"), &frames);
    write_pcap(&dir.join("b.pcap"), &frames[..1]);
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();

    let t0 = Instant::now();
    let mut child = Command::new(sluice_bin())
        .args(["run", "--no-metrics-server", "--no-control-socket"])
        .arg("--config")
        .arg(&cfg)
        .args(["--duration", "60", "--test-fail-launch-of-worker", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            // The old run hung here: EAL's cleanup waited for a worker
            // nobody had told to stop, polling a port already closed.
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sluice hung after the failed launch:\n{}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = reader.join().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "sluice must exit 1 with the error, not crash: {status}\nstderr: {stderr}"
    );
    let error = stderr
        .lines()
        .find(|l| l.contains("sluice: DPDK: launching worker 1"))
        .unwrap_or_else(|| panic!("no launch error in stderr:\n{stderr}"));
    assert!(error.contains("failure injected by a test hook"), "{error}");
    let stopping = stderr
        .find("sluice: stopping 1 worker(s) before closing the ports")
        .unwrap_or_else(|| panic!("the running worker was not stopped first:\n{stderr}"));
    assert!(
        stopping < stderr.find("sluice: DPDK: launching worker 1").unwrap(),
        "the error is reported once everything is down:\n{stderr}"
    );
    assert!(
        !stderr.contains("EAL not cleaned up") && !stderr.contains("still in use"),
        "every DPDK object was released before EAL's cleanup:\n{stderr}"
    );
    // Worker 0 forwarded part of queue 0 before it was stopped, and the
    // port's close wrote it out.
    let sent = read_pcap(&dir.join("c.pcap"));
    assert!(!sent.is_empty(), "worker 0 sent nothing before it stopped");
    assert!(
        sent.len() < PER_QUEUE,
        "worker 0 finished its queue before the failure ({} packets): the \
         failure did not happen mid-replay",
        sent.len()
    );
    assert!(
        read_pcap(&dir.join("d.pcap")).is_empty(),
        "worker 1 never ran"
    );
}
