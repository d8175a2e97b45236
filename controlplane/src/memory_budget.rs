//! Before anything starts: whether the conntrack shards the configuration
//! asks for fit in this machine's memory. Each worker's shard is allocated
//! and written at start (never on the packet path), so a capacity
//! the machine cannot back would otherwise end in an allocation abort or the
//! OOM killer part-way through start-up, with no word on which setting to
//! change.

use sluice_core::conntrack::Shard;

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes of conntrack table that `workers` shards sized for `capacity`
/// connections reserve.
pub fn conntrack_bytes(workers: usize, capacity: usize) -> u64 {
    let per_worker = Shard::slots_for(capacity).saturating_mul(Shard::bytes_per_slot());
    (per_worker as u64).saturating_mul(workers as u64)
}

/// The memory this process can get: the kernel's `MemAvailable` (what it
/// can hand out without swapping), or less if an address-space limit
/// (`ulimit -v`) or the process's memory cgroup limit (a container's, v1
/// or v2) says so. None when none of them can be read.
pub fn available_bytes() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let avail = read("/proc/meminfo").as_deref().and_then(mem_available);
    let limit = read("/proc/self/limits")
        .as_deref()
        .and_then(address_space_limit);
    let cgroup = read("/proc/self/cgroup")
        .as_deref()
        .and_then(|c| cgroup_limit(c, |p| read(p)));
    [avail, limit, cgroup].into_iter().flatten().min()
}

/// The memory limit of the process's memory cgroup, from the files `read`
/// returns; None without a limit or when the files are not there (e.g. a
/// cgroup namespace hides the path). The limit, not limit minus usage:
/// usage counts page cache the kernel would reclaim for the shards, and a
/// refusal must never be wrong.
fn cgroup_limit(self_cgroup: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    let file = if let Some(path) = self_cgroup
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p))
    {
        format!(
            "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
            path.trim_end_matches('/')
        )
    } else {
        let path = self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
        format!("/sys/fs/cgroup{}/memory.max", path.trim_end_matches('/'))
    };
    // v2 writes no limit as "max" (does not parse), v1 as a page-rounded
    // i64::MAX.
    let limit = read(&file)?.trim().parse::<u64>().ok()?;
    (limit < 1 << 60).then_some(limit)
}

/// `MemAvailable:   12345678 kB` → bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The soft limit of `Max address space` in bytes; None when unlimited.
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    line.trim_start_matches("Max address space")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `dataplane.conntrack_capacity` asks for more conntrack table than
/// this machine can back: the setting, what it costs, and the largest
/// capacity that would fit (None: not even the smallest).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "dataplane.conntrack_capacity = {capacity}: {workers} worker(s) × {slots} slots × \
     {bytes_per_slot} bytes = {need_gib:.1} GiB of conntrack tables, reserved at start, but only \
     {available_gib:.1} GiB of memory is available; {fix}",
    slots = Shard::slots_for(*.capacity),
    bytes_per_slot = Shard::bytes_per_slot(),
    need_gib = conntrack_bytes(*.workers, *.capacity) as f64 / GIB,
    available_gib = *.available as f64 / GIB,
    fix = fix_text(*.fits),
)]
pub struct ConntrackTooLarge {
    pub workers: usize,
    pub capacity: usize,
    /// Bytes of memory available.
    pub available: u64,
    /// The largest capacity that fits, if any does.
    pub fits: Option<usize>,
}

fn fix_text(fits: Option<usize>) -> String {
    match fits {
        Some(c) => format!(
            "lower dataplane.conntrack_capacity to at most {c} (or run fewer workers, or free memory)"
        ),
        None => "run fewer workers or free memory: not even the smallest shard fits".into(),
    }
}

/// Ok when the shards fit in `available` bytes (or it is unknown);
/// otherwise the error for the operator.
pub fn check_conntrack(
    workers: usize,
    capacity: usize,
    available: Option<u64>,
) -> Result<(), ConntrackTooLarge> {
    let Some(available) = available else {
        return Ok(());
    };
    if conntrack_bytes(workers, capacity) <= available {
        return Ok(());
    }
    Err(ConntrackTooLarge {
        workers,
        capacity,
        available,
        fits: largest_fitting_capacity(workers, available),
    })
}

