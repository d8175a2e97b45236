//! The scheduler on virtual time ([`crate::health::sim`]): the real
//! drivers against scripted backends, every instant exact, no sleeps.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::config::{HttpCheck, TcpCheck, UdpCheck};
use crate::health::drivers::Driver;
use crate::health::sim::{Answer, Backend, Sim};
use crate::health::Route;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sim() -> Sim<Driver> {
    Sim::new(|k: &ProbeKey| Driver::new(&k.kind, k.addr))
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

struct K {
    interval: Duration,
    timeout: Duration,
    healthy: u32,
    unhealthy: u32,
    initial: InitialState,
}

const K: K = K {
    interval: Duration::from_secs(2),
    timeout: Duration::from_secs(5),
    healthy: 3,
    unhealthy: 3,
    initial: InitialState::Healthy,
};

fn key(addr: SocketAddr, kind: ProbeKind, k: K) -> ProbeKey {
    ProbeKey {
        route: Route::Direct,
        addr,
        kind,
        interval: k.interval,
        timeout: k.timeout,
        healthy_threshold: k.healthy,
        unhealthy_threshold: k.unhealthy,
        initial: k.initial,
    }
}

fn silent() -> Backend {
    Backend::new(Answer::Silent, Duration::ZERO)
}

fn replies(bytes: &[u8], delay: Duration) -> Backend {
    Backend::new(Answer::Reply(bytes.to_vec()), delay)
}

fn refuses(delay: Duration) -> Backend {
    Backend::new(Answer::Refuse, delay)
}

/// The first run's start (after its jitter).
fn first_open(s: &mut Sim<Driver>, k: &ProbeKey) -> Instant {
    s.run_until(s.now + k.interval);
    s.opens(k.addr)[0].0
}

/// HC-4's worked example through the scheduler and the TCP driver: timeout
/// 5 s, interval 2 s, thresholds 3/3 — a silent backend is unhealthy 19 s
/// after its first probe started, and, answering in 1 s from the next
/// probe on, healthy again 7 s after that probe started.
#[test]
fn hc_4_failure_window_19s_success_window_7s() {
    let mut s = sim();
    let a = addr("192.0.2.10:80");
    let k = key(a, ProbeKind::Tcp(TcpCheck), K);
    s.backend(a, silent());
    s.set_targets(vec![k.clone()]);
    let first = first_open(&mut s, &k);
    assert!(first < s.t0 + K.interval, "first run within one interval");
    s.run_until(first + Duration::from_secs(19) - ms(1));
    assert!(s.flips(&k).is_empty());
    s.run_until(first + Duration::from_secs(19));
    assert_eq!(s.flips(&k), [(first + Duration::from_secs(19), false)]);
    let st = s.status(&k);
    assert_eq!(st.last_failure, Some(FailureReason::Timeout));
    assert_eq!(st.failures[FailureReason::Timeout.index()], 3);

    s.backend(
        a,
        Backend::new(Answer::Reply(vec![]), Duration::from_secs(1)),
    );
    let next = first + Duration::from_secs(21);
    s.run_until(next + Duration::from_secs(7));
    assert_eq!(s.opens(a).last().unwrap().0, next + Duration::from_secs(6));
    assert_eq!(s.flips(&k)[1], (next + Duration::from_secs(7), true));
    assert_eq!(s.status(&k).last_failure, None);
}

/// HC-3/HC-4: each run starts `interval` after the previous one finished
/// — answered (here after 300 ms) or timed out at its deadline (500 ms),
/// when its socket is closed.
#[test]
fn hc_3_next_run_starts_interval_after_the_previous_finished() {
    let mut s = sim();
    let a = addr("192.0.2.10:80");
    let k = key(
        a,
        ProbeKind::Tcp(TcpCheck),
        K {
            interval: ms(1000),
            timeout: ms(500),
            ..K
        },
    );
    s.backend(a, replies(b"", ms(300)));
    s.set_targets(vec![k.clone()]);
    let f = first_open(&mut s, &k);
    s.run_until(f + ms(2700));
    let starts: Vec<Instant> = s.opens(a).iter().map(|o| o.0).collect();
    assert_eq!(starts, [f, f + ms(1300), f + ms(2600)]);
    let st = s.status(&k);
    assert_eq!(st.latency_counts[6], 2, "0.3 s lands in the ≤ 0.5 s bucket");

    s.backend(a, silent());
    s.run_until(f + ms(5400));
    let opens = s.opens(a);
    let timed_out = opens[3].1;
    assert_eq!(opens[3].0, f + ms(3900));
    assert_eq!(
        s.closed_at(timed_out),
        Some(f + ms(4400)),
        "closed at the deadline"
    );
    assert_eq!(opens[4].0, f + ms(5400));
    let st = s.status(&k);
    assert_eq!(st.failures[FailureReason::Timeout.index()], 1);
    assert!(
        (st.latency_sum - (2.0 * 0.3 + 0.3 + 0.5)).abs() < 1e-9,
        "{st:?}"
    );
}

/// HC-3: failures short of `unhealthy_threshold` keep the backend healthy
/// (and in the tables: no event), and one success resets the count.
#[test]
fn hc_3_failures_short_of_the_threshold_change_nothing() {
    let mut s = sim();
    let a = addr("192.0.2.10:80");
    let k = key(a, ProbeKind::Tcp(TcpCheck), K);
    s.backend(a, refuses(ms(1)));
    s.set_targets(vec![k.clone()]);
    let f = first_open(&mut s, &k);
    // Two refusals (runs at f and f + 2.001 s), then answers.
    s.run_until(f + ms(2500));
    assert_eq!(s.status(&k).state.consecutive_failures, 2);
    assert_eq!(s.status(&k).last_failure, Some(FailureReason::Refused));
    s.backend(a, replies(b"", ms(1)));
    s.run_until(f + ms(4500));
    s.backend(a, refuses(ms(1)));
    s.run_until(f + ms(8500));
    let st = s.status(&k);
    assert!(st.state.healthy);
    assert_eq!(st.state.consecutive_failures, 2);
    assert_eq!(st.failures[FailureReason::Refused.index()], 4);
    assert!(s.events.is_empty(), "no health change reached the tables");
}

/// HC-5: an unhealthy backend is still probed every interval and returns
/// after `healthy_threshold` consecutive successes.
#[test]
fn hc_5_unhealthy_backend_is_probed_and_returns() {
    let mut s = sim();
    let a = addr("192.0.2.10:80");
    let k = key(
        a,
        ProbeKind::Tcp(TcpCheck),
        K {
            healthy: 2,
            initial: InitialState::Unhealthy,
            ..K
        },
    );
    s.backend(a, refuses(ms(0)));
    s.set_targets(vec![k.clone()]);
    let f = first_open(&mut s, &k);
    s.run_until(f + Duration::from_secs(20));
    assert_eq!(s.status(&k).probes, 11, "probed every 2 s while unhealthy");
    s.backend(a, replies(b"", ms(10)));
    s.run_until(f + Duration::from_secs(30));
    // Runs at 22 s and 24.01 s pass; the second flips it.
    assert_eq!(s.flips(&k), [(f + ms(24_020), true)]);
}

/// HC-4's jitter: first runs spread over one interval by a stable hash of
/// the key — the same offsets on every start, no burst at one instant.
#[test]
fn hc_4_jitter_spreads_first_runs_over_one_interval() {
    let keys: Vec<ProbeKey> = (0..1000u32)
        .map(|i| {
            let a = SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 80));
            key(
                a,
                ProbeKind::Tcp(TcpCheck),
                K {
                    interval: ms(1000),
                    timeout: ms(500),
                    ..K
                },
            )
        })
        .collect();
    let offsets = || {
        let mut s = sim();
        s.set_targets(keys.clone());
        s.run_until(s.t0 + ms(999));
        let t0 = s.t0;
        let mut o: Vec<Duration> = s
            .log
            .iter()
            .filter(|l| matches!(l.io, Io::Open { .. }))
            .map(|l| l.at - t0)
            .collect();
        o.sort();
        o
    };
    let a = offsets();
    assert_eq!(a.len(), 1000, "every probe started within one interval");
    let mut buckets = [0u32; 10];
    for o in &a {
        buckets[(o.as_millis() / 100) as usize] += 1;
    }
    assert!(
        buckets.iter().all(|&n| (50..=150).contains(&n)),
        "{buckets:?}"
    );
    assert_eq!(a, offsets(), "stable across starts");
}

