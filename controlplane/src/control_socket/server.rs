//! The control socket's server (AP-5): one thread accepts connections,
//! checks who connects and reads their requests, never blocking on one;
//! each complete request is answered on a thread of its own, a bounded
//! number at once.

use std::collections::HashMap;
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::bind::{self, BindError};
use super::{
    Access, Answers, Reload, Request, MAX_JOBS, MAX_RENDERS, MAX_REQUEST_BYTES, MAX_WAITING,
    RELOAD_WAIT, REQUEST_DEADLINE, WRITE_DEADLINE,
};

/// The serving control socket, as the control thread sees it.
pub struct ControlSocket {
    reloads: Receiver<Reload>,
    answers: Arc<AnswerSlot>,
}

impl ControlSocket {
    /// Answers `status`, `status-json` and `explain` from `answers` from
    /// now on; until then such requests wait (a few seconds at most).
    pub fn answer_from(&self, answers: impl Answers) {
        self.answers.set(Arc::new(answers));
    }

    /// The reloads asked for since the last call.
    pub fn reloads(&self) -> mpsc::TryIter<'_, Reload> {
        self.reloads.try_iter()
    }
}

/// Binds `path` (see [`bind::bind`]) and serves it from a new thread,
/// letting in the clients `access` allows.
pub fn serve(path: &Path, access: Access) -> Result<ControlSocket, BindError> {
    let listener = bind::bind(path, access.group.as_ref())?;
    let io_err = |source| BindError::Io {
        path: path.to_path_buf(),
        step: "cannot serve it",
        source,
    };
    listener.set_nonblocking(true).map_err(io_err)?;
    let poll = Poll::new().map_err(io_err)?;
    poll.registry()
        .register(
            &mut SourceFd(&listener.as_raw_fd()),
            LISTENER,
            Interest::READABLE,
        )
        .map_err(io_err)?;
    let (tx, reloads) = mpsc::channel();
    let answers = Arc::new(AnswerSlot::default());
    let refusals = Arc::new(Refusals::default());
    let server = Server {
        listener,
        poll,
        waiting: HashMap::new(),
        next: 1,
        chunk: vec![0; 64 << 10],
        access,
        accept_again: false,
        jobs: Jobs {
            reloads: tx,
            answers: Arc::clone(&answers),
            running: Arc::default(),
            rendering: Arc::default(),
            refusals: Arc::clone(&refusals),
        },
        refusals,
    };
    std::thread::Builder::new()
        .name("sluice-control".into())
        .spawn(move || server.run())
        .map_err(io_err)?;
    Ok(ControlSocket { reloads, answers })
}

const LISTENER: Token = Token(0);

/// How long a status or explain waits for the control thread to hand
/// over what it answers from (only right after start).
const ANSWERS_WAIT: Duration = Duration::from_secs(10);

/// A connection whose request is not complete yet.
struct Waiting {
    conn: UnixStream,
    line: Vec<u8>,
    since: Instant,
}

/// What reading a connection came to.
enum Read {
    /// Nothing more to read for now.
    Wait,
    Complete,
    Refuse(String),
    /// The connection broke: nobody to answer.
    Drop,
}

struct Server {
    listener: UnixListener,
    poll: Poll,
    waiting: HashMap<Token, Waiting>,
    next: usize,
    chunk: Vec<u8>,
    access: Access,
    /// Accepting failed (out of descriptors): try again soon, not only
    /// when the next connection comes.
    accept_again: bool,
    jobs: Jobs,
    refusals: Arc<Refusals>,
}

