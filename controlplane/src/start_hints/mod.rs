//! The cause and the fix of a failed start, for the failures a new host
//! meets first: no hugepages, a NIC that EAL did not probe (not bound to a
//! DPDK-compatible driver, a wrong address, an IOMMU group VFIO refuses),
//! no IOMMU, and missing privileges.
//!
//! EAL's own lines name the symptom (`EAL: Cannot get hugepage
//! information.`, `rte_eal_init: Permission denied` even as root); what to
//! change depends on the host. [`hint`] maps the failed step, its errno and
//! message, and a few [`Facts`] about the host (read by [`Facts::gather`])
//! to one line the operator can act on. It is pure, so every branch is
//! tested without the host being in that state.

mod facts;

pub use facts::{Facts, HugePages, PciDevice};

use crate::dpdk_args::pci_address;

/// The start-up step that failed.
#[derive(Clone, Copy, Debug)]
pub enum Step<'a> {
    /// `rte_eal_init`.
    Eal,
    /// Creating the packet pool, which needs at least `bytes` of EAL memory.
    PacketPool { bytes: u64 },
    /// Starting the port of this configured `device`.
    Port { device: &'a str },
    /// Creating a port's TAP (`net_tap`) or configuring it (`ip`, sysctls).
    Tap,
}

/// Linux capability numbers (`linux/capability.h`).
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;

/// Drivers a device may keep while another device of its IOMMU group is
/// used through VFIO (besides vfio-pci itself): the kernel allows pci-stub,
/// and bridges (pcieport) do no DMA of their own.
const VFIO_GROUP_COMPATIBLE: [&str; 3] = ["vfio-pci", "pci-stub", "pcieport"];

/// What to check and change after `step` failed with `errno` and `message`
/// on a host described by `facts`; None when none of the known causes fits.
pub fn hint(step: Step<'_>, errno: i32, message: &str, facts: &Facts) -> Option<String> {
    match step {
        Step::Eal => eal(errno, facts),
        Step::PacketPool { bytes } => packet_pool(errno, bytes, facts),
        Step::Port { device } => port(device, errno, facts),
        Step::Tap => tap(message, facts),
    }
}

fn eal(errno: i32, facts: &Facts) -> Option<String> {
    // EINVAL is about the arguments, whoever runs them.
    let needs_root = !facts.no_huge || !facts.pci.is_empty();
    if !facts.root() && needs_root && errno != libc::EINVAL {
        return Some(not_root(facts));
    }
    match errno {
        // "Cannot get hugepage information." / "Cannot init memory".
        libc::EACCES | libc::ENOMEM if !facts.no_huge => hugepages(errno, None, facts),
        // "Cannot init VFIO".
        libc::EAGAIN => Some(if facts.iommu_groups == Some(0) {
            no_iommu(None)
        } else {
            "EAL could not set up VFIO (`dmesg | grep -i -e vfio -e DMAR -e AMD-Vi`): load \
             vfio-pci (`modprobe vfio-pci`, and list it in /etc/modules-load.d/vfio-pci.conf) \
             and check that the IOMMU is on (`intel_iommu=on iommu=pt` on the kernel command \
             line, VT-d/AMD-Vi in the firmware)"
                .into()
        }),
        // "Cannot use IOVA as 'PA' since physical addresses are not
        // available": a UIO-bound device and no CAP_SYS_ADMIN.
        libc::EINVAL => facts
            .pci
            .iter()
            .find(|d| d.driver.as_deref().is_some_and(is_uio) && !facts.has(CAP_SYS_ADMIN))
            .map(uio_without_sys_admin),
        _ => None,
    }
}

fn packet_pool(errno: i32, bytes: u64, facts: &Facts) -> Option<String> {
    if errno != libc::ENOMEM {
        return None;
    }
    if !facts.no_huge {
        return hugepages(errno, Some(bytes), facts);
    }
    let memory = facts
        .eal_memory_mib
        .map_or_else(|| "EAL's default 64 MiB".into(), |m| format!("-m {m} MiB"));
    Some(format!(
        "under --no-huge EAL has only the memory of {memory}, and the packet pool needs at \
         least {} MiB plus EAL's own: raise -m in dataplane.eal_args or lower dataplane.mbufs",
        bytes.div_ceil(1 << 20)
    ))
}

