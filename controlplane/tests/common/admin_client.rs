//! A strict client of the admin endpoint (`/metrics`, `/healthz`,
//! `/ready`) and a `sluice run` whose standard error is kept: the answer's
//! framing is checked (a chunked body must end with its last chunk), and
//! the run's memory read from /proc.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::sluice_bin;

/// A loopback port free now (bound, then released).
pub fn unused_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One complete answer of the admin endpoint.
#[derive(Debug)]
pub struct AdminAnswer {
    pub status: u16,
    /// The header lines, as sent.
    pub head: String,
    /// The body, de-chunked when it came in chunks.
    pub body: Vec<u8>,
    /// It came as `Transfer-Encoding: chunked`.
    pub chunked: bool,
}

impl AdminAnswer {
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("UTF-8 body")
    }

    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// `GET path` over HTTP/1.0 or HTTP/1.1 on loopback `port`, the whole
/// answer read within `limit`. Err (with what was read) on a timeout, an
/// answer cut short (a chunked body without its last chunk, a
/// `Content-Length` body shorter than announced) or a malformed frame.
pub fn admin_get(
    port: u16,
    path: &str,
    http10: bool,
    limit: Duration,
) -> Result<AdminAnswer, String> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(limit)).ok();
    let request = if http10 {
        format!("GET {path} HTTP/1.0\r\n\r\n")
    } else {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
    };
    s.write_all(request.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let left = limit.saturating_sub(t0.elapsed());
        if left.is_zero() {
            return Err(format!(
                "no complete answer within {limit:?} ({} bytes read)",
                raw.len()
            ));
        }
        s.set_read_timeout(Some(left)).ok();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => {
                return Err(format!(
                    "read after {:?} ({} bytes read): {e}",
                    t0.elapsed(),
                    raw.len()
                ))
            }
        }
    }
    parse_answer(&raw)
}

/// An answer as read up to the connection's close.
pub fn parse_answer(raw: &[u8]) -> Result<AdminAnswer, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of head in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let rest = &raw[end + 4..];
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let mut answer = AdminAnswer {
        status,
        head,
        body: Vec::new(),
        chunked: false,
    };
    if answer
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        answer.chunked = true;
        answer.body = dechunk(rest)?;
    } else if let Some(len) = answer.header("content-length") {
        let len: usize = len.parse().map_err(|e| format!("Content-Length: {e}"))?;
        if rest.len() != len {
            return Err(format!("body of {} bytes, {len} announced", rest.len()));
        }
        answer.body = rest.to_vec();
    } else {
        answer.body = rest.to_vec();
    }
    Ok(answer)
}

/// A chunked body (RFC 9112 §7.1, no extensions or trailers expected):
/// the data, or Err when a chunk is malformed or the last chunk
/// (`0\r\n\r\n`) is missing, or anything follows it.
pub fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut chunks = 0usize;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(|| {
            format!(
                "chunk {chunks}: no size line ({} bytes left, {} of body): the answer was cut",
                rest.len(),
                body.len()
            )
        })?;
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|e| e.to_string())?;
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|e| format!("chunk {chunks}: size {size_text:?}: {e}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            if rest != b"\r\n" {
                return Err(format!(
                    "after the last chunk: {:?}",
                    String::from_utf8_lossy(&rest[..rest.len().min(64)])
                ));
            }
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(format!(
                "chunk {chunks} of {size} bytes cut at {} bytes",
                rest.len()
            ));
        }
        if &rest[size..size + 2] != b"\r\n" {
            return Err(format!("chunk {chunks}: no CRLF after its {size} bytes"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
        chunks += 1;
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS`).
pub fn rss_kib_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// `sluice run --config DIR/sluice.toml --control-socket DIR/ctl.sock`
/// whose `[metrics] listen` is loopback port `port`, standard error in
/// `DIR/stderr`, `SLUICE_LOG=info`; killed and reaped when dropped.
pub struct AdminRun {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    pub sock: PathBuf,
}

impl AdminRun {
    /// Writes `config` to `dir/sluice.toml` and starts sluice on it for
    /// at most `seconds`; waits (up to `ready_within`) for `/ready` 200.
    pub fn start(
        dir: &Path,
        port: u16,
        config: &str,
        seconds: u32,
        ready_within: Duration,
    ) -> Self {
        let cfg = dir.join("sluice.toml");
        std::fs::write(&cfg, config).unwrap();
        let sock = dir.join("ctl.sock");
        let child = Command::new(sluice_bin())
            .args(["run", "--duration", &seconds.to_string(), "--config"])
            .arg(&cfg)
            .arg("--control-socket")
            .arg(&sock)
            .arg("--no-handoff")
            .env("SLUICE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .expect("spawn sluice run");
        let run = Self {
            child,
            port,
            dir: dir.to_path_buf(),
            sock,
        };
        let t0 = Instant::now();
        while t0.elapsed() < ready_within {
            if admin_get(port, "/ready", true, Duration::from_secs(2))
                .is_ok_and(|a| a.status == 200)
            {
                return run;
            }
            assert!(run.alive(), "sluice ended at start:\n{}", run.stderr());
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("not ready within {ready_within:?}:\n{}", run.stderr());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}/status", self.pid())).exists()
            && !std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
                .unwrap_or_default()
                .contains("State:\tZ")
    }

    pub fn rss_kib(&self) -> u64 {
        rss_kib_of(self.pid())
    }

    /// What the run wrote to standard error so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// Writes `config` over the configuration file and runs `sluice
    /// reload` against the run's control socket: (success, its output).
    pub fn reload(&self, config: &str) -> (bool, String) {
        std::fs::write(self.dir.join("sluice.toml"), config).unwrap();
        let out = Command::new(sluice_bin())
            .arg("reload")
            .arg("--control-socket")
            .arg(&self.sock)
            .output()
            .expect("spawn sluice reload");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }
}

impl Drop for AdminRun {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
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
