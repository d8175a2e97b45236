//! AP-5: no client can wedge the control socket, through the real `sluice`
//! binary on DPDK (`net_null`, `--no-huge`). A client that never reads its
//! answer, hundreds of idle connections or a client trickling its request
//! byte by byte delay no one else's `status` or `reload`; the `sluice`
//! client gives up on a server that never answers; a path that is not a
//! socket is refused and kept; the socket is never wider than 0600 (0660
//! with `--control-socket-group`) and the server lets in only root, its
//! own user and that group's members (SO_PEERCRED).

mod common;

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `sluice run` on a `net_null` port, killed and reaped when dropped.
struct Run {
    child: Child,
    sock: PathBuf,
}

impl Run {
    /// Starts sluice from `sh -c 'umask 000; exec sluice run …'` (the
    /// widest umask: nothing may depend on it), waits for its status.
    fn start(dir: &Path, extra: &[&str]) -> Run {
        Self::start_under(dir, "", extra)
    }

    /// As [`start`](Self::start), with `wrapper` (a command that execs
    /// its arguments) in front of sluice.
    fn start_under(dir: &Path, wrapper: &str, extra: &[&str]) -> Run {
        let cfg = dir.join("sluice.toml");
        std::fs::write(&cfg, one_backend_config("net_null0,no-rx=1", "", "")).unwrap();
        let sock = dir.join("ctl.sock");
        let script = format!(
            "umask 000 && exec {wrapper} {} run --duration 120 --no-metrics-server --config {} \
             --control-socket {} {}",
            sluice_bin(),
            cfg.display(),
            sock.display(),
            extra.join(" ")
        );
        let log = std::fs::File::create(dir.join("sluice.log")).unwrap();
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let run = Run { child, sock };
        let t0 = Instant::now();
        while !timed(&run.sock, &["status"], Duration::from_secs(5)).0 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "sluice did not answer status; its log:\n{}",
                std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        run
    }

