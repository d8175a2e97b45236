//! What the start hints need to know about the host: read from /proc and
//! /sys once a start failed (a few small files), and parsed by the pure
//! functions below.

use std::path::Path;

use crate::dpdk_args::{eal_arg_value, eal_memory_mib, pci_address};

/// The host, as far as the hints need it.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Effective user id.
    pub euid: u32,
    /// Effective capabilities (`CapEff` in /proc/self/status); None when
    /// unreadable.
    pub capabilities: Option<u64>,
    /// `--no-huge` is among the EAL arguments.
    pub no_huge: bool,
    /// `-m` of the EAL arguments, in MiB.
    pub eal_memory_mib: Option<u64>,
    /// `--huge-dir` of the EAL arguments.
    pub huge_dir: Option<String>,
    /// One entry per hugepage size the kernel offers.
    pub hugepages: Vec<HugePages>,
    /// Entries in /sys/kernel/iommu_groups: 0 when the kernel has no IOMMU
    /// enabled; None when unreadable.
    pub iommu_groups: Option<usize>,
    /// The vfio-pci driver is registered (`/sys/bus/pci/drivers/vfio-pci`).
    pub vfio_pci_loaded: bool,
    /// The configured ports' PCI devices.
    pub pci: Vec<PciDevice>,
}

/// The hugepages of one size (`/sys/kernel/mm/hugepages/hugepages-<N>kB`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePages {
    pub size_kib: u64,
    /// Reserved (`nr_hugepages`).
    pub total: u64,
    /// Not in use (`free_hugepages`).
    pub free: u64,
    /// EAL can map them: a hugetlbfs of this page size is mounted (at
    /// `--huge-dir` when that is given).
    pub mounted: bool,
}

/// A configured PCI device as sysfs shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PciDevice {
    /// Full form, `DDDD:BB:DD.F`.
    pub address: String,
    /// `/sys/bus/pci/devices/<address>` exists.
    pub present: bool,
    /// The bound kernel driver (`vfio-pci`, `ixgbe`, ...).
    pub driver: Option<String>,
    pub iommu_group: Option<u32>,
    /// The other devices of its IOMMU group, with their drivers.
    pub group_peers: Vec<(String, Option<String>)>,
}

impl Facts {
    /// Reads the facts for EAL arguments `eal_args` and the configured port
    /// devices `devices` (vdevs among them are skipped).
    pub fn gather(eal_args: &[String], devices: &[&str]) -> Facts {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let huge_dir = eal_arg_value(eal_args, "--huge-dir");
        let default_kib = read("/proc/meminfo").as_deref().and_then(default_page_kib);
        let mounts = read("/proc/mounts")
            .map(|m| hugetlbfs_mounts(&m, default_kib))
            .unwrap_or_default();
        Facts {
            euid: rustix::process::geteuid().as_raw(),
            capabilities: read("/proc/self/status")
                .as_deref()
                .and_then(effective_capabilities),
            no_huge: eal_args.iter().any(|a| a == "--no-huge"),
            eal_memory_mib: eal_memory_mib(eal_args),
            hugepages: hugepage_sizes(&mounts, huge_dir.as_deref()),
            huge_dir,
            iommu_groups: std::fs::read_dir("/sys/kernel/iommu_groups")
                .ok()
                .map(Iterator::count),
            vfio_pci_loaded: Path::new("/sys/bus/pci/drivers/vfio-pci").exists(),
            pci: devices
                .iter()
                .filter_map(|d| pci_address(d))
                .map(|a| pci_device(&a))
                .collect(),
        }
    }

    pub fn root(&self) -> bool {
        self.euid == 0
    }

    /// Whether capability `cap` is effective; unknown counts as yes, so no
    /// hint rests on a guess.
    pub(super) fn has(&self, cap: u32) -> bool {
        self.capabilities.is_none_or(|c| c & (1 << cap) != 0)
    }

    pub(super) fn lacks(&self, cap: u32) -> bool {
        !self.has(cap)
    }
}

/// `CapEff:\t000001ffffffffff` in /proc/self/status.
fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// `Hugepagesize:       2048 kB` in /proc/meminfo: the size of a
/// hugetlbfs mounted without `pagesize=`.
fn default_page_kib(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Each hugetlbfs mount in /proc/mounts, with its page size in KiB.
fn hugetlbfs_mounts(mounts: &str, default_kib: Option<u64>) -> Vec<(String, u64)> {
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(2) != Some(&"hugetlbfs") {
                return None;
            }
            let size = f
                .get(3)?
                .split(',')
                .find_map(|o| o.strip_prefix("pagesize="))
                .map_or(default_kib, size_kib)?;
            Some((f[1].to_string(), size))
        })
        .collect()
}

