//! The admin HTTP endpoint (AP-5) through the real `sluice`
//! binary on net_null: a client cannot make it grow without bound, stall
//! other scrapes, or stop it for good by exhausting file descriptors; it
//! answers /healthz and /ready; a taken address fails the start before EAL.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The configuration of a server whose metrics listen on `port`.
fn config(port: u16) -> String {
    one_backend_config(
        "net_null0,no-rx=1",
        "",
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Appliance {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl Appliance {
    /// `sluice run` under `prefix` (e.g. `prlimit --nofile=S:H --`), until
    /// /ready answers 200.
    fn start(name: &str, prefix: &[&str]) -> Self {
        let dir = tempdir(name);
        let port = free_port();
        let cfg = dir.join("sluice.toml");
        std::fs::write(&cfg, config(port)).unwrap();
        let stderr = dir.join("stderr");
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(sluice_bin());
                c
            }
            None => Command::new(sluice_bin()),
        };
        let child = cmd
            .args(["run", "--duration", "60", "--no-control-socket", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let a = Self {
            child,
            port,
            stderr,
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if get(port, "/ready", Duration::from_secs(2)).is_some_and(|(s, _)| s == 200) {
                return a;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("not ready within 30 s: {}", a.stderr_text());
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// VmRSS once two readings 300 ms apart differ by less than 1 MiB (at
    /// most 20 s): after start the process still touches memory of its
    /// own (the conntrack sweep walks its shard), which is not the
    /// request's doing.
    fn settled_rss_kib(&self) -> u64 {
        let t0 = Instant::now();
        let mut last = self.rss_kib();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = self.rss_kib();
            if now.abs_diff(last) < 1024 || t0.elapsed() > Duration::from_secs(20) {
                return now;
            }
            last = now;
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }
}

impl Drop for Appliance {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid().to_string()).status();
        let _ = self.child.wait();
    }
}

/// One GET; (status, body), or None when no answer came within `limit`.
fn get(port: u16, path: &str, limit: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.set_write_timeout(Some(limit)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    Some((status, out.split_once("\r\n\r\n")?.1.to_string()))
}

fn scrape_ok(port: u16, limit: Duration) -> Duration {
    let t0 = Instant::now();
    let answer = get(port, "/metrics", limit);
    let took = t0.elapsed();
    let (status, body) = answer.unwrap_or_else(|| panic!("no /metrics answer within {limit:?}"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sluice_workers 1"), "{body}");
    took
}

/// AP-5: one client streaming an endless header line is closed
/// after the head cap (8 KiB) and the process does not buffer it; scrapes
/// keep working. Before: the server read all 64 MiB (RSS +1.6 GiB for a
/// longer stream).
#[test]
fn an_endless_header_line_is_cut_off_and_memory_stays_bounded() {
    let a = Appliance::start("admin-endless-header", &[]);
    let rss0 = a.settled_rss_kib();
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ").unwrap();
    let chunk = vec![b'a'; 1 << 20];
    let (mut sent, total) = (0usize, 64usize << 20);
    let t0 = Instant::now();
    let closed = loop {
        if sent >= total {
            break false;
        }
        match s.write_all(&chunk) {
            Ok(()) => sent += chunk.len(),
            Err(_) => break true,
        }
    };
    let took = t0.elapsed();
    let grown_kib = a.rss_kib().saturating_sub(rss0);
    eprintln!(
        "endless header: closed={closed} after {} KiB sent in {took:?}; RSS {rss0} KiB -> +{grown_kib} KiB",
        sent >> 10
    );
    assert!(
        closed,
        "the server read all {} MiB of one header line",
        sent >> 20
    );
    assert!(grown_kib < 16 << 10, "RSS grew {grown_kib} KiB");
    scrape_ok(a.port, Duration::from_secs(5));
}

/// AP-5: more idle connections than the cap, and a POST that
/// announces a body it never sends, do not stall a scrape. Before: the
/// scrape got no answer while the POST held its connection.
#[test]
fn idle_connections_and_a_bodiless_post_do_not_stall_a_scrape() {
    let a = Appliance::start("admin-slowloris", &[]);
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    let mut post = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    post.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let took = scrape_ok(a.port, Duration::from_secs(5));
    eprintln!("scrape with 100 idle connections and a stalled POST: {took:?}");
    post.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = String::new();
    let _ = post.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer:?}");
    assert!(answer.contains("Allow: GET"), "{answer:?}");
    // A GET that announces a body is refused the same way.
    let mut with_body = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    with_body
        .write_all(b"GET /metrics HTTP/1.1\r\nContent-Length: 10\r\n\r\n")
        .unwrap();
    with_body
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    let _ = with_body.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer:?}");
    drop(idle);
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn nofile_limits(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>()
        .join(":")
}

/// AP-5: the soft open-files limit is raised to the hard one at
/// start; when descriptors run out anyway, accept errors are logged and
/// retried, and /metrics answers again once they are released. Before: the
/// accept thread ended on EMFILE and /metrics stayed dead.
#[test]
fn running_out_of_file_descriptors_does_not_stop_the_endpoint() {
    let a = Appliance::start("admin-emfile", &["prlimit", "--nofile=256:4096", "--"]);
    assert_eq!(nofile_limits(a.pid()), "4096:4096", "soft limit raised");
    // Leave the process 8 spare descriptors, then hold 40 connections.
    let low = open_fds(a.pid()) + 8;
    let set = Command::new("prlimit")
        .args([
            "--pid",
            &a.pid().to_string(),
            &format!("--nofile={low}:{low}"),
        ])
        .status()
        .unwrap();
    assert!(set.success());
    let held: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(("127.0.0.1", a.port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let log = a.stderr_text();
    assert!(
        log.contains("accept failed"),
        "EMFILE reached and logged: {log}"
    );
    drop(held);
    let took = scrape_ok(a.port, Duration::from_secs(5));
    eprintln!("scrape after EMFILE and release: {took:?}");
    assert!(a.child_alive(), "still running: {}", a.stderr_text());
}

impl Appliance {
    fn child_alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid())).exists()
    }
}

/// AP-5: /healthz reports the control loop alive, /ready reports
/// the ports up and the first snapshot published; only GET is answered.
#[test]
fn healthz_and_ready_answer() {
    let a = Appliance::start("admin-health", &[]);
    let (status, body) = get(a.port, "/healthz", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ok: control loop ran "), "{body}");
    let (status, body) = get(a.port, "/ready", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("links: p0 up"), "{body}");
    let (status, _) = get(a.port, "/", Duration::from_secs(5)).unwrap();
    assert_eq!(status, 404);
    // Started before EAL, the endpoint's thread is then confined to the main
    // lcore's CPUs, off the workers'.
    let cpus = |task: &str| {
        std::fs::read_to_string(format!("/proc/{}/task/{task}/status", a.pid()))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap()
    };
    let admin_task = std::fs::read_dir(format!("/proc/{}/task", a.pid()))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .find(|t| {
            std::fs::read_to_string(format!("/proc/{}/task/{t}/comm", a.pid()))
                .is_ok_and(|c| c.trim() == "sluice-admin")
        })
        .expect("a sluice-admin thread");
    assert_eq!(
        cpus(&admin_task),
        cpus(&a.pid().to_string()),
        "admin thread CPUs"
    );
}

/// AP-5: a taken metrics address fails `sluice run` at once,
/// before EAL (and before the conntrack check), naming the field, the
/// address and the file.
#[test]
fn a_taken_metrics_address_fails_the_start_before_eal() {
    let dir = tempdir("admin-port-taken");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, config(port)).unwrap();
    let t0 = Instant::now();
    let out = Command::new(sluice_bin())
        .args(["run", "--duration", "5", "--no-control-socket", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "metrics.listen = \"127.0.0.1:{port}\" in {}",
            cfg.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("set [metrics] listen to a free address"),
        "{err}"
    );
    assert!(
        !err.contains("EAL:") && !err.contains("conntrack:"),
        "before EAL: {err}"
    );
    eprintln!("taken address refused in {took:?}");
}
