use super::*;

const ALL_CAPS: u64 = (1 << 41) - 1;

/// A host that can run sluice: root with every capability, 512 free
/// 2 MiB pages on a mounted hugetlbfs, an IOMMU, vfio-pci loaded.
fn host() -> Facts {
    Facts {
        euid: 0,
        capabilities: Some(ALL_CAPS),
        no_huge: false,
        eal_memory_mib: None,
        huge_dir: None,
        hugepages: vec![pages(2048, 512, 512, true), pages(1 << 20, 0, 0, false)],
        iommu_groups: Some(24),
        vfio_pci_loaded: true,
        pci: Vec::new(),
    }
}

fn pages(size_kib: u64, total: u64, free: u64, mounted: bool) -> HugePages {
    HugePages {
        size_kib,
        total,
        free,
        mounted,
    }
}

fn nic(driver: Option<&str>) -> PciDevice {
    PciDevice {
        address: "0000:03:00.0".into(),
        present: true,
        driver: driver.map(str::to_string),
        iommu_group: Some(14),
        group_peers: Vec::new(),
    }
}

fn with_nic(dev: PciDevice) -> Facts {
    Facts {
        pci: vec![dev],
        ..host()
    }
}

fn without(cap: u32) -> Facts {
    Facts {
        capabilities: Some(ALL_CAPS & !(1 << cap)),
        ..host()
    }
}

fn eal(errno: i32, facts: &Facts) -> String {
    hint(Step::Eal, errno, "", facts).unwrap_or_default()
}

fn port(device: &str, facts: &Facts) -> String {
    hint(Step::Port { device }, libc::ENODEV, "", facts).unwrap_or_default()
}

#[track_caller]
fn has(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{p:?} missing from {text:?}");
    }
}

#[test]
fn no_hugepages_reserved_says_how_to_reserve_them() {
    let none = Facts {
        hugepages: vec![pages(2048, 0, 0, false), pages(1 << 20, 0, 0, false)],
        ..host()
    };
    // rte_eal_init: "Cannot get hugepage information." (EACCES).
    has(
        &eal(libc::EACCES, &none),
        &[
            "no hugepages are reserved",
            "HugePages_Total: 0",
            "NR_2M_PAGES in /etc/dpdk/dpdk.conf",
            "`systemctl restart dpdk`",
            "`hugepages=N` on the kernel command line",
            "`grep Huge /proc/meminfo`",
            "`--no-huge` in dataplane.eal_args is for tests only",
        ],
    );
    // A kernel without hugepage support reads the same.
    let no_sysfs = Facts {
        hugepages: Vec::new(),
        ..host()
    };
    has(
        &eal(libc::EACCES, &no_sysfs),
        &["no hugepages are reserved"],
    );
    // Under --no-huge, EAL never looks for hugepages.
    let no_huge = Facts {
        no_huge: true,
        ..none
    };
    assert_eq!(hint(Step::Eal, libc::EACCES, "", &no_huge), None);
}

#[test]
fn hugepages_all_in_use_name_who_may_hold_them() {
    let taken = Facts {
        hugepages: vec![pages(2048, 512, 0, true)],
        ..host()
    };
    has(
        &eal(libc::EACCES, &taken),
        &[
            "all 512 reserved hugepages are in use",
            "HugePages_Free: 0",
            "another DPDK process",
            "raise NR_2M_PAGES",
            "`systemctl restart dpdk`",
        ],
    );
}