fn port(device: &str, errno: i32, facts: &Facts) -> Option<String> {
    // Other errors come from a port EAL did probe; its driver said why.
    if errno != libc::ENODEV {
        return None;
    }
    let Some(address) = pci_address(device) else {
        let af_packet = device.starts_with("net_af_packet");
        return (af_packet && facts.lacks(CAP_NET_RAW))
            .then(|| missing_capability("CAP_NET_RAW", "opening net_af_packet's socket"));
    };
    if !facts.root() {
        return Some(not_root(facts));
    }
    let dev = facts.pci.iter().find(|d| d.address == address)?;
    if !dev.present {
        return Some(format!(
            "there is no PCI device {address} on this host (/sys/bus/pci/devices): set the \
             port's device to the address of the NIC for the data path, as `dpdk-devbind.py \
             --status` or `lspci -D` lists it"
        ));
    }
    let bind = bind_advice(&address);
    match dev.driver.as_deref() {
        Some("vfio-pci") => Some(vfio_bound_not_probed(device, dev)),
        Some(d) if is_uio(d) => Some(if facts.has(CAP_SYS_ADMIN) {
            vfio_bound_not_probed(device, dev)
        } else {
            uio_without_sys_admin(dev)
        }),
        // Bifurcated: these stay on their kernel driver (no VFIO, no IOMMU).
        Some(kernel @ ("mlx5_core" | "mlx4_core")) => Some(mellanox(&address, kernel)),
        _ if facts.iommu_groups == Some(0) => Some(no_iommu(Some(&address))),
        Some(kernel) => Some(format!(
            "{address} is bound to the kernel driver {kernel}, not to vfio-pci, so EAL did not \
             probe it: {bind}"
        )),
        None if !facts.vfio_pci_loaded => Some(format!(
            "{address} is bound to no driver and vfio-pci is not loaded: `modprobe vfio-pci` \
             (and list it in /etc/modules-load.d/vfio-pci.conf), then {bind}"
        )),
        None => Some(format!(
            "{address} is bound to no driver, so EAL did not probe it: {bind}"
        )),
    }
}

fn tap(message: &str, facts: &Facts) -> Option<String> {
    if !facts.root() {
        return Some(not_root(facts));
    }
    if facts.lacks(CAP_NET_ADMIN) {
        return Some(missing_capability(
            "CAP_NET_ADMIN",
            "creating the port's TAP (/dev/net/tun) and setting its address, MTU and routes",
        ));
    }
    message.contains("Read-only file system").then(|| {
        "/proc/sys/net/ipv6/conf is read-only to sluice, and it turns IPv6 off on the TAP \
         of a port without address6 there (disable_ipv6): the packaged unit keeps that \
         directory writable (ReadWritePaths=-/proc/sys/net/ipv6/conf beside \
         ProtectKernelTunables=yes); a drop-in without it, or a container, makes it \
         read-only (`systemctl cat sluice` shows the unit and its drop-ins)"
            .into()
    })
}

/// A Mellanox/NVIDIA ConnectX NIC EAL did not probe. DPDK's mlx4/mlx5
/// PMDs drive it beside its kernel driver, through rdma-core: binding it
/// to vfio-pci would take it from both.
fn mellanox(address: &str, kernel: &str) -> String {
    let pmd = if kernel == "mlx4_core" {
        "mlx4"
    } else {
        "mlx5"
    };
    format!(
        "{address} is a Mellanox/NVIDIA NIC on {kernel}: keep it on that driver (do not bind it \
         to vfio-pci), and install DPDK's {pmd} driver and rdma-core: `apt-get install \
         librte-net-{pmd}-23 ibverbs-providers` (the {pmd} PMD opens /dev/infiniband/uverbs*: \
         the packaged unit needs a drop-in with DeviceAllow=char-infiniband_verbs rw); \
         deployment.md, \"Mellanox/NVIDIA NICs\""
    )
}

