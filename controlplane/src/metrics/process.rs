//! The process's own metrics: what binary runs (`sluice_build_info`), the
//! standard `process_*` families read from `/proc/self` (CPU time,
//! resident memory, open descriptors, start time), how long ago the
//! control loop last ran, and the packet pool's mbufs in use.

use std::time::Duration;

use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, IntGauge, IntGaugeVec, Opts};

/// The crate version of the binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from ("unknown" outside git).
pub const GIT_COMMIT: &str = env!("SLUICE_GIT_COMMIT");

/// Linux reports process times in clock ticks of `USER_HZ`, 100 on every
/// architecture sluice runs on.
const USER_HZ: f64 = 100.0;

/// `sluice_build_info{version,revision,dpdk} 1`: `revision` is the git
/// commit, named as build-info metrics conventionally name it.
pub fn build_info() -> Vec<MetricFamily> {
    let g = IntGaugeVec::new(
        Opts::new(
            "sluice_build_info",
            "Always 1: the sluice version, the git commit it was built from and the DPDK \
             version it was built against, as labels.",
        ),
        &["version", "revision", "dpdk"],
    )
    .expect("valid metric definition");
    g.with_label_values(&[VERSION, GIT_COMMIT, dataplane::dpdk::DPDK_VERSION])
        .set(1);
    g.collect()
}

fn gauge(name: &str, help: &str, v: f64) -> Vec<MetricFamily> {
    let g = Gauge::new(name, help).expect("valid metric definition");
    g.set(v);
    g.collect()
}

/// The process counters Prometheus client libraries export under these
/// names; a file that cannot be read leaves its family out.
pub fn process() -> Vec<MetricFamily> {
    let mut out = Vec::new();
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let fields = stat.as_deref().and_then(stat_fields);
    if let Some(f) = &fields {
        let c = prometheus::Counter::new(
            "process_cpu_seconds_total",
            "CPU time the process used, user and system, in seconds.",
        )
        .expect("valid metric definition");
        c.inc_by((f.utime + f.stime) as f64 / USER_HZ);
        out.extend(c.collect());
    }
    if let Some(rss) = status_kib("VmRSS") {
        out.extend(gauge(
            "process_resident_memory_bytes",
            "Resident memory of the process in bytes (hugepages not included).",
            (rss * 1024) as f64,
        ));
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        out.extend(gauge(
            "process_open_fds",
            "File descriptors the process has open.",
            dir.count() as f64,
        ));
    }
    if let (Some(f), Some(boot)) = (&fields, boot_time()) {
        out.extend(gauge(
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch.",
            boot as f64 + f.starttime as f64 / USER_HZ,
        ));
    }
    out
}

/// Seconds since the process started (`/proc/uptime` less the process's
/// start time after boot), None where `/proc` cannot be read.
pub fn uptime_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let started = stat_fields(&stat)?.starttime as f64 / USER_HZ;
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // Both are in hundredths of a second.
    Some(((up - started) * 100.0).round().max(0.0) / 100.0)
}

/// `sluice_control_loop_last_run_age_seconds`: the `/healthz` liveness
/// measure as a number an alert can compare.
pub fn control_loop(since_beat: Duration) -> Vec<MetricFamily> {
    gauge(
        "sluice_control_loop_last_run_age_seconds",
        "Seconds since the control loop (health events, reloads, table builds) last ran; \
         it runs at least every few hundred milliseconds, and /healthz fails above 10.",
        since_beat.as_secs_f64(),
    )
}

/// Mbufs out of the packet pool and the pool's size.
pub fn mbuf_pool(in_use: usize, size: usize) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    for (name, help, v) in [
        (
            "sluice_mbuf_pool_in_use",
            "Packet buffers (mbufs) out of the pool: in ports' receive rings, bursts, \
             steering and TAP rings, or being sent.",
            in_use,
        ),
        (
            "sluice_mbuf_pool_size",
            "Packet buffers (mbufs) the pool holds in all.",
            size,
        ),
    ] {
        let g = IntGauge::new(name, help).expect("valid metric definition");
        g.set(i64::try_from(v).unwrap_or(i64::MAX));
        out.extend(g.collect());
    }
    out
}

/// The fields of `/proc/self/stat` used here.
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
}

/// Parses `/proc/<pid>/stat`: fields after the command name (which may
/// hold spaces and parentheses) counted from field 3, per proc(5).
fn stat_fields(text: &str) -> Option<StatFields> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let at = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime: at(14)?,
        stime: at(15)?,
        starttime: at(22)?,
    })
}

/// A `kB` line of `/proc/self/status`.
fn status_kib(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The boot time from `/proc/stat` (`btime`), seconds since the epoch.
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_with_spaces_and_parentheses() {
        let text = "42 (sl (x) y) S 1 2 3 4 5 6 7 8 9 10 110 220 0 0 20 0 3 0 4242 0 0";
        let f = stat_fields(text).unwrap();
        assert_eq!((f.utime, f.stime, f.starttime), (110, 220, 4242));
    }

    #[test]
    fn process_families_are_read_here() {
        let names: Vec<String> = process().iter().map(|f| f.name().to_string()).collect();
        for n in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
    }
}
