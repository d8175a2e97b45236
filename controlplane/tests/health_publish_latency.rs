//! The real `sluice` binary (one worker on `net_null`) with an HTTP
//! health-check target on loopback: every health flip (HC-4) is one
//! sample of `sluice_health_event_publish_seconds`, the time from the
//! checker's verdict to the publication of the snapshot that reflects it
//! (AP-2), and each sample is short.

mod common;

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// The value of the sample `name` (labels included) in a scrape.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The histogram's count and sum, and the backend's health transitions.
#[derive(Debug, PartialEq)]
struct Seen {
    count: f64,
    sum: f64,
    transitions: f64,
}

fn seen(metrics: u16) -> Option<Seen> {
    let m = scrape(metrics);
    Some(Seen {
        count: sample(&m, "sluice_health_event_publish_seconds_count")?,
        sum: sample(&m, "sluice_health_event_publish_seconds_sum")?,
        transitions: sample(
            &m,
            "sluice_backend_health_transitions_total{backend=\"127.0.0.1\",service=\"web\"}",
        )?,
    })
}

/// Scrapes until the backend has made `transitions` health transitions
/// and the histogram has caught up with them (the two are updated one
/// after the other on the control thread).
fn wait_for(metrics: u16, transitions: f64) -> Seen {
    let start = Instant::now();
    loop {
        let now = seen(metrics);
        if let Some(s) = &now {
            if s.transitions >= transitions && s.count >= s.transitions {
                return now.unwrap();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not {transitions} transitions, each in the histogram: {now:?}\n{}",
            scrape(metrics)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// HC-4 flips through the binary, AP-2 publication: the histogram counts
/// each flip once, and the sum of the samples is above zero and below
/// two seconds per flip (the control loop picks flips up every 10 ms).
#[test]
fn each_health_flip_is_one_publish_latency_sample() {
    let dir = tempdir("health-publish-latency");
    let status = Arc::new(AtomicU16::new(200));
    let hc = status_target(Arc::clone(&status));
    let metrics = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.join("sluice.toml");
    std::fs::write(
        &cfg,
        null_dataplane(metrics)
            + &format!(
                r#"
[[health_check]]
name = "http"
type = "HTTP"
port = {hc}
request_path = "/"
check_interval = "100ms"
timeout = "100ms"
healthy_threshold = 1
unhealthy_threshold = 2
[[backend_service]]
name = "web"
health_check = "http"
backend = [{{ address = "127.0.0.1" }}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
"#
            ),
    )
    .unwrap();
    let _run = RunningSluice::start(&cfg, &dir.join("control.sock"), 30);

    // The first verdict (healthy) is a flip too.
    let up = wait_for(metrics, 1.0);
    assert_eq!(up.count, up.transitions, "{up:?}");
    status.store(503, Ordering::Relaxed);
    let down = wait_for(metrics, up.transitions + 1.0);
    status.store(200, Ordering::Relaxed);
    let back = wait_for(metrics, down.transitions + 1.0);

    for (before, after) in [(&up, &down), (&down, &back)] {
        let flips = after.transitions - before.transitions;
        assert_eq!(flips, 1.0, "{before:?} -> {after:?}");
        assert_eq!(after.count - before.count, flips, "{before:?} -> {after:?}");
        let seconds = after.sum - before.sum;
        assert!(
            seconds > 0.0 && seconds < 2.0 * flips,
            "{seconds} s for {flips} flips: {before:?} -> {after:?}"
        );
    }
    let m = scrape(metrics);
    assert_eq!(
        sample(
            &m,
            "sluice_health_event_publish_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(back.count),
        "{m}"
    );
    assert!(
        m.contains("# HELP sluice_health_event_publish_seconds Seconds from a health checker's"),
        "{m}"
    );
}