impl Server {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            if let Err(e) = self.poll.poll(&mut events, self.next_timeout()) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.refusals.note(&format!("waiting for connections: {e}"));
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    token => self.read_ready(token),
                }
            }
            if self.accept_again {
                self.accept_all();
            }
            self.expire(Instant::now());
        }
    }

    /// Until the next request deadline (or the next accept retry).
    fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let deadline = self
            .waiting
            .values()
            .map(|w| (w.since + REQUEST_DEADLINE).saturating_duration_since(now))
            .min();
        let retry = self.accept_again.then_some(Duration::from_millis(100));
        deadline.into_iter().chain(retry).min()
    }

    fn accept_all(&mut self) {
        self.accept_again = false;
        loop {
            match self.listener.accept() {
                Ok((conn, _)) => self.admit(conn),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors: make room by dropping the
                    // connection waiting longest, and try again soon.
                    self.refusals
                        .note(&format!("cannot accept a connection: {e}"));
                    self.evict_oldest();
                    self.accept_again = true;
                    return;
                }
            }
        }
    }

    /// Checks who connected, then reads what it sent so far.
    fn admit(&mut self, conn: UnixStream) {
        let Ok(cred) = rustix::net::sockopt::socket_peercred(&conn) else {
            return;
        };
        if let Err(why) = self.access.check(cred.uid.as_raw(), cred.gid.as_raw()) {
            self.refusals.note(&why);
            return reply_now(conn, &why);
        }
        if conn.set_nonblocking(true).is_err() {
            return;
        }
        if self.waiting.len() >= MAX_WAITING {
            self.evict_oldest();
        }
        let token = Token(self.next);
        self.next = self.next.wrapping_add(1).max(1);
        let registered = self.poll.registry().register(
            &mut SourceFd(&conn.as_raw_fd()),
            token,
            Interest::READABLE,
        );
        if registered.is_err() {
            return reply_now(conn, "the control socket cannot take more connections now");
        }
        let since = Instant::now();
        let line = Vec::new();
        self.waiting.insert(token, Waiting { conn, line, since });
        self.read_ready(token);
    }

    fn read_ready(&mut self, token: Token) {
        let Some(w) = self.waiting.get_mut(&token) else {
            return;
        };
        match read_some(w, &mut self.chunk) {
            Read::Wait => {}
            Read::Complete => {
                if let Some(w) = self.remove(token) {
                    self.dispatch(w);
                }
            }
            Read::Refuse(why) => {
                if let Some(w) = self.remove(token) {
                    reply_now(w.conn, &why);
                }
            }
            Read::Drop => drop(self.remove(token)),
        }
    }

    fn remove(&mut self, token: Token) -> Option<Waiting> {
        let w = self.waiting.remove(&token)?;
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&w.conn.as_raw_fd()));
        Some(w)
    }

    fn dispatch(&mut self, w: Waiting) {
        let request = String::from_utf8(w.line)
            .map_err(|_| "request is not UTF-8".to_string())
            .and_then(|line| Request::parse(&line));
        match request {
            Ok(request) => self.jobs.start(w.conn, request),
            Err(why) => reply_now(w.conn, &why),
        }
    }

    fn evict_oldest(&mut self) {
        let oldest = self.waiting.iter().min_by_key(|(_, w)| w.since);
        let Some(token) = oldest.map(|(t, _)| *t) else {
            return;
        };
        if let Some(w) = self.remove(token) {
            let why = format!(
                "too many connections waiting to send their request ({MAX_WAITING}): the one \
                 waiting longest is dropped; send the request as soon as connected"
            );
            self.refusals.note(&why);
            reply_now(w.conn, &why);
        }
    }

    /// Refuses the connections whose request is late.
    fn expire(&mut self, now: Instant) {
        let late: Vec<Token> = self
            .waiting
            .iter()
            .filter(|(_, w)| now >= w.since + REQUEST_DEADLINE)
            .map(|(t, _)| *t)
            .collect();
        for token in late {
            if let Some(w) = self.remove(token) {
                let why = format!("request not complete within {REQUEST_DEADLINE:?}: refused");
                self.refusals.note(&why);
                reply_now(w.conn, &why);
            }
        }
    }
}

/// Reads what `w`'s client sent, up to its request's newline (or the end
/// of the stream) and at most [`MAX_REQUEST_BYTES`].
fn read_some(w: &mut Waiting, chunk: &mut [u8]) -> Read {
    loop {
        let n = match w.conn.read(chunk) {
            Ok(0) => return Read::Complete,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Read::Drop,
        };
        let got = &chunk[..n];
        let end = got.iter().position(|&b| b == b'\n');
        w.line.extend_from_slice(&got[..end.unwrap_or(n)]);
        if w.line.len() > MAX_REQUEST_BYTES {
            return Read::Refuse(format!(
                "request longer than {MAX_REQUEST_BYTES} bytes: refused (an explained capture \
                 must be smaller: split it)"
            ));
        }
        if end.is_some() {
            return Read::Complete;
        }
    }
}

