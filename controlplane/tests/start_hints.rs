//! Start-up failures through the real `sluice` binary on real DPDK: the
//! error line is followed by one `  hint: ` line with the cause and the
//! fix (AP-5). `controlplane::start_hints` has a unit test per branch;
//! these check that `sluice run` reaches them from what EAL reports and
//! what the host looks like.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn config(eal_args: &str, device: &str, tap: Option<&str>) -> String {
    let tap = tap.map(|t| format!("tap = \"{t}\"\n")).unwrap_or_default();
    format!(
        r#"[dataplane]
eal_args = [{eal_args}]
workers = 1
conntrack_capacity = 1024

[[dataplane.port]]
name = "data0"
device = "{device}"
address = "192.0.2.1/24"
{tap}
[[backend_service]]
name = "web"
backend = [ {{ address = "192.0.2.10", mac = "02:00:00:00:00:10" }} ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
backend_service = "web"
"#
    )
}

/// EAL's runtime directory for `prefix` (DPDK's rte_eal_get_runtime_dir).
fn dpdk_runtime_dir(prefix: &str) -> PathBuf {
    let base = if is_root() {
        PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| "/tmp".into(), PathBuf::from)
    };
    base.join("dpdk").join(prefix)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs `sluice run` (through `wrapper` when given) on `text` with its own
/// EAL file prefix; bounded by `--duration` should it start after all.
/// Returns (exit code, stderr).
fn run(case: &str, text: &str, wrapper: &[&str]) -> (Option<i32>, String) {
    let dir = tempdir(&format!("start-hints-{case}"));
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, text).unwrap();
    let prefix = format!("sluice-test-hints-{case}-{}", std::process::id());
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg("--").arg(sluice_bin());
            c
        }
        None => Command::new(sluice_bin()),
    };
    let out = cmd
        .args(["run", "--no-metrics-server", "--no-control-socket"])
        .args(["--duration", "10", "--file-prefix", &prefix, "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    // A failed EAL init leaves an operator-named prefix's directory alone.
    let _ = std::fs::remove_dir_all(dpdk_runtime_dir(&prefix));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The line after the first line containing `error`, which must be the
/// hint.
#[track_caller]
fn hint_after<'a>(stderr: &'a str, error: &str) -> &'a str {
    let mut lines = stderr.lines().skip_while(|l| !l.contains(error));
    assert!(lines.next().is_some(), "no {error:?} line:\n{stderr}");
    let hint = lines.next().unwrap_or_default();
    assert!(hint.contains("  hint: "), "no hint line:\n{stderr}");
    hint
}

/// A PCI port EAL did not probe (here: an address this host does not
/// have, with EAL allowed to scan the PCI bus) names the address and
/// `dpdk-devbind.py --status`. Before: only `no such port: is the device
/// in the EAL arguments`.
#[test]
fn a_pci_port_eal_did_not_probe_is_followed_by_a_hint() {
    let address = "0000:7f:1f.7";
    assert!(
        !Path::new("/sys/bus/pci/devices").join(address).exists(),
        "this host has a PCI device {address}; the test needs an address it does not have"
    );
    let text = config("\"--no-huge\", \"-m\", \"256\"", address, None);
    let (code, stderr) = run("pci", &text, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let hint = hint_after(&stderr, &format!("port \"data0\" ({address}): "));
    if is_root() {
        assert!(
            hint.contains(&format!("there is no PCI device {address} on this host")),
            "{stderr}"
        );
        assert!(hint.contains("`dpdk-devbind.py --status`"), "{stderr}");
    } else {
        assert!(hint.contains("must run as root"), "{stderr}");
    }
}

/// EAL without hugepages it can use: on this host none reserved, or too
/// few for 1 TiB on socket 0 (`--socket-mem`), or not mounted — each hint
/// says how to check and how to reserve. rte_eal_init's error carries
/// EAL's rte_errno (EACCES or ENOMEM), not its -1 read as EPERM. Before:
/// `rte_eal_init: Operation not permitted (errno 1)` and no hint.
#[test]
fn eal_without_usable_hugepages_is_followed_by_a_hint() {
    let text = config("\"--socket-mem=1048576\", \"--no-pci\"", "net_null0", None);
    let (code, stderr) = run("hugepages", &text, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.contains("sluice: ") && l.contains("rte_eal_init: "))
        .unwrap_or_else(|| panic!("no rte_eal_init error:\n{stderr}"));
    assert!(
        error.contains("(errno 13)") || error.contains("(errno 12)"),
        "{stderr}"
    );
    let hint = hint_after(&stderr, "rte_eal_init: ");
    if is_root() {
        for part in [
            "hugepages",
            "`grep Huge /proc/meminfo`",
            "NR_2M_PAGES",
            "`systemctl restart dpdk`",
        ] {
            assert!(hint.contains(part), "{part:?} missing:\n{stderr}");
        }
    } else {
        assert!(hint.contains("must run as root"), "{stderr}");
    }
}

/// A TAP that cannot be created because CAP_NET_ADMIN was dropped (as a
/// unit drop-in narrowing CapabilityBoundingSet would) names the
/// capability. Needs root and `setpriv`.
#[test]
fn a_tap_without_cap_net_admin_is_followed_by_a_hint() {
    if !is_root() || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    let tap = format!("slhint{}", std::process::id() % 100_000);
    let text = config(
        "\"--no-huge\", \"-m\", \"256\", \"--no-pci\"",
        "net_null0",
        Some(&tap),
    );
    let drop = [
        "setpriv",
        "--inh-caps=-net_admin",
        "--bounding-set=-net_admin",
    ];
    let (code, stderr) = run("tap", &text, &drop);
    assert_eq!(code, Some(1), "{stderr}");
    let hint = hint_after(&stderr, &format!("port \"data0\" TAP \"{tap}\": "));
    assert!(hint.contains("sluice lacks CAP_NET_ADMIN"), "{stderr}");
    assert!(hint.contains("CapabilityBoundingSet"), "{stderr}");
}
