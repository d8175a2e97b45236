//! Limits an operator can trust (AP-3, AP-5): what the
//! buffers, the EAL memory or the data plane's id space cannot hold, and
//! what would misroute, is refused by `sluice check-config` — through the
//! real binary — with file:line, the field, what is wrong and the fix.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const BASE: &str = r#"[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
backend = [ { address = "192.0.2.10", mac = "02:00:00:00:00:10" } ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#;

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?}");
    BASE.replacen(from, to, 1)
}

/// Runs `sluice check-config` on `text` (written to `dir/sluice.toml`):
/// (exit code, stderr).
fn check_config(dir: &Path, text: &str) -> (Option<i32>, String) {
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Refusal {
    case: &'static str,
    text: String,
    /// The error's line is the first containing this text.
    at_line_with: &'static str,
    path: &'static str,
    message: String,
    hint: &'static str,
}

fn assert_refused(r: &Refusal) {
    let dir = tempdir(&format!("limits-{}", r.case));
    let (code, err) = check_config(&dir, &r.text);
    let ctx = format!("case {}:\n{err}", r.case);
    assert_eq!(code, Some(2), "refused with exit 2: {ctx}");
    let line = r
        .text
        .lines()
        .position(|l| l.contains(r.at_line_with))
        .unwrap()
        + 1;
    let first = err
        .lines()
        .find(|l| l.contains(": error: "))
        .unwrap_or_else(|| panic!("no error line: {ctx}"));
    assert!(
        first.contains(&format!("sluice.toml:{line}:")),
        "want line {line}: {ctx}"
    );
    assert!(
        first.contains(&format!(": error: {}: ", r.path)),
        "wrong field: {ctx}"
    );
    assert!(first.contains(&r.message), "wrong message: {ctx}");
    let hint = err
        .lines()
        .skip_while(|l| *l != first)
        .nth(1)
        .unwrap_or_default();
    assert!(
        hint.starts_with("  hint: ") && hint.contains(r.hint),
        "wrong hint: {ctx}"
    );
}

/// AP-3: a port MTU that a `net_af_packet` frame slot
/// cannot hold (the kernel would truncate every longer frame), and a pool
/// of jumbo-sized buffers larger than the EAL memory (`sluice run` would
/// die in `rte_pktmbuf_pool_create` naming neither setting).
#[test]
fn ap_3_frames_the_buffers_cannot_hold_are_refused() {
    for r in [
        Refusal {
            case: "af-packet-framesz",
            text: replace(
                "device = \"net_null0\"\n",
                "device = \"net_af_packet0,iface=lb0\"\nmtu = 9000\n",
            ),
            at_line_with: "net_af_packet0",
            path: "dataplane.port \"uplink\".device",
            message: "mtu 9000 needs 9014-byte frames, but net_af_packet's frame slot \
                      (framesz=2048) holds frames of at most 1982 bytes"
                .into(),
            hint: "add framesz=9088,blocksz=16384 to the device string, or lower the port's \
                   mtu to at most 1968",
        },
        Refusal {
            case: "eal-memory",
            text: replace("\"256\"", "\"64\"")
                .replace("workers = 1", "workers = 2")
                .replace(
                    "address = \"192.0.2.1/24\"\n",
                    "address = \"192.0.2.1/24\"\nmtu = 9000\n",
                ),
            at_line_with: "eal_args",
            path: "dataplane.eal_args",
            message: "the packet pool needs at least 146 MiB (16383 mbufs of 9152 bytes, sized \
                      for the largest port mtu 9000) but EAL has 64 MiB"
                .into(),
            hint: "raise -m to at least 210",
        },
    ] {
        assert_refused(&r);
    }
    // The same pool at MTU 1500 fits the same memory.
    let dir = tempdir("limits-eal-memory-1500");
    let text = replace("\"256\"", "\"64\"").replace("workers = 1", "workers = 2");
    let (code, err) = check_config(&dir, &text);
    assert_eq!(code, Some(0), "{err}");
}

/// `n` minimal backend services after BASE's own, the last with a rule.
fn with_services(n: usize) -> String {
    let mut text = BASE.to_string();
    for i in 1..n {
        text.push_str(&format!("\n[[backend_service]]\nname = \"s{i}\"\n"));
    }
    text.push_str(&format!(
        "\n[[forwarding_rule]]\nname = \"last\"\nvip = \"203.0.113.11\"\nprotocol = \"TCP\"\n\
         ports = \"80\"\nbackend_service = \"s{}\"\n",
        n - 1
    ));
    text
}

/// Service ids are 16 bits. 65,536 services were
/// accepted and the last one's id truncated to 0: its rule sent every
/// packet to the first service's backends. Refused at the first service
/// past the limit; 65,535 are accepted.
#[test]
fn more_services_than_ids_are_refused() {
    assert_refused(&Refusal {
        case: "services",
        text: with_services(65_536),
        at_line_with: "name = \"s65535\"",
        path: "backend_service \"s65535\"",
        message: "65536 backend services configured; at most 65535 are supported".into(),
        hint: "merge services",
    });
    let dir = tempdir("limits-services-ok");
    let (code, err) = check_config(&dir, &with_services(65_535));
    assert_eq!(code, Some(0), "{err}");
}

/// FR-5: special-purpose addresses are no VIPs: a configuration naming
/// 127.0.0.1 (or any other) as a VIP is refused, so no replayed packet to
/// it can reach a backend.
#[test]
fn special_purpose_vips_are_refused() {
    for (vip, what) in [
        ("127.0.0.1", "a loopback address, 127.0.0.0/8"),
        ("0.0.0.0", "an unspecified (\"this network\") address"),
        ("255.255.255.255", "the limited broadcast address"),
        ("224.0.0.251", "a multicast address, 224.0.0.0/4"),
        ("169.254.10.1", "a link-local address, 169.254.0.0/16"),
        ("::1", "the loopback address, ::1"),
        ("::", "the unspecified address, ::"),
        ("ff02::1", "a multicast address, ff00::/8"),
        ("fe80::10", "a link-local address, fe80::/10"),
        ("::ffff:127.0.0.1", "an IPv4-mapped form (::ffff:0:0/96)"),
    ] {
        let message = format!("VIP {vip} is {what}");
        assert_refused(&Refusal {
            case: "vip",
            text: replace("vip = \"203.0.113.10\"", &format!("vip = \"{vip}\"")),
            at_line_with: "vip = ",
            path: "forwarding_rule \"web-vip\".vip",
            message,
            hint: "a VIP must be a unicast address clients route to the appliance",
        });
    }
}

/// Runs `cmd`, killing it after `limit`: (exit code, output), or None when
/// it had to be killed (it hung).
fn run_bounded(mut cmd: Command, limit: std::time::Duration) -> Option<(Option<i32>, String)> {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            return Some((out.status.code(), text));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success());
}