/// Sends a short `error` reply without waiting (the socket's buffer is
/// empty: it fits) and closes the connection.
fn reply_now(conn: UnixStream, why: &str) {
    let _ = conn.set_nonblocking(true);
    let _ = (&conn).write(format!("error\n{why}\n").as_bytes());
    // What the client sent and nobody read would reset the connection
    // before it reads the reply.
    let _ = (&conn).read(&mut [0u8; 4096]);
}

/// The requests being answered, each on its own thread.
struct Jobs {
    reloads: Sender<Reload>,
    answers: Arc<AnswerSlot>,
    running: Arc<AtomicUsize>,
    rendering: Arc<AtomicUsize>,
    refusals: Arc<Refusals>,
}

impl Jobs {
    /// Answers `request` on a thread of its own, or tells the client
    /// sluice is busy.
    fn start(&self, conn: UnixStream, request: Request) {
        let Some(job) = Permit::take(&self.running, MAX_JOBS) else {
            let why = format!("busy: {MAX_JOBS} requests in progress, try again");
            self.refusals.note(&why);
            return reply_now(conn, &why);
        };
        let render = match request {
            Request::Reload => None,
            _ => match Permit::take(&self.rendering, MAX_RENDERS) {
                Some(p) => Some(p),
                None => {
                    let why = format!(
                        "busy: {MAX_RENDERS} status or explain requests in progress, try again"
                    );
                    self.refusals.note(&why);
                    return reply_now(conn, &why);
                }
            },
        };
        let answers = Arc::clone(&self.answers);
        let reloads = self.reloads.clone();
        let refusals = Arc::clone(&self.refusals);
        let spawned = std::thread::Builder::new()
            .name("sluice-ctl-req".into())
            .spawn(move || {
                let text = answer(request, &answers, &reloads);
                drop(render);
                if let Err(e) = write_reply(conn, text.as_bytes()) {
                    refusals.note(&format!("a reply was not read: dropped ({e})"));
                }
                drop(job);
            });
        if let Err(e) = spawned {
            // The connection went with the closure: the client sees it close.
            self.refusals
                .note(&format!("cannot start a thread for a request: {e}"));
        }
    }
}

/// The reply to `request`: `ok` or `error`, then the text.
fn answer(request: Request, answers: &AnswerSlot, reloads: &Sender<Reload>) -> String {
    let rendered =
        |f: &dyn Fn(&dyn Answers) -> Result<String, String>| match answers.wait(ANSWERS_WAIT) {
            Some(a) => f(a.as_ref()),
            None => Err("sluice is still starting: try again\n".to_string()),
        };
    let result = match request {
        Request::Reload => reload(reloads),
        Request::Status => rendered(&|a| Ok(a.status())),
        Request::StatusJson => rendered(&|a| Ok(a.status_json())),
        Request::Explain(args) => rendered(&|a| {
            a.explain(&args)
                .map_err(|e| format!("sluice explain: {e}\n"))
        }),
        Request::Doctor => rendered(&|a| a.doctor().map_err(|e| format!("sluice doctor: {e}\n"))),
    };
    match result {
        Ok(t) => format!("ok\n{t}"),
        Err(t) => format!("error\n{t}"),
    }
}

/// Asks the control thread to reload; its answer.
fn reload(reloads: &Sender<Reload>) -> Result<String, String> {
    let (reply, answer) = mpsc::channel();
    if reloads.send(Reload { reply }).is_err() {
        return Err("the control thread is gone\n".into());
    }
    answer.recv_timeout(RELOAD_WAIT).unwrap_or_else(|_| {
        Err(format!(
            "no answer from the control thread within {RELOAD_WAIT:?}; the reload may \
             still apply: see the log and `sluice status --json`\n"
        ))
    })
}