/// How to bind `address` to vfio-pci for good, and how to check it.
fn bind_advice(address: &str) -> String {
    format!(
        "add `pci {address} vfio-pci` to /etc/dpdk/interfaces and run `systemctl restart dpdk`; \
         `dpdk-devbind.py --status` then lists it under \"DPDK-compatible driver\" (if not, \
         `systemctl status dpdk` says why)"
    )
}

/// A device bound to vfio-pci (or UIO) that EAL still did not probe.
fn vfio_bound_not_probed(configured: &str, dev: &PciDevice) -> String {
    let address = &dev.address;
    let blockers: Vec<String> = dev
        .group_peers
        .iter()
        .filter_map(|(peer, driver)| {
            let d = driver.as_deref()?;
            (!VFIO_GROUP_COMPATIBLE.contains(&d)).then(|| format!("{peer} ({d})"))
        })
        .collect();
    if let (false, Some(group)) = (blockers.is_empty(), dev.iommu_group) {
        return format!(
            "{address}'s IOMMU group {group} also holds {}, still bound to a kernel driver, so \
             VFIO refuses the group (EAL: \"VFIO group is not viable\"): bind every device of \
             the group to vfio-pci (/etc/dpdk/interfaces, `ls /sys/kernel/iommu_groups/{group}/\
             devices`, `dpdk-devbind.py --status`), or move the NIC to a slot with its own group",
            blockers.join(", ")
        );
    }
    if configured != address {
        return format!(
            "DPDK names the port by its full PCI address: set the port's device to \
             \"{address}\", not \"{configured}\" (`dpdk-devbind.py --status` lists it)"
        );
    }
    format!(
        "{address} is bound to {} but no DPDK driver took it: install its PMD (librte-net-ixgbe23, \
         librte-net-i40e23, librte-net-ice23, ...; `dpdk-devbind.py --status` names the NIC) and \
         read the EAL lines above",
        dev.driver.as_deref().unwrap_or("vfio-pci")
    )
}

fn is_uio(driver: &str) -> bool {
    matches!(driver, "uio_pci_generic" | "igb_uio")
}

fn uio_without_sys_admin(dev: &PciDevice) -> String {
    format!(
        "{} is bound to {}, with which EAL needs physical addresses (IOVA as PA) and so \
         CAP_SYS_ADMIN, which sluice does not have: bind it to vfio-pci with the IOMMU on \
         (/etc/dpdk/interfaces, `dpdk-devbind.py --status`), or add CAP_SYS_ADMIN to \
         CapabilityBoundingSet and ReadWritePaths=/sys/devices (EAL maps the NIC's \
         registers through sysfs under uio, which the unit makes read-only) in a drop-in \
         (`systemctl edit sluice`)",
        dev.address,
        dev.driver.as_deref().unwrap_or("uio")
    )
}

fn no_iommu(address: Option<&str>) -> String {
    let what = address.map_or_else(
        || "VFIO cannot work".to_string(),
        |a| format!("vfio-pci cannot take {a}"),
    );
    format!(
        "the kernel has no IOMMU enabled (/sys/kernel/iommu_groups is empty), so {what}: enable \
         VT-d (Intel) or AMD-Vi (AMD) in the firmware, add `intel_iommu=on iommu=pt` (AMD: \
         `amd_iommu=on iommu=pt`) to the kernel command line and reboot, then bind the whole \
         IOMMU group to vfio-pci (/etc/dpdk/interfaces, `dpdk-devbind.py --status`)"
    )
}

fn not_root(facts: &Facts) -> String {
    format!(
        "sluice runs as uid {} and must run as root: the hugepage files, /dev/vfio/* and \
         /dev/net/tun belong to root; start it with `systemctl start sluice` (the unit runs it as \
         root with CAP_NET_ADMIN and CAP_NET_RAW) or as root",
        facts.euid
    )
}

fn missing_capability(cap: &str, needed_for: &str) -> String {
    format!(
        "sluice lacks {cap}, needed for {needed_for}: the unit grants CAP_NET_ADMIN and \
         CAP_NET_RAW (CapabilityBoundingSet); a drop-in or container that narrows the set must \
         keep both (`systemctl cat sluice` shows the unit and its drop-ins)"
    )
}