const PROMPT: std::time::Duration = std::time::Duration::from_secs(10);

/// AP-5: a configuration path that is a FIFO, a
/// directory or larger than 16 MiB is refused at once by `check-config`
/// and `run`: reading a FIFO would block until a writer came.
#[test]
fn config_paths_that_are_no_regular_files_are_refused_without_blocking() {
    let dir = tempdir("limits-config-path");
    let fifo = dir.join("fifo.toml");
    mkfifo(&fifo);
    let big = dir.join("big.toml");
    let mut text = BASE.to_string();
    text.push_str(&"#".repeat(17 << 20));
    let big_len = text.len();
    std::fs::write(&big, text).unwrap();
    let too_big = format!("the configuration file is {big_len} bytes; at most 16777216 (16 MiB)");
    for (path, message) in [
        (
            &fifo,
            "the configuration path is a FIFO, not a regular file",
        ),
        (
            &dir,
            "the configuration path is a directory, not a regular file",
        ),
        (&big, too_big.as_str()),
    ] {
        for args in [&["check-config"][..], &["run", "--config"][..]] {
            let mut cmd = Command::new(sluice_bin());
            cmd.args(args).arg(path);
            let (code, err) =
                run_bounded(cmd, PROMPT).unwrap_or_else(|| panic!("sluice {args:?} {path:?} hung"));
            assert_eq!(code, Some(2), "{args:?} {path:?}: {err}");
            assert!(
                err.contains(&format!("{}: error: {message}", path.display())),
                "{args:?} {path:?}: {err}"
            );
            assert!(err.contains("hint: "), "{err}");
        }
    }
}

