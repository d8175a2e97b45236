//! The UDP health check through the real `sluice` binary, against real
//! UDP sockets on loopback: an echo backend is healthy, a closed port is
//! unhealthy on ICMP port unreachable, a silent one by timeout — each
//! reason visible in `sluice status` and `/metrics`.

mod common;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::time::Duration;

use common::*;

fn config(dir: &Path, port: u16, metrics: u16) -> String {
    null_dataplane(metrics)
        + &format!(
            r#"
[[health_check]]
name = "dns"
type = "UDP"
port = {port}
request_hex = "70 69 6e 67"
response = "pong"
check_interval = "200ms"
timeout = "200ms"
healthy_threshold = 2
unhealthy_threshold = 2
initial_state = "HEALTHY"
[[backend_service]]
name = "dns"
health_check = "dns"
backend = [{{ address = "127.0.0.1" }}, {{ address = "127.0.0.2" }}, {{ address = "127.0.0.3" }}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.53"
protocol = "UDP"
ports = "53"
backend_service = "dns"
# {dir}
"#,
            dir = dir.display()
        )
}

/// One port bound on 127.0.0.1 (echo), 127.0.0.2 (closed: bound so no
/// parallel test takes it, but connected elsewhere, so the kernel answers
/// our datagrams with port unreachable) and 127.0.0.3 (never read).
fn sockets() -> (UdpSocket, UdpSocket, UdpSocket, u16) {
    (0..100)
        .find_map(|_| {
            let echo = UdpSocket::bind("127.0.0.1:0").ok()?;
            let port = echo.local_addr().ok()?.port();
            let closed = UdpSocket::bind(("127.0.0.2", port)).ok()?;
            closed.connect("127.0.0.9:9").ok()?;
            let quiet = UdpSocket::bind(("127.0.0.3", port)).ok()?;
            Some((echo, closed, quiet, port))
        })
        .expect("a UDP port free on 127.0.0.1, .2 and .3")
}

fn serve_echo(s: UdpSocket) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let reply = [b"pong ", &buf[..n]].concat();
            let _ = s.send_to(&reply, from);
        }
    });
}

/// A UDP check (`request_hex`, `response`) through the binary: echo →
/// healthy; closed port → `last-failure port_unreachable`; silent →
/// `last-failure timeout`; and the failure counters by reason.
#[test]
fn udp_health_check_through_the_binary() {
    let dir = tempdir("health-udp-live");
    let (echo, closed, quiet, port) = sockets();
    let echo_addr: SocketAddr = echo.local_addr().unwrap();
    serve_echo(echo);
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg_path = dir.join("sluice.toml");
    std::fs::write(&cfg_path, config(&dir, port, metrics)).unwrap();
    let run = RunningSluice::start(&cfg_path, &dir.join("control.sock"), 20);

    // Failure window: 2 × 200 ms + 200 ms, after the first probe's jitter
    // and process start-up.
    run.wait_status("the three verdicts", Duration::from_secs(10), |s| {
        let (a, b, c) = (
            backend_line(s, "127.0.0.1"),
            backend_line(s, "127.0.0.2"),
            backend_line(s, "127.0.0.3"),
        );
        a.contains(" healthy ")
            && !a.contains("last-failure")
            && b.contains(" unhealthy ")
            && b.ends_with(" last-failure port_unreachable")
            && c.contains(" unhealthy ")
            && c.ends_with(" last-failure timeout")
    });
    let m = parse_metrics(&scrape(metrics));
    drop(run);
    let failures = |backend: &str, reason: &str| {
        m.get(&format!(
            "sluice_backend_probe_failures_total{{backend=\"{backend}\",reason=\"{reason}\",service=\"dns\"}}"
        ))
        .copied()
        .unwrap_or(0)
    };
    assert!(failures("127.0.0.2", "port_unreachable") >= 2, "{m:?}");
    assert!(failures("127.0.0.3", "timeout") >= 2, "{m:?}");
    assert_eq!(failures("127.0.0.1", "timeout"), 0);
    assert_eq!(
        m.get("sluice_backend_healthy{backend=\"127.0.0.1\",service=\"dns\"}"),
        Some(&1)
    );
    assert_eq!(echo_addr.port(), port);
    drop((closed, quiet));
}
