//! The real `sluice` binary under a service manager's eyes: the sd_notify
//! protocol a `Type=notify` unit relies on (READY=1 once the ports are up
//! and the first snapshot is published, WATCHDOG=1 from the control loop,
//! RELOADING=1/READY=1 around reloads, STOPPING=1 on SIGTERM), a refused
//! reload's exit status and diagnostics (AP-5), the journal's priority
//! prefixes, and the stable DPDK file prefix DPDK tools attach to.

mod common;

use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn config(dir: &Path, backend: &str) -> String {
    format!(
        r#"
[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--log-level=error"]
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[[backend_service]]
name = "web"
backend = [{{ address = "{backend}" }}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
# {}
"#,
        dir.display()
    )
}

/// A notification socket as systemd binds it, and what arrives on it.
struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    fn bind(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        Self { socket, path }
    }

    /// The next datagram within `limit`, or None.
    fn next(&self, limit: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Datagrams until one contains `what` (returned last); panics after
    /// `limit`.
    fn until(&self, what: &str, limit: Duration) -> Vec<String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while t0.elapsed() < limit {
            if let Some(m) = self.next(Duration::from_millis(200)) {
                let done = m.lines().any(|l| l == what);
                seen.push(m);
                if done {
                    return seen;
                }
            }
        }
        panic!("no {what} within {limit:?}; got {seen:?}");
    }
}

fn spawn(cfg: &Path, dir: &Path, env: &[(&str, String)], extra: &[&str]) -> Child {
    let stderr = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    Command::new(sluice_bin())
        .args(["run", "--duration", "60", "--no-metrics-server", "--config"])
        .arg(cfg)
        .arg("--control-socket")
        .arg(dir.join("control.sock"))
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn sluice(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = Command::new(sluice_bin())
        .args(args)
        .arg("--control-socket")
        .arg(dir.join("control.sock"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("sluice did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// READY=1 only once the ports are up and the first snapshot is
/// published; WATCHDOG=1 every half WATCHDOG_USEC from the control loop;
/// RELOADING=1 then READY=1 around a good and a refused reload (AP-5: the
/// refused one exits 2 with the file's diagnostics on stderr); STOPPING=1
/// on SIGTERM, then exit 0.
#[test]
fn sd_notify_ready_watchdog_reload_and_stopping() {
    let dir = tempdir("service-notify");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir, "10.0.0.1")).unwrap();
    let notify = Notify::bind(&dir);
    let env = [
        ("NOTIFY_SOCKET", notify.path.display().to_string()),
        ("WATCHDOG_USEC", "400000".to_string()),
    ];
    let mut child = spawn(&cfg, &dir, &env, &[]);

    let before_ready = notify.until("READY=1", Duration::from_secs(30));
    assert_eq!(
        before_ready.len(),
        1,
        "READY=1 comes first: {before_ready:?}"
    );
    // The ports were reported up before READY=1 (same thread, in order),
    // and the published snapshot already serves the backend.
    let log = std::fs::read_to_string(dir.join("stderr.txt")).unwrap();
    assert!(log.contains("port(s): p0="), "{log}");
    let (code, status, err) = sluice(&["status"], &dir);
    assert_eq!(code, 0, "{err}");
    assert!(status.contains("10.0.0.1"), "{status}");

    // WatchdogSec 0.4 s: at least 4 pings in 1.5 s (one per 0.2 s).
    let t0 = Instant::now();
    let mut pings = 0;
    while t0.elapsed() < Duration::from_millis(1500) {
        if let Some(m) = notify.next(Duration::from_millis(100)) {
            pings += usize::from(m.lines().any(|l| l == "WATCHDOG=1"));
        }
    }
    assert!((4..=12).contains(&pings), "{pings} WATCHDOG=1 in 1.5 s");

    // A good reload.
    std::fs::write(&cfg, config(&dir, "10.0.0.2")).unwrap();
    let (code, out, err) = sluice(&["reload"], &dir);
    assert_eq!(code, 0, "{out}{err}");
    let msgs = notify.until("READY=1", Duration::from_secs(5));
    let reloading = msgs.iter().position(|m| m.contains("RELOADING=1"));
    assert!(reloading.is_some(), "{msgs:?}");
    assert!(
        msgs.iter().any(|m| m.contains("MONOTONIC_USEC=")),
        "{msgs:?}"
    );
    assert!(sluice(&["status"], &dir).1.contains("10.0.0.2"));

    // A refused reload: exit 2, the diagnostics on stderr, and the service
    // is ready again on the running configuration.
    std::fs::write(&cfg, "[dataplane]\nworkers = \"many\"\n").unwrap();
    let (code, _out, err) = sluice(&["reload"], &dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sluice.toml:2"), "{err}");
    assert!(
        err.contains("the running configuration is unchanged"),
        "{err}"
    );
    let msgs = notify.until("READY=1", Duration::from_secs(5));
    assert!(msgs.iter().any(|m| m.contains("RELOADING=1")), "{msgs:?}");
    assert!(sluice(&["status"], &dir).1.contains("10.0.0.2"));

    let status = terminate(&mut child);
    let stopping = notify.until("STOPPING=1", Duration::from_secs(1));
    // No drain without [bgp]: the unit's TimeoutStopSec stands.
    assert!(
        !stopping.iter().any(|m| m.contains("EXTEND_TIMEOUT_USEC")),
        "{stopping:?}"
    );
    assert!(status.success(), "{status:?}");
}

/// With no WATCHDOG_USEC there is no WATCHDOG=1, and WATCHDOG_PID naming
/// another process turns it off too (sd_watchdog_enabled(3)).
#[test]
fn sd_notify_watchdog_only_when_asked() {
    let dir = tempdir("service-no-watchdog");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir, "10.0.0.1")).unwrap();
    let notify = Notify::bind(&dir);
    let env = [
        ("NOTIFY_SOCKET", notify.path.display().to_string()),
        ("WATCHDOG_USEC", "200000".to_string()),
        ("WATCHDOG_PID", "1".to_string()),
    ];
    let mut child = spawn(&cfg, &dir, &env, &[]);
    notify.until("READY=1", Duration::from_secs(30));
    let mut got = Vec::new();
    while let Some(m) = notify.next(Duration::from_millis(700)) {
        got.push(m);
    }
    assert!(!got.iter().any(|m| m.contains("WATCHDOG=1")), "{got:?}");
    terminate(&mut child);
}

/// `sluice run` writing to `stderr` with JOURNAL_STREAM set to `stream`.
fn run_logging(dir: &Path, cfg: &Path, stream: impl Fn(&Path) -> String) -> (i32, String) {
    let log = dir.join("stderr.txt");
    let file = std::fs::File::create(&log).unwrap();
    let status = Command::new(sluice_bin())
        .args([
            "run",
            "--duration",
            "0.5",
            "--no-metrics-server",
            "--config",
        ])
        .arg(cfg)
        .arg("--no-control-socket")
        .env("JOURNAL_STREAM", stream(&log))
        .stdout(Stdio::null())
        .stderr(file)
        .status()
        .unwrap();
    let mut text = String::new();
    std::fs::File::open(&log)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    (status.code().unwrap_or(-1), text)
}

fn dev_ino(path: &Path) -> String {
    let m = std::fs::metadata(path).unwrap();
    format!("{}:{}", m.dev(), m.ino())
}

/// Lines sluice writes carry `<6>` (info), `<4>` (warning) or `<3>`
/// (error) when stderr is the journal stream JOURNAL_STREAM names, and are
/// plain when it names another file.
#[test]
fn journal_priority_prefixes_only_on_the_journal_stream() {
    let dir = tempdir("service-journal");
    let cfg = dir.join("sluice.toml");
    // No `mac` and no TAP: the backend's next hop is a warning.
    std::fs::write(&cfg, config(&dir, "10.0.0.1")).unwrap();

    let (code, text) = run_logging(&dir, &cfg, dev_ino);
    assert_eq!(code, 0, "{text}");
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("sluice: ")).collect();
    assert!(ours.len() >= 4, "{text}");
    for l in &ours {
        assert!(
            l.starts_with("<6>sluice: ") || l.starts_with("<4>sluice: "),
            "{l}"
        );
    }
    assert!(
        ours.iter()
            .any(|l| l.starts_with("<4>sluice: backend 10.0.0.1 has no `mac`")),
        "{text}"
    );
    assert!(
        ours.iter().any(|l| l.starts_with("<6>sluice: packet pool")),
        "{text}"
    );

    // Another file's device:inode: plain lines.
    let (code, text) = run_logging(&dir, &cfg, |_| dev_ino(&cfg));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("sluice: packet pool"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with('<')), "{text}");

    // A refused configuration: every line of the diagnostics at <3>.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[dataplane]\nworkers = \"many\"\n").unwrap();
    let (code, text) = run_logging(&dir, &bad, dev_ino);
    assert_eq!(code, 2, "{text}");
    assert!(text.lines().count() >= 2, "{text}");
    for l in text.lines() {
        assert!(l.starts_with("<3>"), "{l}");
    }
}

/// EAL's runtime directory (DPDK's rte_eal_get_runtime_dir).
fn dpdk_runtime_dir(prefix: &str) -> PathBuf {
    let base = if rustix::process::getuid().is_root() {
        PathBuf::from("/var/run")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| "/tmp".into(), PathBuf::from)
    };
    base.join("dpdk").join(prefix)
}

