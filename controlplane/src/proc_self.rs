//! This process as its build and `/proc/self` describe it: the version and
//! commit it was built from, and what the kernel reports of it (CPU time,
//! resident memory, open descriptors, start time, uptime). Read by the
//! metrics (`crate::metrics::process`) and `sluice status --json`.

/// The crate version of the binary.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from ("unknown" outside git).
pub const GIT_COMMIT: &str = env!("SLUICE_GIT_COMMIT");

/// Linux reports process times in clock ticks of `USER_HZ`, 100 on every
/// architecture sluice runs on.
const USER_HZ: f64 = 100.0;

/// CPU time the process used, user and system, in seconds.
pub fn cpu_seconds() -> Option<f64> {
    let f = stat()?;
    Some((f.utime + f.stime) as f64 / USER_HZ)
}

/// Resident memory in bytes (`VmRSS`; hugepages are not in it).
pub fn resident_bytes() -> Option<u64> {
    status_kib("VmRSS").map(|kib| kib * 1024)
}

/// File descriptors the process has open.
pub fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

/// When the process started, in seconds since the Unix epoch.
pub fn start_time_seconds() -> Option<f64> {
    let f = stat()?;
    Some(boot_time()? as f64 + f.starttime as f64 / USER_HZ)
}

/// Seconds since the process started (`/proc/uptime` less the process's
/// start time after boot), None where `/proc` cannot be read.
pub fn uptime_seconds() -> Option<f64> {
    let started = stat()?.starttime as f64 / USER_HZ;
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // Both are in hundredths of a second.
    Some(((up - started) * 100.0).round().max(0.0) / 100.0)
}

/// The fields of `/proc/self/stat` used here.
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
}

fn stat() -> Option<StatFields> {
    stat_fields(&std::fs::read_to_string("/proc/self/stat").ok()?)
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
    fn the_running_process_is_read() {
        assert!(cpu_seconds().is_some());
        assert!(resident_bytes().is_some_and(|b| b > 0));
        assert!(open_fds().is_some_and(|n| n > 0));
        assert!(start_time_seconds().is_some());
        assert!(uptime_seconds().is_some());
    }
}
