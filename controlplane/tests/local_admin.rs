//! Local administration is safe (AP-5), through the real
//! `sluice` binary: the control socket's directory is private whatever the
//! umask, `sluice status` refuses a server run by another user, and no
//! start — failed or not — leaves DPDK's runtime directory behind.

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

fn config(dir: &Path, device: &str, extra_eal: &str) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(&path, one_backend_config(device, extra_eal, "")).unwrap();
    path
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// AP-5: under umask 000 the control socket's new directories are 0700 and
/// the socket 0600; `sluice status` still answers. Before: 0777 directories.
#[test]
fn control_socket_directory_is_private_under_umask_000() {
    let dir = tempdir("local-admin-umask");
    let cfg = config(&dir, "net_null0,no-rx=1", "");
    let sock = dir.join("run/sluice/ctl.sock");
    let script = format!(
        "umask 000 && exec {} run --duration 30 --no-metrics-server --config {} \
         --control-socket {}",
        sluice_bin(),
        cfg.display(),
        sock.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_path(&sock, Duration::from_secs(30));
    let status = sluice_status(&sock);
    let modes = [
        mode(&dir.join("run")),
        mode(&dir.join("run/sluice")),
        mode(&sock),
    ];
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    assert_eq!(modes, [0o700, 0o700, 0o600], "run/, run/sluice/, socket");
    assert!(status.status.success(), "{status:?}");
}

/// AP-5: `sluice status` talks only to a server running as root or as the
/// caller; a socket another user put at the path is refused before the
/// request is sent. Before: the impostor's answer was printed as the
/// status. Needs root (to run the impostor as `nobody`), `setpriv` and
/// python3; `control_socket::trusted_peer` has the unit tests.
#[test]
fn an_answer_from_another_users_socket_is_refused() {
    let python = Path::new("/usr/bin/python3");
    if !rustix::process::getuid().is_root()
        || !python.exists()
        || Command::new("setpriv").arg("--help").output().is_err()
    {
        eprintln!("skipped: needs root, setpriv and /usr/bin/python3");
        return;
    }
    let dir = tempdir("local-admin-impostor");
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = open.join("ctl.sock");
    let server = "import socket, sys\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  s.bind(sys.argv[1]); s.listen(1)\n\
                  s.settimeout(20)\n\
                  c, _ = s.accept()\n\
                  c.recv(64)\n\
                  c.sendall(b'ok\\nIMPOSTOR STATUS\\n')\n\
                  c.close()\n";
    let mut impostor = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(python)
        .args(["-c", server])
        .arg(&sock)
        .current_dir("/")
        .spawn()
        .unwrap();
    wait_for_path(&sock, Duration::from_secs(10));
    let out = sluice_status(&sock);
    let _ = impostor.kill();
    let _ = impostor.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains("IMPOSTOR"),
        "impostor's answer trusted: {stdout}"
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("runs as uid 65534, neither root nor you (uid 0)"),
        "{stderr}"
    );
}

/// EAL's runtime directory for `pid`'s own file prefix.
fn runtime_dir(pid: u32) -> PathBuf {
    let base = if rustix::process::getuid().is_root() {
        PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| "/tmp".into(), PathBuf::from)
    };
    base.join("dpdk").join(format!("sluice-{pid}"))
}

/// A start that fails after EAL created its runtime
/// directory (a device that cannot open; fewer lcores than workers), and a
/// normal run, leave no runtime directory. Before: each failed start left
/// its directory (megabytes with hugepages) in /run.
#[test]
fn no_start_leaves_the_dpdk_runtime_directory() {
    let dir = tempdir("local-admin-runtime-dir");
    let cases = [
        (
            "bad device",
            "net_pcap0,rx_pcap=/nonexistent/in.pcap,tx_pcap=/nonexistent/out.pcap",
            "",
            false,
        ),
        (
            "too few lcores",
            "net_null0,no-rx=1",
            r#", "-l", "0""#,
            false,
        ),
        ("normal run", "net_null0,no-rx=1", "", true),
    ];
    for (what, device, extra, succeeds) in cases {
        let cfg = config(&dir, device, extra);
        let child = Command::new(sluice_bin())
            .args(["run", "--duration", "1", "--no-metrics-server"])
            .args(["--no-control-socket", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), succeeds, "{what}: {err}");
        let left = runtime_dir(pid);
        assert!(
            !left.exists(),
            "{what}: {} left behind; stderr: {err}",
            left.display()
        );
    }
}