#[test]
fn hugepages_without_a_mounted_hugetlbfs_say_how_to_mount_one() {
    // 1 GiB pages from the kernel command line; only a 2 MiB hugetlbfs.
    let unmounted = Facts {
        hugepages: vec![pages(2048, 0, 0, true), pages(1 << 20, 4, 4, false)],
        ..host()
    };
    has(
        &eal(libc::EACCES, &unmounted),
        &[
            "1 GiB hugepages are reserved but no hugetlbfs of that page size is mounted",
            "`systemctl restart dpdk` mounts",
            "NR_1G_PAGES: /dev/hugepages-1048576",
            "`grep Huge /proc/meminfo`",
        ],
    );
    let huge_dir = Facts {
        huge_dir: Some("/tmp/empty".into()),
        hugepages: vec![pages(2048, 512, 512, false)],
        ..host()
    };
    has(
        &eal(libc::EACCES, &huge_dir),
        &[
            "--huge-dir /tmp/empty in dataplane.eal_args is not a hugetlbfs mount",
            "of a page size with free pages (2 MiB)",
            "`systemctl restart dpdk`",
            "`grep Huge /proc/meminfo`",
        ],
    );
}

#[test]
fn too_few_free_hugepages_say_how_many_are_free() {
    let few = Facts {
        hugepages: vec![pages(2048, 512, 32, true)],
        ..host()
    };
    // rte_eal_init: "Cannot init memory" (ENOMEM), e.g. --socket-mem.
    has(
        &eal(libc::ENOMEM, &few),
        &[
            "only 64 MiB of hugepages are free",
            "too few for EAL's memory",
            "raise NR_2M_PAGES",
            "lower --socket-mem/-m",
        ],
    );
    let pool = hint(
        Step::PacketPool { bytes: 300 << 20 },
        libc::ENOMEM,
        "",
        &few,
    )
    .unwrap();
    has(
        &pool,
        &[
            "too few for the packet pool (at least 300 MiB)",
            "dataplane.mbufs",
        ],
    );
    // Pages not mounted do not count as free for EAL.
    let split = Facts {
        hugepages: vec![pages(2048, 512, 32, true), pages(1 << 20, 4, 4, false)],
        ..host()
    };
    has(&eal(libc::ENOMEM, &split), &["only 64 MiB of hugepages"]);
    // No hugepage information although pages are free: another cause.
    assert_eq!(hint(Step::Eal, libc::EACCES, "", &few), None);
}

#[test]
fn a_packet_pool_larger_than_no_huge_memory_names_m() {
    let no_huge = Facts {
        no_huge: true,
        eal_memory_mib: Some(64),
        ..host()
    };
    let step = Step::PacketPool { bytes: 100 << 20 };
    has(
        &hint(step, libc::ENOMEM, "", &no_huge).unwrap(),
        &[
            "-m 64 MiB",
            "at least 100 MiB",
            "raise -m in dataplane.eal_args",
        ],
    );
    assert_eq!(hint(step, libc::EEXIST, "", &no_huge), None);
}

#[test]
fn eal_as_a_user_says_to_run_as_root() {
    let user = Facts {
        euid: 1000,
        ..host()
    };
    has(
        &eal(libc::EACCES, &user),
        &[
            "runs as uid 1000 and must run as root",
            "`systemctl start sluice`",
        ],
    );
    // Arguments EAL refuses are not about root.
    assert_eq!(hint(Step::Eal, libc::EINVAL, "", &user), None);
    // A user may run EAL without hugepages and PCI devices (development).
    let dev = Facts {
        no_huge: true,
        ..user
    };
    assert_eq!(hint(Step::Eal, libc::ENOMEM, "", &dev), None);
}

#[test]
fn vfio_setup_failing_points_at_the_iommu_and_the_module() {
    has(
        &eal(libc::EAGAIN, &host()),
        &[
            "EAL could not set up VFIO",
            "`modprobe vfio-pci`",
            "intel_iommu=on iommu=pt",
        ],
    );
    let no_iommu = Facts {
        iommu_groups: Some(0),
        ..host()
    };
    has(
        &eal(libc::EAGAIN, &no_iommu),
        &[
            "no IOMMU enabled (/sys/kernel/iommu_groups is empty), so VFIO cannot work",
            "VT-d (Intel) or AMD-Vi (AMD) in the firmware",
            "`intel_iommu=on iommu=pt`",
            "bind the whole IOMMU group",
        ],
    );
}