/// `2M` → 2048, `1G` → 1048576, `64K` → 64.
fn size_kib(text: &str) -> Option<u64> {
    let (num, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    match unit {
        "K" | "k" => Some(n),
        "M" | "m" => n.checked_mul(1 << 10),
        "G" | "g" => n.checked_mul(1 << 20),
        _ => None,
    }
}

/// The kernel's hugepage sizes, each marked mounted when `mounts` has a
/// hugetlbfs of that size (at `huge_dir`, when given).
fn hugepage_sizes(mounts: &[(String, u64)], huge_dir: Option<&str>) -> Vec<HugePages> {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/mm/hugepages") else {
        return Vec::new();
    };
    let count = |p: &Path| -> u64 {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut sizes: Vec<HugePages> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kib = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
            let size_kib = kib.parse().ok()?;
            Some(HugePages {
                size_kib,
                total: count(&e.path().join("nr_hugepages")),
                free: count(&e.path().join("free_hugepages")),
                mounted: is_mounted(mounts, size_kib, huge_dir),
            })
        })
        .collect();
    sizes.sort_by_key(|h| h.size_kib);
    sizes
}

fn is_mounted(mounts: &[(String, u64)], size_kib: u64, huge_dir: Option<&str>) -> bool {
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    mounts
        .iter()
        .any(|(path, kib)| *kib == size_kib && huge_dir.is_none_or(|d| same(d, path)))
}

/// A PCI device's driver, IOMMU group and group peers from sysfs.
fn pci_device(address: &str) -> PciDevice {
    let devices = Path::new("/sys/bus/pci/devices");
    let dev = devices.join(address);
    let link_name = |p: &Path| {
        let target = std::fs::read_link(p).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    };
    let mut group_peers: Vec<(String, Option<String>)> =
        std::fs::read_dir(dev.join("iommu_group/devices"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|peer| peer != address)
            .map(|peer| {
                let driver = link_name(&devices.join(&peer).join("driver"));
                (peer, driver)
            })
            .collect();
    group_peers.sort();
    PciDevice {
        address: address.to_string(),
        present: dev.exists(),
        driver: link_name(&dev.join("driver")),
        iommu_group: link_name(&dev.join("iommu_group")).and_then(|g| g.parse().ok()),
        group_peers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_page_sizes_are_parsed_from_proc() {
        let status = "Name:\tsluice\nCapPrm:\t0000000000003000\nCapEff:\t0000000000001000\n";
        assert_eq!(effective_capabilities(status), Some(1 << 12));
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
        assert_eq!(
            default_page_kib("HugePages_Free:  0\nHugepagesize:       2048 kB\n"),
            Some(2048)
        );
        let mounts = "proc /proc proc rw 0 0\n\
                      hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n\
                      hugetlbfs /dev/hugepages-1048576 hugetlbfs rw,relatime,pagesize=1024M 0 0\n\
                      nodev /mnt/huge hugetlbfs rw,relatime 0 0\n";
        assert_eq!(
            hugetlbfs_mounts(mounts, Some(2048)),
            vec![
                ("/dev/hugepages".to_string(), 2048),
                ("/dev/hugepages-1048576".to_string(), 1 << 20),
                ("/mnt/huge".to_string(), 2048),
            ]
        );
        assert_eq!(size_kib("1G"), Some(1 << 20));
        assert_eq!(size_kib("64K"), Some(64));
        assert_eq!(size_kib("2"), None);
    }

    #[test]
    fn a_page_size_is_mounted_only_where_huge_dir_points() {
        let mounts = vec![
            ("/dev/hugepages".to_string(), 2048),
            ("/dev/hugepages-1048576".to_string(), 1 << 20),
        ];
        assert!(is_mounted(&mounts, 2048, None));
        assert!(is_mounted(&mounts, 2048, Some("/dev/hugepages/")));
        assert!(!is_mounted(&mounts, 2048, Some("/tmp/empty")));
        assert!(!is_mounted(&mounts, 2048, Some("/dev/hugepages-1048576")));
        assert!(!is_mounted(&[], 2048, None));
    }
}