/// Writes the whole reply within [`WRITE_DEADLINE`]; a client that does
/// not read it in time loses the connection.
fn write_reply(mut conn: UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    let until = Instant::now() + WRITE_DEADLINE;
    while !bytes.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("not read within {WRITE_DEADLINE:?}"),
            ));
        }
        conn.set_write_timeout(Some(left))?;
        match conn.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One of at most `limit` things at once; given back when dropped.
struct Permit(Arc<AtomicUsize>);

impl Permit {
    fn take(count: &Arc<AtomicUsize>, limit: usize) -> Option<Permit> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(Arc::clone(count)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What status and explain are answered from, once the control thread
/// handed it over.
#[derive(Default)]
struct AnswerSlot {
    answers: Mutex<Option<Arc<dyn Answers>>>,
    set: Condvar,
}

impl AnswerSlot {
    fn set(&self, answers: Arc<dyn Answers>) {
        *self.answers.lock().unwrap_or_else(|p| p.into_inner()) = Some(answers);
        self.set.notify_all();
    }

    fn wait(&self, limit: Duration) -> Option<Arc<dyn Answers>> {
        let guard = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .set
            .wait_timeout_while(guard, limit, |a| a.is_none())
            .unwrap_or_else(|p| p.into_inner());
        guard.clone()
    }
}

/// Refused or dropped connections, logged at most once per
/// [`Refusals::EVERY`] (a client opening connections in a loop must not
/// flood the log).
#[derive(Default)]
struct Refusals {
    state: Mutex<(Option<Instant>, u64)>,
}

impl Refusals {
    const EVERY: Duration = Duration::from_secs(10);

    fn note(&self, why: &str) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (last, unlogged) = &mut *state;
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < Self::EVERY) {
            *unlogged += 1;
            return;
        }
        let more = std::mem::take(unlogged);
        *last = Some(now);
        let more = if more > 0 {
            format!(" ({more} more since the last report)")
        } else {
            String::new()
        };
        crate::warn!("sluice: control socket: {why}{more}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::SyncSender;

    use super::*;

    /// Answers status once the test lets it (one token per render).
    struct Held(Mutex<Receiver<()>>);

    impl Answers for Held {
        fn status(&self) -> String {
            let _ = self.0.lock().unwrap().recv();
            "held\n".into()
        }
        fn status_json(&self) -> String {
            "{}\n".into()
        }
        fn doctor(&self) -> Result<String, String> {
            Err("not here".into())
        }
        fn explain(&self, _: &str) -> Result<String, String> {
            Err("no".into())
        }
    }

    fn ask(path: &Path, line: &str) -> UnixStream {
        let mut c = UnixStream::connect(path).unwrap();
        c.write_all(line.as_bytes()).unwrap();
        c
    }

    fn reply(mut c: UnixStream) -> String {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut text = String::new();
        let _ = c.read_to_string(&mut text);
        text
    }

    /// AP-5: renders past [`MAX_RENDERS`] are told `busy` at once, and
    /// the others are still answered; an unknown request is refused.
    #[test]
    fn renders_are_bounded_and_the_rest_told_busy() {
        let dir = std::env::temp_dir().join(format!("sluice-ctl-server-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("s");
        let socket = serve(&path, Access::new(None)).unwrap();
        let (release, held): (SyncSender<()>, _) = mpsc::sync_channel(MAX_RENDERS);
        socket.answer_from(Held(Mutex::new(held)));
        let busy: Vec<UnixStream> = (0..MAX_RENDERS).map(|_| ask(&path, "status\n")).collect();
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let refused = reply(ask(&path, "status\n"));
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert_eq!(
            refused,
            format!(
                "error\nbusy: {MAX_RENDERS} status or explain requests in progress, try again\n"
            )
        );
        assert!(reply(ask(&path, "stats\n")).starts_with("error\nunknown request \"stats\""));
        assert_eq!(reply(ask(&path, "status-json\n")), refused);
        for _ in 0..MAX_RENDERS {
            release.send(()).unwrap();
        }
        for c in busy {
            assert_eq!(reply(c), "ok\nheld\n");
        }
        assert_eq!(reply(ask(&path, "status-json\n")), "ok\n{}\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
