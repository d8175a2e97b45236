//! The announcement through the real binary (AP-6): sluice, in a private
//! network namespace (`unshare -n`) with a TAP, keeps one route per VIP it
//! can serve in `bgp.kernel_table` — what BIRD learns and exports — and
//! withdraws a VIP whose service has no healthy backend, follows a reload,
//! and on SIGTERM withdraws first, then keeps running for `drain_time`.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn config(table: u32) -> String {
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
conntrack_capacity = 1024

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"
address6 = "2001:db8::2/64"
tap = "sl-announce"

[[health_check]]
name = "tcp"
type = "TCP"
port = 80
check_interval = "1s"
timeout = "200ms"

[[backend_service]]
name = "web"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

# Nothing answers its check: no healthy backend, ever.
[[backend_service]]
name = "alt"
health_check = "tcp"
backend = [ {{ address = "192.0.2.20", mac = "02:00:00:00:00:20" }} ]

[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
backend_service = "web"

[[forwarding_rule]]
name = "web6"
vip = "2001:db8:1::10"
backend_service = "web6"

[[backend_service]]
name = "web6"
backend = [ {{ address = "2001:db8::10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "alt"
vip = "203.0.113.20"
backend_service = "alt"

[bgp]
asn = 65001
kernel_table = {table}
drain_time = "2s"

[[bgp.peer]]
name = "tor"
address = "192.0.2.1"
asn = 65000

[[bgp.peer]]
name = "tor6"
address = "2001:db8::1"
asn = 65000
"#
    )
}

/// The routes of `table` in `pid`'s network namespace, as `ip route`
/// prints them.
fn routes(pid: u32, table: u32) -> Vec<String> {
    routes_of(pid, table, "-4")
}

fn routes_of(pid: u32, table: u32, family: &str) -> Vec<String> {
    let out = Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "ip",
            family,
            "route",
            "show",
            "table",
        ])
        .arg(table.to_string())
        .output()
        .expect("nsenter");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn status(sock: &Path) -> String {
    String::from_utf8_lossy(&sluice_status(sock).stdout).into_owned()
}

struct Sluice(Child);

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// AP-6: announced once ready, per VIP; a VIP without a healthy backend
/// is withdrawn alone; a reload moves the routes to another table; SIGTERM
/// withdraws before the drain, and the process forwards `drain_time` more.
#[test]
fn ap_6_vip_routes_follow_servability_reload_and_sigterm() {
    let dir = tempdir("announce");
    let cfg = dir.join("sluice.toml");
    let sock = dir.join("sluice.sock");
    std::fs::write(&cfg, config(100)).unwrap();
    // systemd's notification socket: the drain extends the stop timeout.
    let notify_path = dir.join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    let child = Command::new("unshare")
        .arg("-n")
        .arg(sluice_bin())
        .args(["run", "--no-metrics-server", "--config"])
        .arg(&cfg)
        .arg("--control-socket")
        .arg(&sock)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn unshare");
    let mut sluice = Sluice(child);
    let pid = sluice.0.id();
    let web = "203.0.113.10 dev sl-announce proto 83 scope link".to_string();

    let web6 = "2001:db8:1::10 dev sl-announce proto 83 metric 1024 pref medium".to_string();
    let up = wait_for(Duration::from_secs(30), || {
        routes(pid, 100) == [web.clone()] && routes_of(pid, 100, "-6") == [web6.clone()]
    });
    assert!(
        up.is_some(),
        "announced: {:?} {:?}",
        routes(pid, 100),
        routes_of(pid, 100, "-6")
    );
    let text = status(&sock);
    assert!(text.contains("vip 203.0.113.10 announced\n"), "{text}");
    // Its check needs three failures (unhealthy_threshold) for a verdict.
    let alt = "vip 203.0.113.20 withdrawn: no healthy backend is eligible (service alt)\n";
    let settled = wait_for(Duration::from_secs(10), || status(&sock).contains(alt));
    assert!(settled.is_some(), "{}", status(&sock));
    let text = status(&sock);
    assert!(text.contains("\nconfig digest "), "{text}");
    assert!(text.contains("\nservice web table digest "), "{text}");

    std::fs::write(&cfg, config(1000)).unwrap();
    let reload = Command::new(sluice_bin())
        .arg("reload")
        .arg("--control-socket")
        .arg(&sock)
        .output()
        .unwrap();
    assert!(reload.status.success(), "{reload:?}");
    let moved = wait_for(Duration::from_secs(5), || {
        routes(pid, 1000) == [web.clone()] && routes(pid, 100).is_empty()
    });
    assert!(
        moved.is_some(),
        "table 1000 {:?}, table 100 {:?}",
        routes(pid, 1000),
        routes(pid, 100)
    );

    let term = Instant::now();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let withdrawn = wait_for(Duration::from_secs(2), || routes(pid, 1000).is_empty());
    assert!(withdrawn.is_some(), "withdrawn on SIGTERM");
    assert!(
        sluice.0.try_wait().unwrap().is_none(),
        "still running (draining) once withdrawn"
    );
    let exit = sluice.0.wait().unwrap();
    let lasted = term.elapsed();
    assert!(exit.success(), "{exit}");
    assert!(
        lasted >= Duration::from_secs(2),
        "forwarded drain_time after the withdrawal: stopped after {lasted:?}"
    );
    let mut log = String::new();
    use std::io::Read;
    sluice
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    // STOPPING=1 with EXTEND_TIMEOUT_USEC: drain_time (2 s) and 30 s for
    // the stop after it, so TimeoutStopSec need not cover the drain.
    notify.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 4096];
    let mut messages = Vec::new();
    while let Ok(n) = notify.recv(&mut buf) {
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        messages
            .iter()
            .any(|m| m == "STOPPING=1\nEXTEND_TIMEOUT_USEC=32000000\n"),
        "{messages:?}"
    );
    let withdrew = log.find("bgp: withdrew 203.0.113.10 (table 1000)");
    let drained = log.find("sluice: drained, stopping");
    assert!(
        withdrew.is_some() && drained.is_some() && withdrew < drained,
        "withdrawn, then drained: {log}"
    );
}
