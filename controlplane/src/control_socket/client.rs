//! The client side of the control socket (`sluice status`, `reload`,
//! `explain`): one request, its reply within a timeout, from a server it
//! trusts (AP-5).

use std::io::{self, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Client side: sends `request`, returns (ok, text), all within `timeout`
/// (connecting, sending, reading the whole reply); past it, an error of
/// kind `TimedOut`. Refuses a server that runs as neither root nor the
/// caller's user before sending anything.
pub fn request(path: &Path, request: &str, timeout: Duration) -> io::Result<(bool, String)> {
    let until = Instant::now() + timeout;
    let late = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "no answer from the running sluice at {} within {timeout:?}: it may be \
                 stuck or busy; a reload of a very large configuration can take longer \
                 (raise --timeout)",
                path.display()
            ),
        )
    };
    let mut conn = connect(path, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => late(),
        _ => io::Error::new(
            e.kind(),
            format!("cannot reach the running sluice at {}: {e}", path.display()),
        ),
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
    let sent = write_within(&mut conn, format!("{request}\n").as_bytes(), until);
    let mut reply = Vec::new();
    let read = read_within(&mut conn, &mut reply, until);
    let timed_out = |r: &io::Result<()>| {
        r.as_ref().is_err_and(|e| {
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            )
        })
    };
    if timed_out(&sent) || timed_out(&read) {
        return Err(late());
    }
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

/// Connects, waiting at most `timeout` for room in the server's backlog
/// (a unix socket's connect blocks while it is full, for up to the send
/// timeout).
fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.set_write_timeout(Some(timeout))?;
    socket.connect(&socket2::SockAddr::unix(path)?)?;
    Ok(socket.into())
}

/// The time left until `until`, or a `TimedOut` error.
fn left(until: Instant) -> io::Result<Duration> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(left)
    }
}

fn write_within(conn: &mut UnixStream, mut bytes: &[u8], until: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        conn.set_write_timeout(Some(left(until)?))?;
        match conn.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn read_within(conn: &mut UnixStream, out: &mut Vec<u8>, until: Instant) -> io::Result<()> {
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        conn.set_read_timeout(Some(left(until)?))?;
        match conn.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
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

    /// AP-5: a server that accepts and never answers costs the client
    /// its timeout, not forever.
    #[test]
    fn a_silent_server_times_out() {
        let dir = std::env::temp_dir().join(format!("sluice-ctl-client-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t0 = Instant::now();
        let e = request(&path, "status", Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("within 300ms"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        drop(listener);
        std::fs::remove_dir_all(&dir).unwrap();
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
}