    /// `sluice ARGS` against this run within `limit` (see [`timed`]),
    /// asserting it answered `ok` within `within`.
    fn answers(&self, args: &[&str], within: Duration) -> String {
        let t0 = Instant::now();
        let (ok, text) = timed(&self.sock, args, Duration::from_secs(10));
        let took = t0.elapsed();
        assert!(ok, "sluice {args:?} failed after {took:?}: {text}");
        assert!(
            took < within,
            "sluice {args:?} took {took:?} (limit {within:?})"
        );
        text
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// `sluice ARGS --control-socket SOCK`: (success, stdout and stderr),
/// killed after `limit` (then `(false, "killed …")`): a hanging socket
/// fails the test instead of hanging it.
fn timed(sock: &Path, args: &[&str], limit: Duration) -> (bool, String) {
    timed_cmd(
        Command::new(sluice_bin())
            .args(args)
            .arg("--control-socket")
            .arg(sock),
        limit,
    )
}

fn timed_cmd(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let dir = std::env::temp_dir();
    let out = dir.join(format!(
        "sluice-abuse-out-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&out).unwrap(),
        ))
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    match status {
        Some(s) => (s.success(), text),
        None => (false, format!("killed after {limit:?}: {text}")),
    }
}

/// An `explain` of `n` packets: about a kilobyte of answer each.
fn big_explain(n: u16) -> String {
    let frames = (0..n)
        .map(|i| {
            let f = tcp_frame(
                [2, 0, 0, 0, 0, 1],
                [198, 51, 100, 7],
                [203, 0, 113, 10],
                1000 + i,
                80,
                1,
            );
            controlplane::explain::live::hex(&f)
        })
        .collect();
    let req = controlplane::explain::live::Request {
        frames,
        ..Default::default()
    };
    req.line() + "\n"
}

/// AP-5: a client that asks for a ~1 MB explain and never reads it holds
/// nothing: another `status` answers within a second, `reload` works, and
/// the reader-less connection is dropped after the write deadline.
/// Before: the listener blocked writing to it, status and reload hung.
#[test]
fn a_client_that_never_reads_its_answer_blocks_no_one() {
    let dir = tempdir("ctl-abuse-no-read");
    let run = Run::start(&dir, &[]);
    let mut stuck = UnixStream::connect(&run.sock).unwrap();
    stuck.write_all(big_explain(1000).as_bytes()).unwrap();
    let sent = Instant::now();
    let mut stuck_status = UnixStream::connect(&run.sock).unwrap();
    stuck_status.write_all(b"status\n").unwrap();
    // Time to render the explanation and fill the socket's buffers.
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..3 {
        let text = run.answers(&["status"], Duration::from_secs(1));
        assert!(text.contains("web"), "{text}");
    }
    let text = run.answers(&["reload"], Duration::from_secs(5));
    assert!(!text.is_empty());
    // The write deadline (10 s from the render's end) drops the
    // connection: what was buffered, then the end of the stream, well
    // short of the whole answer.
    let _ = stuck.set_read_timeout(Some(Duration::from_secs(20)));
    std::thread::sleep(Duration::from_secs(25).saturating_sub(sent.elapsed()));
    let mut got = Vec::new();
    let t0 = Instant::now();
    let _ = stuck.read_to_end(&mut got);
    assert!(t0.elapsed() < Duration::from_secs(10), "not dropped");
    let head = String::from_utf8_lossy(&got[..got.len().min(64)]).into_owned();
    assert!(got.starts_with(b"ok\n"), "{head}");
    let verdicts = String::from_utf8_lossy(&got).matches("verdict:").count();
    assert!(
        verdicts < 1000,
        "the whole answer came: {verdicts} verdicts, {} bytes",
        got.len()
    );
}

/// AP-5: 200 connections that never send a request do not delay a
/// `status` (< 1 s) or a `reload`. Before: each held the listener 5 s in
/// turn.
#[test]
fn idle_connections_delay_no_one() {
    let dir = tempdir("ctl-abuse-idle");
    let run = Run::start(&dir, &[]);
    let idle: Vec<UnixStream> = (0..200)
        .filter_map(|_| UnixStream::connect(&run.sock).ok())
        .collect();
    assert!(idle.len() >= 150, "only {} connections", idle.len());
    std::thread::sleep(Duration::from_millis(200));
    run.answers(&["status"], Duration::from_secs(1));
    run.answers(&["reload"], Duration::from_secs(5));
    run.answers(&["status", "--json"], Duration::from_secs(1));
    drop(idle);
}

/// AP-5: a client sending its request a byte every 400 ms delays no one,
/// and is answered once its request is complete. Before: the listener
/// read it to the end before anyone else.
#[test]
fn a_trickling_client_delays_no_one() {
    let dir = tempdir("ctl-abuse-trickle");
    let run = Run::start(&dir, &[]);
    let mut slow = UnixStream::connect(&run.sock).unwrap();
    let trickle = std::thread::spawn(move || {
        for b in b"status\n" {
            slow.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(400));
        }
        let mut reply = String::new();
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = slow.read_to_string(&mut reply);
        reply
    });
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..4 {
        run.answers(&["status"], Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(200));
    }
    let reply = trickle.join().unwrap();
    assert!(
        reply.starts_with("ok\n") && reply.contains("web"),
        "{reply}"
    );
}

/// AP-5: `sluice status`, `reload` and `explain` against a server that
/// accepts and never answers exit 1 after their `--timeout`, saying so.
/// Before: they waited for ever.
#[test]
fn the_client_gives_up_on_a_silent_server() {
    let dir = tempdir("ctl-abuse-silent");
    let sock = dir.join("silent.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let held = std::thread::spawn(move || {
        let conns: Vec<UnixStream> = listener.incoming().take(3).flatten().collect();
        std::thread::sleep(Duration::from_secs(8));
        drop(conns);
    });
    let flow = ["tcp", "198.51.100.7:40000", "->", "203.0.113.10:80"];
    let cases: [Vec<&str>; 3] = [
        vec!["status", "--timeout", "1"],
        vec!["reload", "--timeout", "1.5"],
        [&["explain", "--timeout", "1"][..], &flow[..]].concat(),
    ];
    for args in cases {
        let mut cmd = Command::new(sluice_bin());
        // The socket goes before the flow: every word after it is the flow.
        cmd.args(&args[..3])
            .arg("--control-socket")
            .arg(&sock)
            .args(&args[3..]);
        let t0 = Instant::now();
        let (ok, text) = timed_cmd(&mut cmd, Duration::from_secs(6));
        let took = t0.elapsed();
        assert!(!ok, "{args:?}: {text}");
        assert!(took < Duration::from_secs(4), "{args:?}: {took:?}: {text}");
        assert!(
            text.contains("no answer from the running sluice"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("killed"), "{text}");
    }
    held.join().unwrap();
}

/// AP-5: a regular file or a directory at `--control-socket` stops the
/// start with the path, what is there and the fix, and is kept. Before:
/// the file was deleted and replaced by the socket.
#[test]
fn a_path_that_is_not_a_socket_is_refused_and_kept() {
    let dir = tempdir("ctl-abuse-not-socket");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, one_backend_config("net_null0,no-rx=1", "", "")).unwrap();
    let file = dir.join("precious.txt");
    std::fs::write(&file, "do not delete").unwrap();
    let sub = dir.join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    for (path, what) in [(&file, "a regular file"), (&sub, "a directory")] {
        let mut cmd = Command::new(sluice_bin());
        cmd.args(["run", "--duration", "3", "--no-metrics-server", "--config"])
            .arg(&cfg)
            .arg("--control-socket")
            .arg(path);
        let (ok, text) = timed_cmd(&mut cmd, Duration::from_secs(30));
        assert!(!ok, "{text}");
        assert!(
            text.contains(&format!("{}: {what}, not a socket", path.display()))
                && text.contains("remove it"),
            "{text}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "do not delete");
    assert!(sub.is_dir());
}

fn mode(p: &Path) -> Option<u32> {
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// AP-5: under umask 000, in an existing 0755 directory, the socket is
/// 0600 from the first instant it is at its path (watched from before the
/// start), and nothing else of sluice's appears in the directory for
/// longer than the start. Before: 0777 between bind and chmod.
#[test]
fn the_socket_is_never_wider_than_0600() {
    let dir = tempdir("ctl-abuse-mode");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.join("ctl.sock");
    // Every mode the path has, from before the start until half a second
    // after the socket came.
    let watch = {
        let sock = sock.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            let t0 = Instant::now();
            let mut first = None;
            while t0.elapsed() < Duration::from_secs(90) {
                if let Some(m) = mode(&sock) {
                    seen.insert(m);
                    let came = *first.get_or_insert_with(Instant::now);
                    if came.elapsed() > Duration::from_millis(500) {
                        break;
                    }
                }
                std::thread::yield_now();
            }
            seen
        })
    };
    let run = Run::start(&dir, &[]);
    let seen = watch.join().unwrap();
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0o600]);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    drop(run);
}