/// AP-5 reload: a probe whose key stays keeps its state and schedule; a
/// removed one has its run in flight closed at once; a new key (or one
/// whose parameters changed) starts from its initial state.
#[test]
fn ap_5_reload_keeps_unchanged_probes_and_closes_removed_runs() {
    let mut s = sim();
    let (a, b, c) = (
        addr("192.0.2.10:80"),
        addr("192.0.2.11:80"),
        addr("192.0.2.12:80"),
    );
    let ka = key(a, ProbeKind::Tcp(TcpCheck), K);
    let kb = key(b, ProbeKind::Tcp(TcpCheck), K);
    s.backend(a, replies(b"", ms(10)));
    s.backend(b, silent());
    s.set_targets(vec![ka.clone(), kb.clone()]);
    s.run_until(s.t0 + Duration::from_secs(10));
    let before = s.status(&ka);
    let b_run = *s
        .open_runs()
        .iter()
        .find(|r| s.opens(b).iter().any(|o| o.1 == **r))
        .unwrap();
    let kc = key(
        c,
        ProbeKind::Tcp(TcpCheck),
        K {
            initial: InitialState::Unhealthy,
            ..K
        },
    );
    let reload = s.now;
    s.set_targets(vec![ka.clone(), kc.clone()]);
    assert_eq!(
        s.closed_at(b_run),
        Some(reload),
        "removed run closed at once"
    );
    assert_eq!(s.status(&ka), before, "kept");
    assert!(!s.status.lock().unwrap().contains_key(&kb));
    assert_eq!(s.status(&kc), ProbeStatus::new(InitialState::Unhealthy));
    // A's schedule is untouched: its next run comes interval after its
    // last finished, not at a new jitter.
    let (n, last_a) = (s.opens(a).len(), s.opens(a).last().unwrap().0);
    s.run_until(last_a + ms(2010));
    assert_eq!(s.opens(a).len(), n + 1, "one more run");
    assert_eq!(s.opens(a).last().unwrap().0, last_a + ms(2010));

    // Same address, another interval: a new probe, from its initial state.
    let ka2 = ProbeKey {
        interval: Duration::from_secs(3),
        initial: InitialState::Unhealthy,
        ..ka.clone()
    };
    s.set_targets(vec![ka2.clone(), kc]);
    assert!(!s.status.lock().unwrap().contains_key(&ka));
    assert!(!s.status(&ka2).state.healthy);
}

