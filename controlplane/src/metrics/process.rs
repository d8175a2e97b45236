//! The process's own metrics: what binary runs (`sluice_build_info`), the
//! standard `process_*` families (`crate::proc_self`: CPU time, resident
//! memory, open descriptors, start time), how long ago the control loop
//! last ran, and the packet pool's mbufs in use.

use std::time::Duration;

use prometheus::proto::MetricFamily;

use super::catalog;
use crate::proc_self::{self, GIT_COMMIT, VERSION};

/// `sluice_build_info{version,revision,dpdk} 1`: `revision` is the git
/// commit, named as build-info metrics conventionally name it.
pub fn build_info() -> Vec<MetricFamily> {
    let g = catalog::BUILD_INFO.ints();
    g.put(&[VERSION, GIT_COMMIT, dataplane::dpdk::DPDK_VERSION], 1);
    g.collect()
}

/// The process counters Prometheus client libraries export under these
/// names; a file that cannot be read leaves its family out.
pub fn process() -> Vec<MetricFamily> {
    let mut out = Vec::new();
    if let Some(seconds) = proc_self::cpu_seconds() {
        out.extend(catalog::PROCESS_CPU_SECONDS.float(seconds));
    }
    if let Some(bytes) = proc_self::resident_bytes() {
        out.extend(catalog::PROCESS_RESIDENT_MEMORY_BYTES.float(bytes as f64));
    }
    if let Some(fds) = proc_self::open_fds() {
        out.extend(catalog::PROCESS_OPEN_FDS.float(fds as f64));
    }
    if let Some(start) = proc_self::start_time_seconds() {
        out.extend(catalog::PROCESS_START_TIME_SECONDS.float(start));
    }
    out
}

/// `sluice_control_loop_last_run_age_seconds`: the `/healthz` liveness
/// measure as a number an alert can compare.
pub fn control_loop(since_beat: Duration) -> Vec<MetricFamily> {
    catalog::CONTROL_LOOP_LAST_RUN_AGE_SECONDS.float(since_beat.as_secs_f64())
}

/// Mbufs out of the packet pool and the pool's size.
pub fn mbuf_pool(in_use: usize, size: usize) -> Vec<MetricFamily> {
    let mut out = catalog::MBUF_POOL_IN_USE.int(in_use as u64);
    out.extend(catalog::MBUF_POOL_SIZE.int(size as u64));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_families_are_read_here() {
        let names: Vec<String> = process().iter().map(|f| f.name().to_string()).collect();
        let declared = catalog::ALL
            .iter()
            .filter(|f| f.name.starts_with("process_"));
        for n in declared.map(|f| f.name) {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
    }
}
