use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use sluice_core::snapshot::SnapshotCell;

use crate::metrics::MetricsSources;

use super::*;

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn answers_once_published_and_reports_bind_errors() {
    let state = AdminState::new();
    let server = AdminServer::start(([127, 0, 0, 1], 0).into(), Arc::clone(&state)).unwrap();
    let addr = server.local_addr();
    assert!(get(addr, "/metrics").starts_with("HTTP/1.1 503 "));
    state.publish(Arc::new(MetricsSources {
        workers: vec![],
        snapshot: Arc::new(SnapshotCell::new(Default::default())),
        port_names: vec![],
        control: None,
        ports: vec![],
        kernel_drops: vec![],
        pool: None,
    }));
    let ok = get(addr, "/metrics");
    assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
    assert!(
        ok.contains("Content-Type: text/plain; version=0.0.4"),
        "{ok}"
    );
    assert!(get(addr, "/ready").starts_with("HTTP/1.1 200 "));
    state.withdraw();
    assert!(get(addr, "/ready").starts_with("HTTP/1.1 503 "));
    let err = AdminServer::start(addr, state)
        .err()
        .expect("address taken");
    assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
}

/// Sources whose exposition is about 280 bytes a backend: one service
/// of `n` backends (per-backend families exported up to the default
/// limit, 10,000).
fn big_sources(n: usize) -> Arc<MetricsSources> {
    use sluice_core::backend::BackendState;
    use sluice_core::ids::{BackendId, ServiceId};
    use sluice_core::service::ServiceState;
    use sluice_core::snapshot::ForwardingState;
    let ids: Vec<BackendId> = (0..n as u32).map(|i| BackendId::new(i, 1)).collect();
    let state = ForwardingState {
        services: vec![ServiceState {
            name: "web".into(),
            encapsulation: sluice_core::encap::Encapsulation::L2,
            affinity: Default::default(),
            tracking: Default::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch: 0,
            tables: vec![],
            backends: ids.clone(),
            quic_lb: None,
        }],
        backends: ids
            .iter()
            .map(|&id| {
                Some(BackendState {
                    id,
                    service: ServiceId(0),
                    address: std::net::Ipv4Addr::from(0x0a01_0000 + id.index() as u32).into(),
                    healthy: true,
                    weight: 1,
                    pool: Default::default(),
                    draining_until: None,
                    egress: Default::default(),
                })
            })
            .collect(),
        ..Default::default()
    };
    let w = Arc::new(sluice_core::stats::WorkerStats::new());
    Arc::new(MetricsSources {
        workers: vec![w],
        snapshot: Arc::new(SnapshotCell::new(state)),
        port_names: vec!["p0".into()],
        control: None,
        ports: vec![],
        kernel_drops: vec![],
        pool: None,
    })
}

/// AP-5: at the connection cap, a reader that stopped taking its
/// scrape makes room before a client just accepted (which then gets
/// its answer), and a scrape being taken is answered in full while
/// stalled readers come and go. Before: the unanswered newcomer was
/// closed first, whatever the stalled reader's age.
#[test]
fn a_stalled_reader_makes_room_before_a_new_client() {
    let limits = Limits {
        max_connections: 2,
        ..LIMITS
    };
    let state = AdminState::new();
    state.publish(big_sources(9_000));
    let server =
        AdminServer::start_with(([127, 0, 0, 1], 0).into(), Arc::clone(&state), limits).unwrap();
    let addr = server.local_addr();
    let stalled = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(4096).unwrap();
        s.connect(&addr.into()).unwrap();
        let mut s: TcpStream = s.into();
        write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        s
    };
    let _a = stalled();
    std::thread::sleep(Duration::from_millis(300));
    // Accepted, its request not sent yet: unanswered, but newer.
    let mut b = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let _c = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(b, "GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = b.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer:?}");

    // A scrape taken in full while stalled readers keep arriving.
    let limits = Limits {
        max_connections: 4,
        ..LIMITS
    };
    let server = AdminServer::start_with(([127, 0, 0, 1], 0).into(), state, limits).unwrap();
    let addr = server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                s.set_recv_buffer_size(4096).unwrap();
                if s.connect(&addr.into()).is_ok() {
                    let mut s: TcpStream = s.into();
                    let _ = write!(s, "GET /metrics HTTP/1.1\r\n\r\n");
                    held.push_back(s);
                    if held.len() > 8 {
                        held.pop_front();
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body);
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    let body = String::from_utf8_lossy(&body);
    let rows = body
        .lines()
        .filter(|l| l.starts_with("sluice_backend_packets_total{"))
        .count();
    assert_eq!(rows, 9_000, "the scrape was cut after {} bytes", body.len());
    assert!(body.ends_with("\n"), "cut mid-line");
}

#[test]
fn the_oldest_unanswered_connection_makes_room() {
    let limits = Limits {
        max_connections: 2,
        ..LIMITS
    };
    let state = AdminState::new();
    let server = AdminServer::start_with(([127, 0, 0, 1], 0).into(), state, limits).unwrap();
    let addr = server.local_addr();
    let mut idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    assert!(get(addr, "/healthz").starts_with("HTTP/1.1 200 "));
    // The first idle connection was closed to make room.
    idle[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(idle[0].read(&mut buf).unwrap_or(0), 0);
}