/// A late answer — after the run's deadline, or for a removed probe — is
/// ignored; duplicate keys share one probe.
#[test]
fn late_answers_are_ignored_and_duplicate_keys_share_a_probe() {
    let mut s = sim();
    let a = addr("192.0.2.10:80");
    let k = key(a, ProbeKind::Tcp(TcpCheck), K);
    s.backend(a, silent());
    s.set_targets(vec![k.clone(), k.clone()]);
    let f = first_open(&mut s, &k);
    s.run_until(f + Duration::from_secs(5));
    let (_, run) = s.opens(a)[0];
    assert_eq!(s.opens(a).len(), 1, "one probe for both");
    let st = s.status(&k);
    assert_eq!(st.probes, 1);
    let log = s.log.len();
    s.sched.handle_input(run, Input::Connected, s.now + ms(1));
    assert_eq!(s.status(&k), st, "late SYN-ACK changed nothing");
    assert!(s.sched.poll_io().is_none());
    assert_eq!(s.log.len(), log);
}

/// Scheduling lag: how late a run started after it was due.
#[test]
fn lag_is_how_late_a_run_started() {
    let status = StatusMap::default();
    let mut sched = Scheduler::new(Arc::clone(&status), |k: &ProbeKey| {
        Driver::new(&k.kind, k.addr)
    });
    let k = key(addr("192.0.2.10:80"), ProbeKind::Tcp(TcpCheck), K);
    let t0 = Instant::now();
    sched.set_targets(vec![k.clone()], t0);
    let due = sched.poll_timeout().unwrap();
    assert_eq!(due, t0 + jitter(&k));
    sched.handle_timeout(due + ms(30));
    assert!(matches!(
        sched.poll_io(),
        Some(Io::Open {
            transport: Transport::Handshake,
            ..
        })
    ));
    let st = status.lock().unwrap()[&k].clone();
    assert!((st.lag_sum - 0.030).abs() < 1e-9 && st.lag_max == st.lag_sum);
    assert_eq!(sched.poll_timeout(), Some(due + ms(30) + K.timeout));
}

/// HC-2 and HC-7 through the scheduler: the request names the backend
/// (`Host: ip:port`), the weight header sets the weight, a status outside
/// `response_codes` fails under `http_status`.
#[test]
fn hc_2_hc_7_http_probe_on_virtual_time() {
    let mut s = sim();
    let a = addr("192.0.2.10:8080");
    let kind = ProbeKind::Http(HttpCheck {
        request_path: "/healthz".into(),
        host: None,
        response_codes: vec![200],
    });
    let k = key(
        a,
        kind,
        K {
            healthy: 1,
            unhealthy: 2,
            initial: InitialState::Unhealthy,
            ..K
        },
    );
    let ok = b"HTTP/1.1 200 OK\r\nX-Load-Balancing-Endpoint-Weight: 40\r\n\r\n";
    s.backend(a, replies(ok, ms(5)));
    s.set_targets(vec![k.clone()]);
    let f = first_open(&mut s, &k);
    s.run_until(f + ms(5));
    assert_eq!(s.flips(&k), [(f + ms(5), true)]);
    assert_eq!(s.status(&k).state.weight, 40);
    let sent = s.log.iter().find_map(|l| match &l.io {
        Io::Send { bytes, .. } => Some(String::from_utf8_lossy(bytes).to_string()),
        _ => None,
    });
    assert!(sent.unwrap().contains("\r\nHost: 192.0.2.10:8080\r\n"));

    s.backend(a, replies(b"HTTP/1.1 503 Down\r\n\r\n", ms(5)));
    s.run_until(f + Duration::from_secs(10));
    let st = s.status(&k);
    assert!(!st.state.healthy);
    assert_eq!(st.last_failure, Some(FailureReason::HttpStatus));
    assert_eq!(st.state.weight, 40, "a failure keeps the weight");
}