/// `--file-prefix NAME` (what the systemd unit passes): DPDK's telemetry
/// socket is at the stable path dpdk-telemetry.py looks for, it answers
/// while sluice runs, and the directory is removed on exit.
#[test]
fn stable_file_prefix_lets_dpdk_telemetry_attach() {
    let dir = tempdir("service-prefix");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(&dir, "10.0.0.1")).unwrap();
    let prefix = format!("sluice-test-prefix-{}", std::process::id());
    let runtime = dpdk_runtime_dir(&prefix);
    let _ = std::fs::remove_dir_all(&runtime);
    let notify = Notify::bind(&dir);
    let env = [("NOTIFY_SOCKET", notify.path.display().to_string())];
    let mut child = spawn(&cfg, &dir, &env, &["--file-prefix", &prefix]);
    notify.until("READY=1", Duration::from_secs(30));

    let socket = runtime.join("dpdk_telemetry.v2");
    assert!(socket.exists(), "{} missing", socket.display());
    // The same query dpdk-telemetry.py makes, on its SOCK_SEQPACKET socket.
    let answer = telemetry(&socket, "/ethdev/list");
    assert!(answer.contains("\"/ethdev/list\":[0"), "{answer}");

    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
    assert!(!runtime.exists(), "{} left behind", runtime.display());
}