/// The largest capacity (at least the configurable minimum, 1024) whose
/// shards fit in `available` bytes over `workers` workers.
fn largest_fitting_capacity(workers: usize, available: u64) -> Option<usize> {
    let per_worker = available / (workers.max(1) as u64) / Shard::bytes_per_slot() as u64;
    // The largest power of two of slots that fits, then the largest
    // capacity whose 1.25 × rounds up to no more than that.
    let max_slots = 1usize.checked_shl(63 - per_worker.max(1).leading_zeros())?;
    let mut c = usize::try_from(max_slots as u128 * 4 / 5).ok()?;
    while c > 0 && Shard::slots_for(c) > max_slots {
        c -= 1;
    }
    while Shard::slots_for(c + 1) <= max_slots {
        c += 1;
    }
    (c >= 1024 && conntrack_bytes(workers, c) <= available).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_and_the_address_space_limit() {
        let meminfo =
            "MemTotal:       24591212 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes     \n";
        assert_eq!(address_space_limit(unlimited), None);
        let limited =
            "Max address space         4096000000           unlimited            bytes     \n";
        assert_eq!(address_space_limit(limited), Some(4_096_000_000));
    }

    #[test]
    fn reads_the_memory_cgroup_limit_v1_and_v2() {
        let files = |pairs: &'static [(&'static str, &'static str)]| {
            move |p: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == p)
                    .map(|(_, v)| v.to_string())
            }
        };
        let v1 = "4:memory:/pod/a\n0::/\n";
        let limited = files(&[(
            "/sys/fs/cgroup/memory/pod/a/memory.limit_in_bytes",
            "1073741824\n",
        )]);
        assert_eq!(cgroup_limit(v1, limited), Some(1 << 30));
        let unlimited = files(&[(
            "/sys/fs/cgroup/memory/pod/a/memory.limit_in_bytes",
            "9223372036854771712\n",
        )]);
        assert_eq!(cgroup_limit(v1, unlimited), None);
        let v2 = "0::/system.slice/sluice.service\n";
        let limited = files(&[(
            "/sys/fs/cgroup/system.slice/sluice.service/memory.max",
            "2147483648\n",
        )]);
        assert_eq!(cgroup_limit(v2, limited), Some(2 << 30));
        let max = files(&[("/sys/fs/cgroup/memory.max", "max\n")]);
        assert_eq!(cgroup_limit("0::/\n", max), None);
        assert_eq!(cgroup_limit("0::/\n", files(&[])), None);
    }

    /// The default (1,048,576 connections: 2,097,152 slots of 68 bytes) on
    /// two workers needs 272 MiB; refused with 200 MiB, and the suggested
    /// capacity fits while one more connection would not.
    #[test]
    fn refuses_what_does_not_fit_and_names_what_would() {
        let need = conntrack_bytes(2, 1_048_576);
        assert_eq!(need, 2 * 2_097_152 * 68);
        assert!(check_conntrack(2, 1_048_576, Some(need)).is_ok());
        assert!(check_conntrack(2, 1_048_576, None).is_ok());
        let avail = 200 << 20;
        let err = check_conntrack(2, 1_048_576, Some(avail))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dataplane.conntrack_capacity = 1048576"),
            "{err}"
        );
        let c = largest_fitting_capacity(2, avail).unwrap();
        assert!(err.contains(&format!("at most {c}")), "{err}");
        assert!(conntrack_bytes(2, c) <= avail);
        assert!(conntrack_bytes(2, c + 1) > avail);
        let tiny = check_conntrack(4, 1024, Some(100 << 10))
            .unwrap_err()
            .to_string();
        assert!(tiny.contains("not even the smallest shard fits"), "{tiny}");
    }
}
