//! Health-check scheduler against real listeners on loopback (HC-1, HC-2,
//! HC-5, HC-7) and real UDP sockets.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use controlplane::config::{HttpCheck, TcpCheck, UdpCheck};
use controlplane::health::Route;
use controlplane::health::{FailureReason, HealthChecker, InitialState, ProbeKey, ProbeKind};

/// A tiny HTTP server: answers every request with `status` and, when set,
/// the weight header; records the Host headers it saw.
struct Server {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
    weight: Arc<Mutex<Option<String>>>,
    hosts: Arc<Mutex<Vec<String>>>,
}

fn server() -> Server {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let status = Arc::new(AtomicU16::new(200));
    let weight = Arc::new(Mutex::new(None::<String>));
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let (s, w, h) = (status.clone(), weight.clone(), hosts.clone());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|x| x == b"\r\n\r\n") {
                match c.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => buf.extend_from_slice(&chunk[..k]),
                }
            }
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(host) = text
                .lines()
                .find_map(|l| l.strip_prefix("Host: ").map(str::to_string))
            {
                h.lock().unwrap().push(host);
            }
            let mut resp = format!("HTTP/1.1 {} X\r\n", s.load(Ordering::Relaxed));
            if let Some(wv) = w.lock().unwrap().as_ref() {
                resp.push_str(&format!("X-Load-Balancing-Endpoint-Weight: {wv}\r\n"));
            }
            resp.push_str("Content-Length: 0\r\n\r\n");
            let _ = c.write_all(resp.as_bytes());
        }
    });
    Server {
        addr,
        status,
        weight,
        hosts,
    }
}

fn key(addr: SocketAddr, kind: ProbeKind) -> ProbeKey {
    ProbeKey {
        route: Route::Direct,
        addr,
        kind,
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(200),
        healthy_threshold: 2,
        unhealthy_threshold: 2,
        initial: InitialState::Unhealthy,
    }
}

fn http() -> ProbeKind {
    ProbeKind::Http(HttpCheck {
        request_path: "/healthz".into(),
        host: None,
        response_codes: vec![200],
    })
}

fn wait_for(
    hc: &HealthChecker,
    k: &ProbeKey,
    what: &str,
    f: impl Fn(&controlplane::health::ProbeStatus) -> bool,
) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if let Some(s) = hc.status.lock().unwrap().get(k) {
            if f(s) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "timed out waiting for {what}: {:?}",
        hc.status.lock().unwrap().get(k)
    );
}

/// HC-2 (Host = ip:port, codes), HC-5 (back after successes), HC-7 weights.
#[test]
fn hc_2_hc_5_hc_7_http_probe_follows_the_server() {
    let s = server();
    let hc = HealthChecker::spawn().unwrap();
    let k = key(s.addr, http());
    hc.set_targets(vec![k.clone()]);
    wait_for(&hc, &k, "healthy", |st| st.state.healthy);
    assert_eq!(s.hosts.lock().unwrap()[0], s.addr.to_string());
    *s.weight.lock().unwrap() = Some("40".into());
    wait_for(&hc, &k, "weight 40", |st| st.state.weight == 40);
    *s.weight.lock().unwrap() = Some("bogus".into());
    wait_for(&hc, &k, "invalid counted", |st| {
        st.state.weight_header_invalid > 0
    });
    assert_eq!(hc.status.lock().unwrap()[&k].state.weight, 40, "kept");
    s.status.store(503, Ordering::Relaxed);
    wait_for(&hc, &k, "unhealthy", |st| !st.state.healthy);
    s.status.store(200, Ordering::Relaxed);
    wait_for(&hc, &k, "healthy again", |st| st.state.healthy);
    let ev: Vec<_> = hc.events.try_iter().collect();
    assert!(ev.iter().filter(|e| e.change.health).count() >= 3);
}

/// HC-1 (connect form): a listener is up, then closed → marked down; a port
/// nobody listens on never comes up. Services share one probe per key.
#[test]
fn hc_1_tcp_probe_marks_a_closed_listener_down() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Bound but not listening: connections are refused (RST), and the
    // port stays ours, so no test running alongside can listen on it.
    let closed = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    closed
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    let dead = closed.local_addr().unwrap().as_socket().unwrap();
    let hc = HealthChecker::spawn().unwrap();
    let k = key(addr, ProbeKind::Tcp(TcpCheck));
    let kd = key(dead, ProbeKind::Tcp(TcpCheck));
    hc.set_targets(vec![k.clone(), kd.clone(), k.clone()]);
    wait_for(&hc, &k, "up", |st| st.state.healthy);
    assert_eq!(hc.status.lock().unwrap().len(), 2, "shared probe");
    drop(l);
    wait_for(&hc, &k, "down", |st| !st.state.healthy);
    let d = hc.status.lock().unwrap()[&kd].clone();
    assert!(!d.state.healthy && d.probes > 0);
}