/// Root, when the test runs as root and `setpriv` is there: runs `sluice
/// ARGS` as uid 65534 with gid `gid` and no other group.
fn as_nobody(sock: &Path, gid: u32, args: &[&str]) -> Option<(bool, String)> {
    if !rustix::process::getuid().is_root()
        || Command::new("setpriv").arg("--help").output().is_err()
    {
        eprintln!("skipped: needs root and setpriv");
        return None;
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        &format!("--regid={gid}"),
        "--clear-groups",
        "--",
    ])
    .arg(sluice_bin())
    .args(args)
    .arg("--control-socket")
    .arg(sock)
    .current_dir("/");
    Some(timed_cmd(&mut cmd, Duration::from_secs(10)))
}

fn reloads(run: &Run) -> String {
    let json = run.answers(&["status", "--json"], Duration::from_secs(5));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["reloads"].to_string()
}

/// AP-5: the server checks each client's credentials (SO_PEERCRED), not
/// only the socket's mode: with the socket opened to everyone (0666), a
/// user neither root nor sluice's is refused `status` and `reload`, and
/// the reload is not run. Before: answered, and reloaded.
#[test]
fn other_users_are_refused_whatever_the_socket_mode() {
    let dir = tempdir("ctl-abuse-peercred");
    let run = Run::start(&dir, &[]);
    std::fs::set_permissions(&run.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let before = reloads(&run);
    for request in ["status", "reload"] {
        let Some((ok, text)) = as_nobody(&run.sock, 65534, &[request]) else {
            return;
        };
        assert!(!ok, "{request}: {text}");
        assert!(
            text.contains("permission denied: uid 65534 is not root"),
            "{request}: {text}"
        );
    }
    assert_eq!(reloads(&run), before, "a refused reload ran");
    run.answers(&["status"], Duration::from_secs(1));
}

/// AP-5: with `--control-socket-group nogroup` the socket is 0660 and of
/// that group, a client whose group is `nogroup` gets its status, and a
/// client of another group is refused by the socket's mode and, with the
/// mode opened, by the server.
#[test]
fn the_control_socket_group_lets_its_members_in() {
    let dir = tempdir("ctl-abuse-group");
    let has_nogroup = std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("nogroup:x:65534:"));
    if !has_nogroup {
        eprintln!("skipped: no group nogroup (65534)");
        return;
    }
    let run = Run::start(&dir, &["--control-socket-group", "nogroup"]);
    let meta = std::fs::metadata(&run.sock).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o660, 65534));
    let Some((ok, text)) = as_nobody(&run.sock, 65534, &["status"]) else {
        return;
    };
    assert!(ok && text.contains("web"), "{text}");
    let (ok, text) = as_nobody(&run.sock, 1, &["status"]).unwrap();
    assert!(!ok && text.contains("ermission denied"), "{text}");
    std::fs::set_permissions(&run.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, text) = as_nobody(&run.sock, 1, &["status"]).unwrap();
    assert!(
        !ok && text.contains("permission denied: uid 65534 is not root nor in group nogroup"),
        "{text}"
    );
}

