//! The control socket (AP-5): a unix stream socket, mode 0600 (root only),
//! in a directory created 0700, one request per connection: `reload`,
//! `status` or `explain …` (`crate::explain::live`). The reply's first line is `ok` or `error`; the rest is text for
//! the operator. The client trusts an answer only from a server running as
//! root or as the client's own user (SO_PEERCRED).
//!
//! The listener thread only forwards requests: the control thread owns the
//! configuration and answers them between supervision steps.

use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

/// Default control socket path.
pub const DEFAULT_PATH: &str = "/run/sluice/sluice.sock";

/// The longest request line: an `explain` of a capture carries its
/// frames in hex (`crate::explain::live`). Longer ones are refused.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The time a client has to send its whole request: the listener serves
/// one connection at a time, so a slow client must not hold it.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Reload,
    Status,
    /// The arguments of an `explain` request line.
    Explain(String),
    /// `sluice status --json`.
    StatusJson,
}

/// A request waiting for the control thread's answer.
#[derive(Debug)]
pub struct Pending {
    pub request: Request,
    /// The text for the operator, or why the request was refused.
    pub reply: Sender<Result<String, String>>,
}

/// Binds `path` (removing a stale socket, refusing to steal a live one) and
/// forwards requests from a new thread.
pub fn serve(path: &Path) -> io::Result<Receiver<Pending>> {
    if let Some(dir) = path.parent() {
        create_private_dirs(dir)?;
    }
    if UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{}: another sluice answers there", path.display()),
        ));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    // Reload and status are for the operator (root) only.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("sluice-control".into())
        .spawn(move || {
            // Lives as long as the process; a failed request only affects
            // its own connection.
            for conn in listener.incoming().flatten() {
                let _ = handle(conn, &tx);
            }
        })?;
    Ok(rx)
}

/// Creates `dir` and its missing ancestors mode 0700 whatever the umask;
/// directories that already exist are left as they are (the operator's).
pub fn create_private_dirs(dir: &Path) -> io::Result<()> {
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    for d in missing.iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?,
            // Created in between by someone else: not ours to change.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn handle(mut conn: UnixStream, tx: &Sender<Pending>) -> io::Result<()> {
    let line = match read_request(&mut conn, MAX_REQUEST_BYTES, REQUEST_DEADLINE) {
        Ok(line) => line,
        Err(why) => return conn.write_all(format!("error\n{why}\n").as_bytes()),
    };
    let request = match line.trim() {
        "reload" => Request::Reload,
        "status" => Request::Status,
        l if l.starts_with("explain ") => Request::Explain(l["explain ".len()..].to_string()),
        "status-json" => Request::StatusJson,
        other => {
            let shown: String = other.chars().take(64).collect();
            return conn.write_all(format!("error\nunknown request {shown:?}\n").as_bytes());
        }
    };
    let (reply, answer) = mpsc::channel();
    tx.send(Pending { request, reply })
        .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "control thread gone"))?;
    let text = match answer.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(t)) => format!("ok\n{t}"),
        Ok(Err(t)) => format!("error\n{t}"),
        Err(_) => "error\nno answer from the control thread\n".into(),
    };
    conn.write_all(text.as_bytes())
}

/// The request line (up to its newline, or the end of the stream), read
/// within `deadline` and at most `limit` bytes long; else why not.
fn read_request(conn: &mut UnixStream, limit: usize, deadline: Duration) -> Result<String, String> {
    let until = Instant::now() + deadline;
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("request not complete within {deadline:?}: refused"));
        }
        conn.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let n = match conn.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.to_string()),
        };
        let got = &chunk[..n];
        let end = got.iter().position(|&b| b == b'\n');
        line.extend_from_slice(&got[..end.unwrap_or(n)]);
        if line.len() > limit {
            return Err(format!(
                "request longer than {limit} bytes: refused (an explained capture \
                 must be smaller: split it)"
            ));
        }
        if n == 0 || end.is_some() {
            return String::from_utf8(line).map_err(|_| "request is not UTF-8".to_string());
        }
    }
}

/// Client side: sends `request`, returns (ok, text). Refuses a server that
/// runs as neither root nor the caller's user before sending anything.
pub fn request(path: &Path, request: &str) -> io::Result<(bool, String)> {
    let mut conn = UnixStream::connect(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot reach the running sluice at {}: {e}", path.display()),
        )
    })?;
    let own = rustix::process::getuid().as_raw();
    trusted_peer(peer_uid(&conn)?, own).map_err(|why| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing the control socket {}: {why}", path.display()),
        )
    })?;
    // A server that refuses the request may close before reading all of
    // it; its answer says why.
    let sent = conn.write_all(format!("{request}\n").as_bytes());
    let mut reply = Vec::new();
    let read = conn.read_to_end(&mut reply);
    if reply.is_empty() {
        sent?;
        read?;
    }
    parse_reply(&reply).map_err(|why| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "malformed answer from the running sluice at {}: {why}",
                path.display()
            ),
        )
    })
}

