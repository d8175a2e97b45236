//! A `sluice run` in the background, driven through its control socket
//! (`sluice status`, `sluice reload`) and read through its /metrics.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::sluice_bin;

/// `sluice run --config CFG --control-socket SOCK --duration SECONDS
/// --no-handoff`; stopped with SIGTERM and reaped when dropped, also when
/// a test fails (without a hand-off file: each test starts afresh).
pub struct RunningSluice {
    child: Child,
    pub sock: PathBuf,
}

impl RunningSluice {
    pub fn start(cfg: &Path, sock: &Path, seconds: u32) -> Self {
        let child = Command::new(sluice_bin())
            .args(["run", "--duration", &seconds.to_string(), "--config"])
            .arg(cfg)
            .arg("--control-socket")
            .arg(sock)
            .arg("--no-handoff")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sluice run");
        Self {
            child,
            sock: sock.to_path_buf(),
        }
    }

    /// [`RunningSluice::start`] with the run's standard error written to
    /// `log` (for a test to show when the run fails).
    pub fn start_logged(cfg: &Path, sock: &Path, seconds: u32, log: &Path) -> Self {
        let child = Command::new(sluice_bin())
            .args(["run", "--duration", &seconds.to_string(), "--config"])
            .arg(cfg)
            .arg("--control-socket")
            .arg(sock)
            .arg("--no-handoff")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("create the run's log"))
            .spawn()
            .expect("spawn sluice run");
        Self {
            child,
            sock: sock.to_path_buf(),
        }
    }

    /// The process id of the run (for `/proc/PID/…`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the run has exited already (its exit status, if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` (`-HUP`, …) to the run.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    /// `sluice ARGS --control-socket` of this run: (exit success, stdout
    /// and stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(sluice_bin())
            .args(args)
            .arg("--control-socket")
            .arg(&self.sock)
            .output()
            .expect("spawn sluice");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// The text of `sluice status` (empty if it failed).
    pub fn status(&self) -> String {
        match self.cli(&["status"]) {
            (true, text) => text,
            (false, _) => String::new(),
        }
    }

    /// Polls `sluice status` every 50 ms until `f` accepts it; how long
    /// that took. Panics with `what` and the last status after `limit`.
    pub fn wait_status(&self, what: &str, limit: Duration, f: impl Fn(&str) -> bool) -> Duration {
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < limit {
            let (ok, text) = self.cli(&["status"]);
            if ok && f(&text) {
                return t0.elapsed();
            }
            last = text;
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: not within {limit:?}; last status:\n{last}");
    }
}

impl Drop for RunningSluice {
    fn drop(&mut self) {
        self.signal("-TERM");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The line of `sluice status` for backend `addr` (empty if none).
pub fn backend_line<'a>(status: &'a str, addr: &str) -> &'a str {
    status
        .lines()
        .find(|l| l.contains(&format!("backend {addr} ")))
        .unwrap_or("")
}

/// Backend `addr`'s share of its service's table in `sluice status`, in
/// percent (-1 if not shown).
pub fn backend_share(status: &str, addr: &str) -> f64 {
    backend_line(status, addr)
        .rsplit("share ")
        .next()
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1.0)
}

/// Backend `addr`'s id in `sluice status` (None if not shown).
pub fn backend_id(status: &str, addr: &str) -> Option<String> {
    backend_line(status, addr)
        .split(" id ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .map(str::to_string)
}

/// GET /metrics on loopback `port`: the whole answer, headers included
/// (empty if nothing answers).
pub fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET /metrics HTTP/1.0\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// `GET path` on loopback `port` over HTTP/1.0: the whole answer, headers
/// included (empty if nothing answers).
pub fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// A loopback TCP port that was free a moment ago (for `[metrics] listen`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// VmRSS of process `pid` in KiB (from /proc/PID/status; 0 if unreadable).
pub fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