/// The UDP probe through the scheduler: an echo backend passes; a closed
/// port fails at once on the ICMP port unreachable; a silent backend
/// fails by timeout (HC-4's window); a reply without `response` fails
/// as a mismatch.
#[test]
fn udp_echo_closed_silent_and_mismatched_backends() {
    let mut s = sim();
    let kind = ProbeKind::Udp(UdpCheck {
        request: b"ping".to_vec(),
        response: Some(b"pong".to_vec()),
    });
    let k = |a: &str| {
        key(
            addr(a),
            kind.clone(),
            K {
                interval: ms(1000),
                timeout: ms(500),
                healthy: 2,
                unhealthy: 2,
                initial: InitialState::Unhealthy,
            },
        )
    };
    let (echo, closed, quiet, wrong) = (
        k("192.0.2.1:53"),
        k("192.0.2.2:53"),
        k("192.0.2.3:53"),
        k("192.0.2.4:53"),
    );
    s.backend(echo.addr, replies(b"pong", ms(2)));
    s.backend(closed.addr, refuses(ms(1)));
    s.backend(quiet.addr, silent());
    s.backend(wrong.addr, replies(b"pang", ms(2)));
    s.set_targets(vec![
        echo.clone(),
        closed.clone(),
        quiet.clone(),
        wrong.clone(),
    ]);
    s.run_until(s.t0 + Duration::from_secs(10));

    let sent: Vec<&[u8]> = s
        .log
        .iter()
        .filter_map(|l| match &l.io {
            Io::Send { bytes, .. } => Some(bytes.as_slice()),
            _ => None,
        })
        .collect();
    assert!(!sent.is_empty() && sent.iter().all(|b| *b == b"ping"));

    let f = s.opens(echo.addr)[0].0;
    assert_eq!(s.flips(&echo), [(f + ms(1002 + 2), true)]);
    let st = s.status(&echo);
    assert_eq!(
        (st.last_failure, st.failures.iter().sum::<u64>()),
        (None, 0)
    );

    for (k, reason, latency) in [
        (&closed, FailureReason::PortUnreachable, 0.001),
        (&quiet, FailureReason::Timeout, 0.5),
        (&wrong, FailureReason::ResponseMismatch, 0.002),
    ] {
        let st = s.status(k);
        assert!(!st.state.healthy);
        assert_eq!(st.last_failure, Some(reason), "{:?}", k.addr);
        assert_eq!(st.failures[reason.index()], st.probes);
        assert!(
            (st.latency_sum / st.probes as f64 - latency).abs() < 1e-9,
            "{reason:?} decided after {latency} s"
        );
    }
    // A port unreachable ends the run (and closes its socket) at once.
    for (at, run) in s.opens(closed.addr) {
        assert_eq!(s.closed_at(run), Some(at + ms(1)));
    }
}

/// The scheduler is generic over the drivers: the verdict at a deadline
/// is the driver's (here a probe for which silence is good news).
#[test]
fn the_verdict_at_the_deadline_is_the_drivers() {
    struct NoNewsIsGoodNews;
    impl Probe for NoNewsIsGoodNews {
        fn start(&mut self, _now: Instant) -> Transport {
            Transport::Datagram
        }
        fn on_input(&mut self, _input: Input<'_>, _now: Instant) -> Step {
            Step::Wait
        }
        fn on_timeout(&mut self, _now: Instant) -> ProbeResult {
            ProbeResult::Success {
                weight: crate::health::WeightReport::NotApplicable,
            }
        }
    }
    let mut s = Sim::new(|_: &ProbeKey| NoNewsIsGoodNews);
    let a = addr("192.0.2.10:80");
    let k = key(
        a,
        ProbeKind::Tcp(TcpCheck),
        K {
            healthy: 1,
            initial: InitialState::Unhealthy,
            ..K
        },
    );
    s.set_targets(vec![k.clone()]);
    s.run_until(s.t0 + Duration::from_secs(8));
    let f = s.opens(a)[0].0;
    assert_eq!(s.flips(&k), [(f + Duration::from_secs(5), true)]);
}
