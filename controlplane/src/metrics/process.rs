//! The process's own metrics: what binary runs (`sluice_build_info`), the
//! standard `process_*` families (`crate::proc_self`: CPU time, resident
//! memory, open descriptors, start time), how long ago the control loop
//! last ran, and the packet pool's mbufs in use.

use std::time::Duration;

use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, IntGauge, IntGaugeVec, Opts};

use crate::proc_self::{self, GIT_COMMIT, VERSION};

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
    if let Some(seconds) = proc_self::cpu_seconds() {
        let c = prometheus::Counter::new(
            "process_cpu_seconds_total",
            "CPU time the process used, user and system, in seconds.",
        )
        .expect("valid metric definition");
        c.inc_by(seconds);
        out.extend(c.collect());
    }
    if let Some(bytes) = proc_self::resident_bytes() {
        out.extend(gauge(
            "process_resident_memory_bytes",
            "Resident memory of the process in bytes (hugepages not included).",
            bytes as f64,
        ));
    }
    if let Some(fds) = proc_self::open_fds() {
        out.extend(gauge(
            "process_open_fds",
            "File descriptors the process has open.",
            fds as f64,
        ));
    }
    if let Some(start) = proc_self::start_time_seconds() {
        out.extend(gauge(
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch.",
            start,
        ));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

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