#[test]
fn uio_without_cap_sys_admin_names_both_ways_out() {
    let uio = Facts {
        pci: vec![nic(Some("uio_pci_generic"))],
        ..without(CAP_SYS_ADMIN)
    };
    // "Cannot use IOVA as 'PA' since physical addresses are not available".
    has(
        &eal(libc::EINVAL, &uio),
        &[
            "0000:03:00.0 is bound to uio_pci_generic",
            "CAP_SYS_ADMIN",
            "bind it to vfio-pci with the IOMMU on",
            "ReadWritePaths=/sys/devices",
        ],
    );
    assert_eq!(
        hint(
            Step::Eal,
            libc::EINVAL,
            "",
            &with_nic(nic(Some("uio_pci_generic")))
        ),
        None
    );
    assert_eq!(hint(Step::Eal, libc::EINVAL, "", &host()), None);
    assert_eq!(hint(Step::Eal, libc::EALREADY, "", &host()), None);
}

#[test]
fn a_pci_address_the_host_does_not_have_says_where_to_look() {
    let absent = with_nic(PciDevice {
        address: "0000:7f:1f.7".into(),
        ..PciDevice::default()
    });
    has(
        &port("0000:7f:1f.7", &absent),
        &[
            "there is no PCI device 0000:7f:1f.7 on this host",
            "`dpdk-devbind.py --status`",
            "`lspci -D`",
        ],
    );
}

#[test]
fn a_nic_on_a_kernel_driver_or_none_says_how_to_bind_it() {
    has(
        &port("0000:03:00.0", &with_nic(nic(Some("ixgbe")))),
        &[
            "0000:03:00.0 is bound to the kernel driver ixgbe, not to vfio-pci",
            "`pci 0000:03:00.0 vfio-pci` to /etc/dpdk/interfaces",
            "`systemctl restart dpdk`",
            "`dpdk-devbind.py --status`",
            "`systemctl status dpdk`",
        ],
    );
    has(
        &port("0000:03:00.0", &with_nic(nic(None))),
        &["0000:03:00.0 is bound to no driver", "/etc/dpdk/interfaces"],
    );
    let unloaded = Facts {
        vfio_pci_loaded: false,
        ..with_nic(nic(None))
    };
    has(
        &port("0000:03:00.0", &unloaded),
        &[
            "vfio-pci is not loaded",
            "`modprobe vfio-pci`",
            "/etc/dpdk/interfaces",
        ],
    );
}

/// A ConnectX NIC is never told to go to vfio-pci: its PMD works beside
/// the kernel driver, with or without an IOMMU.
#[test]
fn a_mellanox_nic_is_told_to_stay_on_its_kernel_driver() {
    for iommu in [None, Some(0)] {
        let facts = Facts {
            iommu_groups: iommu,
            ..with_nic(nic(Some("mlx5_core")))
        };
        let text = port("0000:03:00.0", &facts);
        has(
            &text,
            &[
                "0000:03:00.0 is a Mellanox/NVIDIA NIC on mlx5_core",
                "do not bind it to vfio-pci",
                "librte-net-mlx5-23 ibverbs-providers",
                "DeviceAllow=char-infiniband_verbs",
            ],
        );
        assert!(!text.contains("/etc/dpdk/interfaces"), "{text}");
    }
    has(
        &port("0000:03:00.0", &with_nic(nic(Some("mlx4_core")))),
        &["librte-net-mlx4-23"],
    );
}

#[test]
fn a_nic_on_a_host_without_iommu_says_to_enable_it() {
    let no_iommu = Facts {
        iommu_groups: Some(0),
        ..with_nic(PciDevice {
            iommu_group: None,
            ..nic(Some("e1000e"))
        })
    };
    has(
        &port("0000:03:00.0", &no_iommu),
        &[
            "so vfio-pci cannot take 0000:03:00.0",
            "`intel_iommu=on iommu=pt`",
            "bind the whole IOMMU group",
        ],
    );
}