/// AP-5: a reload whose configuration path has become
/// a FIFO fails at once and keeps the running configuration, instead of
/// blocking the control thread (and with it every later reload, status
/// and the shutdown).
#[test]
fn a_reload_from_a_fifo_fails_at_once_and_keeps_running() {
    let dir = tempdir("limits-reload-fifo");
    let cfg = dir.join("sluice.toml");
    let text = replace("device = \"net_null0\"", "device = \"net_null0,no-rx=1\"")
        .replace("\"--no-pci\"]", "\"--no-pci\", \"--log-level=error\"]");
    std::fs::write(&cfg, text).unwrap();
    let sock = dir.join("control.sock");
    let mut child = KillOnDrop(
        Command::new(sluice_bin())
            .args(["run", "--no-metrics-server", "--duration", "30", "--config"])
            .arg(&cfg)
            .arg("--control-socket")
            .arg(&sock)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ask = |what: &str| {
        let mut cmd = Command::new(sluice_bin());
        cmd.arg(what).arg("--control-socket").arg(&sock);
        run_bounded(cmd, PROMPT).unwrap_or_else(|| panic!("sluice {what} hung"))
    };
    let t0 = std::time::Instant::now();
    while ask("status").0 != Some(0) {
        assert!(t0.elapsed() < PROMPT, "sluice did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    mkfifo(&cfg);
    let (code, text) = ask("reload");
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("the configuration path is a FIFO, not a regular file"),
        "{text}"
    );
    let (code, status) = ask("status");
    assert_eq!(code, Some(0), "still serving: {status}");
    assert!(status.contains("reloads ok 0 failed 1"), "{status}");
    let _ = Command::new("kill").arg(child.0.id().to_string()).status();
    let stopped = child.0.wait().unwrap();
    assert!(stopped.success(), "{stopped}");
}

/// A child process killed when the test ends, also by a failed assertion.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// AP-4: TAP names the kernel reserves or refuses,
/// and one TAP name for two ports, are refused by `check-config` ("lo" was
/// accepted and handed to net_tap).
#[test]
fn reserved_and_shared_tap_names_are_refused() {
    let with_tap = |tap: &str| {
        replace(
            "address = \"192.0.2.1/24\"\n",
            &format!("address = \"192.0.2.1/24\"\ntap = \"{tap}\"\n"),
        )
    };
    for tap in ["lo", "all", "default"] {
        assert_refused(&Refusal {
            case: "tap-reserved",
            text: with_tap(tap),
            at_line_with: "tap = ",
            path: "dataplane.port \"uplink\".tap",
            message: format!("{tap:?} is a reserved interface name"),
            hint: "choose a name of your own",
        });
    }
    for tap in ["..", "sluice-uplink-01", "sl up", "sl/up", "sl:up", ""] {
        assert_refused(&Refusal {
            case: "tap-invalid",
            text: with_tap(tap),
            at_line_with: "tap = ",
            path: "dataplane.port \"uplink\".tap",
            message: format!("{tap:?} is not a usable interface name"),
            hint: "give 1-15 characters",
        });
    }
    let two_ports = format!(
        "{}\n[[dataplane.port]]\nname = \"second\"\ndevice = \"net_null1\"\n\
         address = \"198.51.100.1/24\"\ntap = 'sl-up'\n",
        with_tap("sl-up")
    );
    assert_refused(&Refusal {
        case: "tap-shared",
        text: two_ports,
        at_line_with: "tap = 'sl-up'",
        path: "dataplane.port \"second\".tap",
        message: "TAP \"sl-up\" is also the TAP of port \"uplink\" (line 9)".into(),
        hint: "give each port's TAP its own name",
    });
}

/// AP-4: a TAP name that is already an interface on
/// the host: `sluice run` refuses before EAL, by field and name;
/// `check-config` accepts the file (it may be meant for another host) and
/// warns. Before, net_tap attached to the other program's persistent TAP
/// and sluice ran on it. In a private network namespace, so the host is
/// left alone.
#[test]
fn run_refuses_a_tap_name_that_exists_on_the_host() {
    let dir = tempdir("limits-tap-exists");
    let cfg = dir.join("sluice.toml");
    let text = replace(
        "address = \"192.0.2.1/24\"\n",
        "address = \"192.0.2.1/24\"\ntap = \"slx-taken\"\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let script = format!(
        "ip tuntap add slx-taken mode tap && {bin} check-config {cfg} && exec {bin} run \
         --no-metrics-server --no-control-socket --duration 1 --config {cfg}",
        bin = sluice_bin(),
        cfg = cfg.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-n", "sh", "-c", &script]);
    let (code, out) = run_bounded(cmd, PROMPT).expect("sluice hung");
    let refusal = "dataplane.port \"uplink\".tap: interface \"slx-taken\" already exists on \
                   this host";
    assert!(
        out.contains("sluice.toml: ok"),
        "check-config accepts the file: {out}"
    );
    assert!(
        out.contains(&format!("warning: {refusal}")),
        "check-config warns: {out}"
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("sluice: {refusal}")), "{out}");
    assert!(out.contains("ip link del slx-taken"), "{out}");
    assert!(!out.contains("EAL:"), "refused before EAL: {out}");
}