/// A reply: `ok` or `error` on its first line, then the text.
fn parse_reply(reply: &[u8]) -> Result<(bool, String), String> {
    let reply = std::str::from_utf8(reply).map_err(|_| "not UTF-8".to_string())?;
    if reply.is_empty() {
        return Err("the connection closed without an answer".into());
    }
    match reply.split_once('\n') {
        Some(("ok", body)) => Ok((true, body.to_string())),
        Some(("error", body)) => Ok((false, body.to_string())),
        _ => {
            let head: String = reply
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(64)
                .collect();
            Err(format!("expected `ok` or `error` first, got {head:?}"))
        }
    }
}

/// The uid of the process at the other end of `conn` (SO_PEERCRED: as of
/// its `listen`/`connect`, not forgeable by the peer).
pub fn peer_uid(conn: &UnixStream) -> io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(conn)?.uid.as_raw())
}

/// The process answering at the control socket runs as neither root nor
/// the caller's user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the process answering there runs as uid {peer}, neither root nor you \
     (uid {own}): refusing to talk to it; another user may have put a socket at \
     this path: check who owns it and its directory"
)]
pub struct UntrustedPeer {
    pub peer: u32,
    pub own: u32,
}

/// AP-5: an answer is trusted from root (the appliance) or from the
/// caller's own user; anyone else may have put a socket at the path.
pub fn trusted_peer(peer: u32, own: u32) -> Result<(), UntrustedPeer> {
    if peer == 0 || peer == own {
        Ok(())
    } else {
        Err(UntrustedPeer { peer, own })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn answers_are_trusted_from_root_or_the_same_user_only() {
        assert_eq!(trusted_peer(0, 1000), Ok(()));
        assert_eq!(trusted_peer(1000, 1000), Ok(()));
        assert_eq!(trusted_peer(0, 0), Ok(()));
        let refused = trusted_peer(1001, 1000).unwrap_err().to_string();
        assert!(
            refused.contains("uid 1001") && refused.contains("(uid 1000)"),
            "{refused}"
        );
        assert!(trusted_peer(65534, 0).is_err());
    }

    #[test]
    fn peer_uid_reads_the_other_end() {
        let (a, _b) = UnixStream::pair().unwrap();
        let own = rustix::process::getuid().as_raw();
        assert_eq!(peer_uid(&a).unwrap(), own);
        // The same socket judged as a client of another user would be.
        assert!(trusted_peer(peer_uid(&a).unwrap(), own).is_ok());
        if own != 0 {
            assert!(trusted_peer(peer_uid(&a).unwrap(), own + 1).is_err());
        }
    }

    #[test]
    fn replies_are_ok_or_error_and_nothing_else() {
        assert_eq!(parse_reply(b"ok\ntext\n"), Ok((true, "text\n".into())));
        assert_eq!(parse_reply(b"error\nwhy\n"), Ok((false, "why\n".into())));
        assert!(parse_reply(b"")
            .unwrap_err()
            .contains("closed without an answer"));
        assert!(parse_reply(b"okay\n").unwrap_err().contains("got \"okay\""));
        assert!(parse_reply(b"ok").is_err(), "no line");
        assert!(parse_reply(b"\xff\n").is_err());
    }

    /// A request is read up to its newline, refused past the size limit
    /// or the deadline, whatever the client does.
    #[test]
    fn requests_are_bounded_in_size_and_time() {
        let (mut server, mut client) = UnixStream::pair().unwrap();
        client.write_all(b"status\nignored").unwrap();
        let got = read_request(&mut server, 64, Duration::from_secs(1));
        assert_eq!(got, Ok("status".into()));
        let (mut server, mut client) = UnixStream::pair().unwrap();
        client.write_all(&[b'a'; 100]).unwrap();
        let got = read_request(&mut server, 64, Duration::from_secs(1)).unwrap_err();
        assert!(got.contains("longer than 64 bytes"), "{got}");
        let (mut server, mut client) = UnixStream::pair().unwrap();
        client.write_all(b"expl").unwrap();
        let t0 = Instant::now();
        let got = read_request(&mut server, 64, Duration::from_millis(200)).unwrap_err();
        assert!(got.contains("not complete within"), "{got}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        drop(client);
    }

    #[test]
    fn created_directories_are_0700_and_existing_ones_untouched() {
        let base = std::env::temp_dir().join(format!("sluice-ctl-dirs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let deep = base.join("a/b");
        create_private_dirs(&deep).unwrap();
        for d in [base.join("a"), deep.clone()] {
            let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
        let mode = std::fs::metadata(&base).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "an existing directory keeps its mode");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
