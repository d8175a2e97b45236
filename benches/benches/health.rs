//! Health scheduler throughput: N TCP probes at a 1 s interval
//! against a local listener (one socket on 127.0.0.0/8: each backend is a
//! distinct loopback address, so probes are not shared), for a few seconds.
//! Prints probes/s against the ideal N/(interval + latency) and the
//! scheduling lag (how late probes start after they are due).
//!
//! `cargo bench -p sluice-benches --bench health -- 10000 5` (N, seconds).
//!
//! With a third argument `core`, it measures the sans-IO scheduler alone
//! instead: the same N probes over that many *virtual* seconds, every SYN
//! answered at once, no sockets — the CPU the scheduling and state
//! machines cost per probe, apart from the kernel's.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use controlplane::config::TcpCheck;
use controlplane::health::driver::Input;
use controlplane::health::drivers::Driver;
use controlplane::health::scheduler::{Io, Scheduler};
use controlplane::health::Route;
use controlplane::health::{HealthChecker, InitialState, ProbeKey, ProbeKind, StatusMap};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    if args.get(2).is_some_and(|a| a == "core") {
        return core_only(n, secs);
    }
    // Every 127.x.y.z reaches a socket bound to the wildcard address on
    // the loopback interface; nothing leaves the machine.
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            drop(c);
        }
    });
    let keys = keys(n, port);
    let hc = HealthChecker::spawn().unwrap();
    let t0 = Instant::now();
    hc.set_targets(keys);
    std::thread::sleep(Duration::from_secs(secs));
    let elapsed = t0.elapsed().as_secs_f64();
    let status = hc.status.lock().unwrap().clone();
    let probes: u64 = status.values().map(|s| s.probes).sum();
    let healthy = status.values().filter(|s| s.state.healthy).count();
    let lat: f64 = status.values().map(|s| s.latency_sum).sum::<f64>() / probes.max(1) as f64;
    let lag_mean: f64 = status.values().map(|s| s.lag_sum).sum::<f64>() / probes.max(1) as f64;
    let lag_max = status.values().map(|s| s.lag_max).fold(0.0, f64::max);
    // The first round is spread over one interval (jitter), so steady state
    // is N/(interval + latency) probes/s.
    let ideal = f64::from(n) / (1.0 + lat);
    println!(
        "health scheduler: N={n} interval=1s for {elapsed:.1}s: {probes} probes, {:.0} probes/s \
         (ideal ~{ideal:.0}), mean latency {:.3} ms, lag mean {:.3} ms max {:.1} ms, healthy {healthy}/{n}",
        probes as f64 / elapsed,
        lat * 1e3,
        lag_mean * 1e3,
        lag_max * 1e3,
    );
}

/// N TCP probes on distinct loopback addresses, 1 s interval and timeout.
fn keys(n: u32, port: u16) -> Vec<ProbeKey> {
    (0..n)
        .map(|i| ProbeKey {
            route: Route::Direct,
            addr: SocketAddr::new(
                Ipv4Addr::new(127, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8).into(),
                port,
            ),
            kind: ProbeKind::Tcp(TcpCheck),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            healthy_threshold: 2,
            unhealthy_threshold: 2,
            initial: InitialState::Unhealthy,
        })
        .collect()
}

/// The scheduler and drivers alone on virtual time: every run's SYN is
/// answered the instant it is sent.
fn core_only(n: u32, virtual_secs: u64) {
    let status = StatusMap::default();
    let mut sched = Scheduler::new(status.clone(), |k: &ProbeKey| Driver::new(&k.kind, k.addr));
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(virtual_secs);
    let wall = Instant::now();
    sched.set_targets(keys(n, 80), t0);
    while let Some(now) = sched.poll_timeout().filter(|&due| due <= end) {
        sched.handle_timeout(now);
        while let Some(io) = sched.poll_io() {
            if let Io::Open { run, .. } = io {
                sched.handle_input(run, Input::Connected, now);
            }
        }
        while sched.poll_event().is_some() {}
    }
    let cpu = wall.elapsed().as_secs_f64();
    let status = status.lock().unwrap();
    let probes: u64 = status.values().map(|s| s.probes).sum();
    let healthy = status.values().filter(|s| s.state.healthy).count();
    println!(
        "health scheduler core: N={n} over {virtual_secs} virtual s: {probes} probes in {:.3} s \
         ({:.0} ns/probe), healthy {healthy}/{n}",
        cpu,
        cpu * 1e9 / probes.max(1) as f64,
    );
}