/// A silent server (accepts, never answers) fails by timeout.
#[test]
fn hc_3_timeout_is_a_failure() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let hc = HealthChecker::spawn().unwrap();
    let k = ProbeKey {
        initial: InitialState::Healthy,
        ..key(addr, http())
    };
    hc.set_targets(vec![k.clone()]);
    wait_for(&hc, &k, "down by timeout", |st| !st.state.healthy);
    let s = hc.status.lock().unwrap()[&k].clone();
    assert!(s.latency_sum >= 0.2 * 2.0 * 0.9, "{s:?}");
    drop(l);
}

/// HC-1 half-open (as root): the listener is marked up, yet no connection
/// ever reaches its accept queue — SYN, SYN-ACK, kernel RST, no handshake.
#[test]
fn hc_1_half_open_probe_completes_no_handshake() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let hc = HealthChecker::spawn().unwrap();
    let k = key(l.local_addr().unwrap(), ProbeKind::Tcp(TcpCheck));
    hc.set_targets(vec![k.clone()]);
    wait_for(&hc, &k, "up", |st| st.state.healthy && st.probes >= 3);
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a handshake completed: {other:?} (no CAP_NET_RAW? connect() fallback)"),
    }
}

/// A UDP echo server: answers each datagram with "pong " and the datagram.
fn udp_echo() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let reply = [b"pong ", &buf[..n]].concat();
            let _ = s.send_to(&reply, from);
        }
    });
    addr
}

fn udp(response: Option<&str>) -> ProbeKind {
    ProbeKind::Udp(UdpCheck {
        request: b"ping".to_vec(),
        response: response.map(|r| r.as_bytes().to_vec()),
    })
}

/// The UDP probe on real sockets: an echo backend is healthy; a reply
/// without the expected `response` fails as `response_mismatch`; a port
/// nobody listens on fails at once on the ICMP port unreachable
/// (`port_unreachable`, well inside the timeout); a socket that never
/// answers fails by `timeout`.
#[test]
fn udp_probe_echo_mismatch_closed_and_silent_backends() {
    let echo = udp_echo();
    // Bound (so the port stays ours) but connected elsewhere: the kernel
    // delivers it nothing from us and answers port unreachable.
    let closed = UdpSocket::bind("127.0.0.2:0").unwrap();
    closed.connect("127.0.0.9:9").unwrap();
    let closed_addr = closed.local_addr().unwrap();
    // Bound and never read: datagrams queue, nothing answers.
    let quiet = UdpSocket::bind("127.0.0.3:0").unwrap();
    let quiet_addr = quiet.local_addr().unwrap();

    let hc = HealthChecker::spawn().unwrap();
    let healthy_first = |k: ProbeKey| ProbeKey {
        initial: InitialState::Healthy,
        ..k
    };
    let k_echo = key(echo, udp(Some("pong ping")));
    let k_wrong = healthy_first(key(echo, udp(Some("nope"))));
    let k_closed = healthy_first(key(closed_addr, udp(None)));
    let k_quiet = healthy_first(key(quiet_addr, udp(None)));
    hc.set_targets(vec![
        k_echo.clone(),
        k_wrong.clone(),
        k_closed.clone(),
        k_quiet.clone(),
    ]);
    wait_for(&hc, &k_echo, "echo healthy", |st| st.state.healthy);
    for (k, reason) in [
        (&k_wrong, FailureReason::ResponseMismatch),
        (&k_closed, FailureReason::PortUnreachable),
        (&k_quiet, FailureReason::Timeout),
    ] {
        wait_for(&hc, k, reason.name(), |st| {
            !st.state.healthy && st.last_failure == Some(reason)
        });
    }
    let st = hc.status.lock().unwrap()[&k_closed].clone();
    assert!(
        st.latency_sum / (st.probes as f64) < 0.1,
        "port unreachable decides well before the 200 ms timeout: {st:?}"
    );
    assert_eq!(
        st.failures[FailureReason::PortUnreachable.index()],
        st.probes
    );
    drop((closed, quiet));
}

/// The prober thread runs at nice 5, so a health flip's publish, a
/// reload or a status render on the same core goes first.
#[test]
fn prober_thread_runs_at_background_priority() {
    let checker = HealthChecker::spawn().unwrap();
    let mut nices = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while nices.is_empty() && Instant::now() < deadline {
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() != "sluice-health" {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Field 19 (nice), counted after the parenthesised name (field 2).
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            if let Some(n) = after.split_whitespace().nth(16) {
                nices.push(n.parse::<i32>().unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(checker);
    assert!(!nices.is_empty(), "no sluice-health thread found");
    assert!(nices.iter().all(|&n| n == 5), "nice values {nices:?}");
}