/// The packaged unit's capabilities (CapabilityBoundingSet), when the
/// test runs as root and `setpriv` is there: a wrapper for
/// [`Run::start_under`].
fn units_capabilities(caps: &str) -> Option<String> {
    if !rustix::process::getuid().is_root()
        || Command::new("setpriv").arg("--help").output().is_err()
    {
        eprintln!("skipped: needs root and setpriv");
        return None;
    }
    Some(format!(
        "setpriv --bounding-set=-all,{caps} --inh-caps=-all --"
    ))
}

/// With `--control-socket-group-if-exists` (the packaged unit's, for the
/// group `sluice`): a group that exists gets the socket, 0660, with only
/// the unit's capabilities, and its members get in; without CAP_CHOWN
/// (root is not in the group) the start stops and says why; a group that
/// does not exist leaves the socket 0600, and the log says so.
#[test]
fn the_optional_control_socket_group_is_used_when_it_exists() {
    let has_nogroup = std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("nogroup:x:65534:"));
    if !has_nogroup {
        eprintln!("skipped: no group nogroup (65534)");
        return;
    }
    let Some(unit) = units_capabilities("+net_admin,+net_raw,+chown") else {
        return;
    };
    let dir = tempdir("ctl-optional-group");
    let run = Run::start_under(
        &dir,
        &unit,
        &["--control-socket-group-if-exists", "nogroup"],
    );
    let meta = std::fs::metadata(&run.sock).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o660, 65534));
    let (ok, text) = as_nobody(&run.sock, 65534, &["status"]).unwrap();
    assert!(ok && text.contains("web"), "{text}");
    drop(run);

    let dir = tempdir("ctl-optional-group-nochown");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, one_backend_config("net_null0,no-rx=1", "", "")).unwrap();
    let without_chown = units_capabilities("+net_admin,+net_raw").unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {without_chown} {} run --duration 30 --no-metrics-server --config {} \
             --control-socket {} --control-socket-group-if-exists nogroup",
            sluice_bin(),
            cfg.display(),
            dir.join("ctl.sock").display()
        ))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("cannot give the socket its group") && log.contains("CAP_CHOWN"),
        "{log}"
    );

    let dir = tempdir("ctl-optional-group-absent");
    let run = Run::start(
        &dir,
        &[
            "--control-socket-group-if-exists",
            "sluice-test-no-such-group",
        ],
    );
    let meta = std::fs::metadata(&run.sock).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    let log = std::fs::read_to_string(dir.join("sluice.log")).unwrap();
    assert!(
        log.contains(
            "no group sluice-test-no-such-group on this host: the control socket is for root only"
        ),
        "{log}"
    );
}