/// EAL found no hugepages it could use (EACCES), or too few (ENOMEM) for
/// `needed` bytes (the packet pool) or for its own memory.
fn hugepages(errno: i32, needed: Option<u64>, facts: &Facts) -> Option<String> {
    const CHECK: &str = "`grep Huge /proc/meminfo`";
    const RESERVE: &str = "set NR_2M_PAGES in /etc/dpdk/dpdk.conf and run `systemctl restart \
                           dpdk`, or reserve them at boot with `hugepages=N` on the kernel \
                           command line";
    let reserved: u64 = facts.hugepages.iter().map(|h| h.total).sum();
    let free: u64 = facts.hugepages.iter().map(|h| h.free).sum();
    let usable: Vec<&HugePages> = facts
        .hugepages
        .iter()
        .filter(|h| h.free > 0 && h.mounted)
        .collect();
    if reserved == 0 {
        return Some(format!(
            "no hugepages are reserved on this host ({CHECK} shows HugePages_Total: 0): \
             {RESERVE} (`--no-huge` in dataplane.eal_args is for tests only)"
        ));
    }
    if free == 0 {
        return Some(format!(
            "all {reserved} reserved hugepages are in use ({CHECK} shows HugePages_Free: 0): stop \
             what holds them (another DPDK process, VMs backed by hugepages), or reserve more: \
             raise NR_2M_PAGES in /etc/dpdk/dpdk.conf and run `systemctl restart dpdk`"
        ));
    }
    if usable.is_empty() {
        let sizes: Vec<String> = facts
            .hugepages
            .iter()
            .filter(|h| h.free > 0)
            .map(|h| page_size(h.size_kib))
            .collect();
        let sizes = sizes.join(" and ");
        return Some(match &facts.huge_dir {
            Some(dir) => format!(
                "--huge-dir {dir} in dataplane.eal_args is not a hugetlbfs mount of a page size \
                 with free pages ({sizes}): point it at one (`mount -t hugetlbfs` lists \
                 them) or drop it to use /dev/hugepages, which `systemctl restart dpdk` mounts \
                 when NR_2M_PAGES is set in /etc/dpdk/dpdk.conf; {CHECK} shows the pages"
            ),
            None => format!(
                "{sizes} hugepages are reserved but no hugetlbfs of that page size is mounted: \
                 `systemctl restart dpdk` mounts /dev/hugepages when NR_2M_PAGES is set \
                 in /etc/dpdk/dpdk.conf (NR_1G_PAGES: /dev/hugepages-1048576), or `mount -t \
                 hugetlbfs -o pagesize=SIZE nodev DIR`; {CHECK} shows the pages"
            ),
        });
    }
    // Usable pages and yet no hugepage information: not a shortage.
    if errno != libc::ENOMEM {
        return None;
    }
    let free_bytes: u64 = usable.iter().map(|h| h.free * h.size_kib * 1024).sum();
    let needs = needed.map_or_else(
        || "EAL's memory".into(),
        |b| format!("the packet pool (at least {} MiB)", b.div_ceil(1 << 20)),
    );
    Some(format!(
        "only {} MiB of hugepages are free ({CHECK}), too few for {needs}: raise NR_2M_PAGES in \
         /etc/dpdk/dpdk.conf and run `systemctl restart dpdk` (or `hugepages=N` on the kernel \
         command line), or lower --socket-mem/-m in dataplane.eal_args or dataplane.mbufs",
        free_bytes >> 20
    ))
}

/// `2048` → `2 MiB`, `1048576` → `1 GiB`.
fn page_size(kib: u64) -> String {
    if kib >= 1 << 20 && kib.is_multiple_of(1 << 20) {
        format!("{} GiB", kib >> 20)
    } else if kib >= 1 << 10 && kib.is_multiple_of(1 << 10) {
        format!("{} MiB", kib >> 10)
    } else {
        format!("{kib} KiB")
    }
}

#[cfg(test)]
mod tests;
