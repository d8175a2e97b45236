//! The control socket (AP-5): a unix stream socket, mode 0600 (root only),
//! one request per connection: `reload` or `status`. The reply's first line
//! is `ok` or `error`; the rest is text for the operator.
//!
//! The listener thread only forwards requests: the control thread owns the
//! configuration and answers them between supervision steps.

use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

/// Default control socket path.
pub const DEFAULT_PATH: &str = "/run/sluice/sluice.sock";

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Reload,
    Status,
}

/// A request waiting for the control thread's answer.
#[derive(Debug)]
pub struct Pending {
    pub request: Request,
    pub reply: Sender<Result<String, String>>,
}

/// Binds `path` (removing a stale socket, refusing to steal a live one) and
/// forwards requests from a new thread.
pub fn serve(path: &Path) -> io::Result<Receiver<Pending>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
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

fn handle(mut conn: UnixStream, tx: &Sender<Pending>) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(conn.try_clone()?)
        .take(256)
        .read_line(&mut line)?;
    let request = match line.trim() {
        "reload" => Request::Reload,
        "status" => Request::Status,
        other => {
            return conn.write_all(format!("error\nunknown request {other:?}\n").as_bytes());
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

/// Client side: sends `request`, returns (ok, text).
pub fn request(path: &Path, request: &str) -> io::Result<(bool, String)> {
    let mut conn = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    conn.write_all(format!("{request}\n").as_bytes())?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once('\n').unwrap_or((reply.as_str(), ""));
    Ok((head == "ok", body.to_string()))
}