/// `services` services of 8 backends and 65,537-slot tables each, the
/// backends' addresses moved by `shift` (a reload then rebuilds every
/// table).
fn many_tables(services: u32, shift: u32) -> String {
    let mut text = one_backend_config("net_null0,no-rx=1", "", "");
    for s in 0..services {
        let backends: Vec<String> = (0..8)
            .map(|b| {
                format!(
                    "{{ address = \"10.{}.{}.{}\", mac = \"02:00:00:00:00:0a\" }}",
                    1 + s / 200,
                    s % 200,
                    1 + b + shift
                )
            })
            .collect();
        text += &format!(
            "[[backend_service]]\nname = \"s{s}\"\nmaglev_table_size = 65537\nbackend = [{}]\n\
             [[forwarding_rule]]\nname = \"r{s}\"\nvip = \"198.18.{}.{}\"\nbackend_service = \"s{s}\"\n",
            backends.join(", "),
            s / 200,
            1 + s % 200
        );
    }
    text
}

/// AP-5: `sluice status` is answered (< 1 s each) while the control
/// thread applies a reload that takes seconds (every table rebuilt).
/// Before: status waited for the control loop, so for the reload's end.
#[test]
fn status_answers_during_a_long_reload() {
    let dir = tempdir("ctl-abuse-long-reload");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, many_tables(300, 0)).unwrap();
    let sock = dir.join("ctl.sock");
    let child = Command::new(sluice_bin())
        .args([
            "run",
            "--duration",
            "300",
            "--no-metrics-server",
            "--config",
        ])
        .arg(&cfg)
        .arg("--control-socket")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = Run {
        child,
        sock: sock.clone(),
    };
    let t0 = Instant::now();
    while !timed(&sock, &["status"], Duration::from_secs(5)).0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "sluice did not start"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What a status costs here when nothing else runs (a few hundred
    // thousand table slots to count on a debug build).
    let t = Instant::now();
    run.answers(&["status"], Duration::from_secs(10));
    let alone = t.elapsed();
    std::fs::write(&cfg, many_tables(300, 10)).unwrap();
    let reload_sock = sock.clone();
    let reload = std::thread::spawn(move || {
        let t0 = Instant::now();
        let out = timed(&reload_sock, &["reload"], Duration::from_secs(120));
        (out, t0.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut during = Vec::new();
    while !reload.is_finished() {
        let t = Instant::now();
        run.answers(&["status"], Duration::from_secs(10));
        if !reload.is_finished() {
            during.push(t.elapsed());
        }
    }
    let ((ok, text), took) = reload.join().unwrap();
    assert!(ok, "{text}");
    // The reload shares the cores with the status renders: each may be
    // slower than alone, none waits for the reload to end.
    assert!(
        during.len() >= 2,
        "reload {took:?}, status alone {alone:?}, during it {during:?}: too few to tell"
    );
    let limit = alone * 3 + Duration::from_secs(1);
    assert!(
        during.iter().all(|d| *d < limit) && *during.iter().max().unwrap() < took / 2,
        "reload {took:?}, status alone {alone:?}, during it {during:?}"
    );
}
