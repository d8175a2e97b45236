//! `[dataplane] idle` and `idle_sleep_max_us` (AP-5): the accepted values
//! and defaults, and every refusal named by file:line, field and fix.

use std::time::Duration;

use controlplane::config;
use dataplane::worker::IdlePolling;

const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]
IDLE
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"
"#;

fn with(idle_lines: &str) -> String {
    BASE.replace("IDLE\n", idle_lines)
}

fn idle_of(idle_lines: &str) -> IdlePolling {
    config::load_str(&with(idle_lines), "test.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .dataplane
        .idle
}

/// The single error of `idle_lines`: it names the line holding `at`, the
/// field `path`, and carries `message` and `hint`.
fn refused(idle_lines: &str, at: &str, path: &str, message: &str, hint: &str) {
    let text = with(idle_lines);
    let out = match config::load_str(&text, "test.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(d) => {
            assert_eq!(d.len(), 1, "{d}");
            d.to_string()
        }
    };
    let line = text.lines().position(|l| l.contains(at)).unwrap() + 1;
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    assert!(first.starts_with(&format!("test.toml:{line}:")), "{out}");
    assert!(first.contains(&format!(": error: {path}: ")), "{out}");
    assert!(first.contains(message), "{out}");
    let second = lines.next().unwrap();
    assert!(
        second.starts_with("  hint: ") && second.contains(hint),
        "{out}"
    );
}

#[test]
fn workers_busy_poll_unless_told_otherwise() {
    assert_eq!(idle_of(""), IdlePolling::Busy);
    assert_eq!(idle_of("idle = \"busy\"\n"), IdlePolling::Busy);
}

#[test]
fn adaptive_idle_sleeps_at_most_1_ms_by_default() {
    assert_eq!(
        idle_of("idle = \"adaptive\"\n"),
        IdlePolling::Adaptive {
            sleep_max: Duration::from_micros(1000)
        }
    );
    assert_eq!(
        idle_of("idle = \"adaptive\"\nidle_sleep_max_us = 100\n"),
        IdlePolling::Adaptive {
            sleep_max: Duration::from_micros(100)
        }
    );
    assert_eq!(
        idle_of("idle = \"adaptive\"\nidle_sleep_max_us = 10000\n"),
        IdlePolling::Adaptive {
            sleep_max: Duration::from_micros(10_000)
        }
    );
}

#[test]
fn ap_5_an_unknown_idle_mode_names_the_two() {
    refused(
        "idle = \"sleepy\"\n",
        "idle =",
        "dataplane.idle",
        "unknown value \"sleepy\"",
        "use one of \"busy\", \"adaptive\": \"busy\" polls without pause",
    );
    refused(
        "idle = \"Adaptive\"\n",
        "idle =",
        "dataplane.idle",
        "unknown value \"Adaptive\"",
        "did you mean \"adaptive\"?",
    );
}

#[test]
fn ap_5_the_sleep_bound_is_1_us_to_10_ms() {
    for bad in ["0", "10001", "-5"] {
        refused(
            &format!("idle = \"adaptive\"\nidle_sleep_max_us = {bad}\n"),
            "idle_sleep_max_us",
            "dataplane.idle_sleep_max_us",
            &format!("idle_sleep_max_us {bad} is out of range"),
            "in microseconds, from 1 to 10000",
        );
    }
}

#[test]
fn ap_5_a_sleep_bound_without_adaptive_idle_is_refused() {
    for lines in [
        "idle_sleep_max_us = 200\n",
        "idle = \"busy\"\nidle_sleep_max_us = 200\n",
    ] {
        refused(
            lines,
            "idle_sleep_max_us",
            "dataplane.idle_sleep_max_us",
            "idle_sleep_max_us is set but workers busy-poll",
            "set idle = \"adaptive\" in [dataplane]",
        );
    }
}