#[test]
fn a_group_with_a_device_on_a_kernel_driver_is_named() {
    let dev = PciDevice {
        group_peers: vec![
            ("0000:00:01.0".into(), Some("pcieport".into())),
            ("0000:03:00.1".into(), Some("ixgbe".into())),
            ("0000:03:00.2".into(), None),
        ],
        ..nic(Some("vfio-pci"))
    };
    has(
        &port("0000:03:00.0", &with_nic(dev)),
        &[
            "IOMMU group 14 also holds 0000:03:00.1 (ixgbe), still bound",
            "\"VFIO group is not viable\"",
            "bind every device of the group to vfio-pci",
            "/sys/kernel/iommu_groups/14/devices",
        ],
    );
}

#[test]
fn a_bound_nic_eal_did_not_take_names_the_pmd_or_the_address_form() {
    let bound = with_nic(PciDevice {
        group_peers: vec![("0000:00:01.0".into(), Some("pcieport".into()))],
        ..nic(Some("vfio-pci"))
    });
    has(
        &port("0000:03:00.0", &bound),
        &[
            "0000:03:00.0 is bound to vfio-pci but no DPDK driver took it",
            "librte-net-ixgbe23",
        ],
    );
    // EAL probes 03:00.0 but names the port 0000:03:00.0.
    has(
        &port("03:00.0", &bound),
        &["set the port's device to \"0000:03:00.0\", not \"03:00.0\""],
    );
    let uio = Facts {
        pci: vec![nic(Some("igb_uio"))],
        ..without(CAP_SYS_ADMIN)
    };
    has(
        &port("0000:03:00.0", &uio),
        &["bound to igb_uio", "CAP_SYS_ADMIN"],
    );
}

#[test]
fn port_hints_only_follow_a_device_eal_did_not_probe() {
    let kernel = with_nic(nic(Some("ixgbe")));
    let step = Step::Port {
        device: "0000:03:00.0",
    };
    assert_eq!(hint(step, libc::EINVAL, "", &kernel), None);
    assert!(hint(step, libc::ENODEV, "", &kernel).is_some());
    // A PCI device as a user: root first.
    let user = Facts {
        euid: 1000,
        ..kernel
    };
    has(&port("0000:03:00.0", &user), &["must run as root"]);
    // vdevs: af_packet without CAP_NET_RAW; others have no known cause.
    has(
        &port("net_af_packet0,iface=eth1", &without(CAP_NET_RAW)),
        &["lacks CAP_NET_RAW", "net_af_packet"],
    );
    assert_eq!(port("net_af_packet0,iface=eth1", &host()), "");
    assert_eq!(port("net_null0", &without(CAP_NET_RAW)), "");
}

#[test]
fn tap_failures_name_root_the_capability_or_read_only_sysctls() {
    let denied = "tun_alloc(): Unable to set TUNSETIFF: Operation not permitted";
    let user = Facts {
        euid: 1000,
        ..host()
    };
    has(
        &hint(Step::Tap, libc::ENODEV, denied, &user).unwrap(),
        &["must run as root", "/dev/net/tun"],
    );
    has(
        &hint(Step::Tap, libc::ENODEV, denied, &without(CAP_NET_ADMIN)).unwrap(),
        &[
            "sluice lacks CAP_NET_ADMIN",
            "creating the port's TAP",
            "CapabilityBoundingSet",
        ],
    );
    let sysctl = "write 1 to /proc/sys/net/ipv6/conf/sl0/disable_ipv6: Read-only file system \
                  (os error 30)";
    has(
        &hint(Step::Tap, 0, sysctl, &host()).unwrap(),
        &[
            "/proc/sys/net/ipv6/conf is read-only",
            "ReadWritePaths=-/proc/sys/net/ipv6/conf",
        ],
    );
    // Capabilities that cannot be read are not guessed missing.
    let unknown = Facts {
        capabilities: None,
        ..host()
    };
    assert_eq!(hint(Step::Tap, libc::ENODEV, denied, &unknown), None);
}