/// One telemetry request: the server sends its info on connect, then
/// answers the command.
fn telemetry(socket: &Path, command: &str) -> String {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::SEQPACKET, None).unwrap();
    rustix::net::connect(&fd, &SocketAddrUnix::new(socket).unwrap()).unwrap();
    let mut buf = vec![0u8; 16384];
    let _info = rustix::net::recv(&fd, &mut buf, rustix::net::RecvFlags::empty()).unwrap();
    rustix::net::send(&fd, command.as_bytes(), rustix::net::SendFlags::empty()).unwrap();
    let (n, _) = rustix::net::recv(&fd, &mut buf, rustix::net::RecvFlags::empty()).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// HC-4/HC-5 transitions are logged, one line each: a backend becoming
/// healthy at info (`<6>`), becoming unhealthy at warning (`<4>`).
#[test]
fn health_flips_are_logged_with_their_priority() {
    let dir = tempdir("service-health-log");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = dir.join("sluice.toml");
    let text = config(&dir, "127.0.0.1").replace(
        "[[backend_service]]\nname = \"web\"\n",
        &format!(
            "[[health_check]]\nname = \"http\"\ntype = \"HTTP\"\nport = {port}\n\
             check_interval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 1\n\
             unhealthy_threshold = 1\n\
             [[backend_service]]\nname = \"web\"\nhealth_check = \"http\"\n"
        ),
    );
    assert!(text.contains("health_check = \"http\""));
    std::fs::write(&cfg, text).unwrap();
    // Answers 200 until told to stop, then closes the port.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        use std::io::Write as _;
                        c.set_nonblocking(false).unwrap();
                        let mut buf = [0u8; 1024];
                        let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = c.read(&mut buf);
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })
    };
    let log = dir.join("stderr.txt");
    let file = std::fs::File::create(&log).unwrap();
    let journal = dev_ino(&log);
    let mut child = Command::new(sluice_bin())
        .args(["run", "--duration", "20", "--no-metrics-server", "--config"])
        .arg(&cfg)
        .arg("--no-control-socket")
        .env("JOURNAL_STREAM", journal)
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap();
    let healthy = format!("<6>sluice: health: backend 127.0.0.1:{port} is healthy (weight 1, ");
    let unhealthy = format!("<4>sluice: health: backend 127.0.0.1:{port} is unhealthy (reason ");
    let wait_for = |line: &str| {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.lines().any(|l| l.starts_with(line)) {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no line {line:?}; stderr:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    wait_for(&healthy);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
    let text = wait_for(&unhealthy);
    terminate(&mut child);
    assert_eq!(
        text.lines().filter(|l| l.starts_with(&healthy)).count(),
        1,
        "{text}"
    );
}
