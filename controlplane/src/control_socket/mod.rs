//! The control socket (AP-5): a unix stream socket, one request per
//! connection: `reload`, `status`, `status-json`, `explain …`
//! (`crate::explain::live`) or `doctor` (`crate::doctor`, a JSON report). The reply's first line is `ok` or `error`;
//! the rest is text for the operator.
//!
//! No client can wedge it (AP-5):
//!
//! - `bind`: the socket is made in a private (0700) directory, given its
//!   mode (0600, or 0660 with `--control-socket-group`) and group there,
//!   then renamed onto its path: it is never reachable with wider
//!   permissions. A path that is not a socket is refused, never deleted.
//! - `server`: one thread accepts and reads every connection's request
//!   without blocking on any (a request has [`REQUEST_DEADLINE`]; at most
//!   [`MAX_WAITING`] connections wait for theirs, the oldest is dropped
//!   past that). The peer's credentials are checked before anything is
//!   read ([`Access`]). A complete request runs on a thread of its own,
//!   at most [`MAX_JOBS`] at once, of which [`MAX_RENDERS`] renders;
//!   past that the client is told `busy`. Status and explain are rendered
//!   from the published state ([`Answers`]); only `reload` goes to the
//!   control thread. A reply not read within [`WRITE_DEADLINE`] is
//!   dropped.
//! - `client`: `sluice status`/`reload`/`explain` give up after their
//!   `--timeout`, and trust an answer only from a server running as root
//!   or as the caller's own user (SO_PEERCRED).

use std::sync::mpsc::Sender;
use std::time::Duration;

mod access;
mod bind;
mod client;
mod server;

pub use access::{Access, Group};
pub use bind::{check_path, create_private_dirs, BindError};
pub use client::{peer_uid, request, trusted_peer, UntrustedPeer};
pub use server::{serve, ControlSocket};

/// Default control socket path.
pub const DEFAULT_PATH: &str = "/run/sluice/sluice.sock";

/// The longest request line: an `explain` of a capture carries its
/// frames in hex (`crate::explain::live`). Longer ones are refused.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The time a client has to send its whole request after connecting.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// The time a client has to read its whole reply; the connection is
/// dropped after it.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// Connections whose request is not complete yet: past this, the one
/// waiting longest is dropped to make room (a client that sends its
/// request as it connects is never the oldest for long).
pub const MAX_WAITING: usize = 128;

/// Requests being answered at once (rendering, waiting for a reload,
/// writing their reply); past this a client is told `busy`.
pub const MAX_JOBS: usize = 16;

/// Status and explain renders at once: each may take a core and much
/// memory on a big configuration. Past this a client is told `busy`.
pub const MAX_RENDERS: usize = 3;

/// How long a `reload` waits for the control thread to apply it (a
/// reload of a very large configuration takes seconds).
pub const RELOAD_WAIT: Duration = Duration::from_secs(120);

/// `sluice status`'s and `sluice explain`'s default `--timeout`.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// `sluice reload`'s default `--timeout`: the server's [`RELOAD_WAIT`]
/// and a margin.
pub const RELOAD_CLIENT_TIMEOUT: Duration = Duration::from_secs(130);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Reload,
    Status,
    /// The arguments of an `explain` request line.
    Explain(String),
    /// `sluice status --json`.
    StatusJson,
    /// `sluice doctor`: the paths checked, as JSON.
    Doctor,
}

impl Request {
    /// The request a line asks for, or why it is refused.
    pub fn parse(line: &str) -> Result<Request, String> {
        Ok(match line.trim() {
            "reload" => Request::Reload,
            "status" => Request::Status,
            "status-json" => Request::StatusJson,
            "doctor" => Request::Doctor,
            l if l.starts_with("explain ") => Request::Explain(l["explain ".len()..].to_string()),
            other => {
                let shown: String = other.chars().take(64).collect();
                return Err(format!("unknown request {shown:?}"));
            }
        })
    }
}

/// A `reload` waiting for the control thread.
#[derive(Debug)]
pub struct Reload {
    /// The text for the operator, or why the reload was refused.
    pub reply: Sender<Result<String, String>>,
}

/// What the socket answers from the published state, on its own threads
/// (never the control thread's): `status`, `status-json`, `explain`,
/// `doctor`.
pub trait Answers: Send + Sync + 'static {
    fn status(&self) -> String;
    fn status_json(&self) -> String;
    /// An explanation, or why the request cannot be answered.
    fn explain(&self, args: &str) -> Result<String, String>;
    /// `sluice doctor`'s report (JSON), or why there is none.
    fn doctor(&self) -> Result<String, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_parse_or_are_refused() {
        assert_eq!(Request::parse("status\n"), Ok(Request::Status));
        assert_eq!(Request::parse("status-json"), Ok(Request::StatusJson));
        assert_eq!(Request::parse(" reload "), Ok(Request::Reload));
        assert_eq!(Request::parse("doctor\n"), Ok(Request::Doctor));
        assert_eq!(
            Request::parse("explain {\"flow\":1}"),
            Ok(Request::Explain("{\"flow\":1}".into()))
        );
        let e = Request::parse(&"x".repeat(500)).unwrap_err();
        assert!(e.starts_with("unknown request") && e.len() < 100, "{e}");
    }
}
