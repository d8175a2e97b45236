//! Where the hand-off file lives, and its writing and taking: written
//! whole under a temporary name and renamed (a crash mid-write leaves no
//! file the next start would take), taken once (removed as soon as it is
//! read, refused or not).

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_core::handoff::{HandOff, BACKEND_LEN, CONNECTION_LEN};

/// The file's name in the runtime directory.
pub const FILE_NAME: &str = "conntrack.handoff";

/// A file older than this is refused: a restart takes seconds, and a
/// client that waited minutes has given up on most of its connections.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// How far in the future a file's time may be (the wall clock stepped
/// back between the stop and the start) and still be taken, as written
/// now.
const CLOCK_SLACK: Duration = Duration::from_secs(60);

/// `conntrack.handoff` in systemd's `RUNTIME_DIRECTORY` (the first one
/// when it lists several), else in `/run/sluice`.
pub fn default_path() -> PathBuf {
    default_path_in(std::env::var_os("RUNTIME_DIRECTORY"))
}

/// [`default_path`] for this value of `RUNTIME_DIRECTORY`.
fn default_path_in(runtime_directory: Option<std::ffi::OsString>) -> PathBuf {
    let dir = runtime_directory
        .and_then(|d| {
            let first = d.to_string_lossy().split(':').next()?.to_string();
            (!first.is_empty()).then(|| PathBuf::from(first))
        })
        .unwrap_or_else(|| PathBuf::from("/run/sluice"));
    dir.join(FILE_NAME)
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The largest file a start reads for `connections` entries at most: a
/// file claiming more is refused before it is read.
pub fn size_limit(connections: u64) -> u64 {
    let backends = 1 << 20;
    (connections.saturating_mul(CONNECTION_LEN as u64))
        .saturating_add(backends * BACKEND_LEN as u64)
        .saturating_add(16 << 20)
}

/// What a start found at the hand-off path.
#[derive(Debug)]
pub enum Taken {
    /// No file: a first start, an unplanned exit before, or hand-off off.
    Nothing,
    /// A file it will not use, and why (it is removed).
    Refused(String),
    /// The file, `gap_ms` after it was written.
    File { handoff: HandOff, gap_ms: u64 },
}

/// Reads and removes the file at `path`, for a sluice running the
/// configuration file `config` at wall-clock `now_unix_ms`, reading at
/// most `limit` bytes.
pub fn take(path: &Path, config: &str, now_unix_ms: u64, limit: u64) -> Taken {
    let size = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Taken::Nothing,
        Err(e) => return Taken::Refused(format!("cannot read it: {e}")),
    };
    let read = if size > limit {
        Err(format!(
            "{size} bytes, more than this configuration's conntrack can hold ({limit})"
        ))
    } else {
        std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))
    };
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Taken::Refused(format!("cannot remove it ({e}), so it is not taken"));
        }
    }
    let bytes = match read {
        Ok(b) => b,
        Err(why) => return Taken::Refused(why),
    };
    let handoff = match HandOff::decode(&bytes) {
        Ok(h) => h,
        Err(e) => return Taken::Refused(e.to_string()),
    };
    if handoff.config != config {
        return Taken::Refused(format!(
            "written by a sluice running {}, not {config}",
            handoff.config
        ));
    }
    let gap_ms = match now_unix_ms.checked_sub(handoff.written_unix_ms) {
        Some(gap) if gap > MAX_AGE.as_millis() as u64 => {
            return Taken::Refused(format!(
                "written {} s ago, more than {} s",
                gap / 1000,
                MAX_AGE.as_secs()
            ))
        }
        Some(gap) => gap,
        None if handoff.written_unix_ms - now_unix_ms <= CLOCK_SLACK.as_millis() as u64 => 0,
        None => {
            return Taken::Refused(format!(
                "written {} s in the future (the wall clock stepped back)",
                (handoff.written_unix_ms - now_unix_ms) / 1000
            ))
        }
    };
    Taken::File { handoff, gap_ms }
}

/// Writes `handoff` to `path` (mode 0600, its directory made 0700 when
/// missing): under a temporary name, synced, then renamed. Returns the
/// bytes written.
pub fn write(path: &Path, handoff: &HandOff) -> std::io::Result<usize> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let tmp = path.with_extension("handoff-partial");
    let bytes = handoff.encode();
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "sluice-handoff-store-{}-{}",
            std::process::id(),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn handoff(at: u64) -> HandOff {
        HandOff {
            written_unix_ms: at,
            writer: "test".into(),
            config: "/etc/sluice/sluice.toml".into(),
            ..HandOff::default()
        }
    }

    #[test]
    fn a_file_is_taken_once() {
        let d = dir();
        let p = d.join("sub").join(FILE_NAME);
        write(&p, &handoff(1_000)).unwrap();
        match take(&p, "/etc/sluice/sluice.toml", 3_500, 1 << 20) {
            Taken::File { handoff, gap_ms } => {
                assert_eq!(gap_ms, 2_500);
                assert_eq!(handoff.writer, "test");
            }
            other => panic!("{other:?}"),
        }
        assert!(!p.exists());
        assert!(matches!(
            take(&p, "/etc/sluice/sluice.toml", 3_500, 1 << 20),
            Taken::Nothing
        ));
        let _ = std::fs::remove_dir_all(d);
    }

    /// Each refusal says why, and removes the file.
    #[test]
    fn refusals_name_their_reason_and_remove_the_file() {
        let d = dir();
        let p = d.join(FILE_NAME);
        let now = 10_000_000;
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (
                b"garbage".to_vec(),
                "/etc/sluice/sluice.toml",
                "not a sluice hand-off",
            ),
            (
                handoff(now - 600_000).encode(),
                "/etc/sluice/sluice.toml",
                "written 600 s ago",
            ),
            (
                handoff(now + 3_600_000).encode(),
                "/etc/sluice/sluice.toml",
                "in the future",
            ),
            (
                handoff(now).encode(),
                "/tmp/other.toml",
                "not /tmp/other.toml",
            ),
            (
                {
                    let mut b = handoff(now).encode();
                    b.pop();
                    b
                },
                "/etc/sluice/sluice.toml",
                "checksum",
            ),
        ];
        for (bytes, config, want) in cases {
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(&p, bytes).unwrap();
            match take(&p, config, now, 1 << 20) {
                Taken::Refused(why) => assert!(why.contains(want), "{why:?} lacks {want:?}"),
                other => panic!("{want}: {other:?}"),
            }
            assert!(!p.exists(), "{want}: file left behind");
        }
        std::fs::write(&p, vec![0u8; 2048]).unwrap();
        match take(&p, "x", now, 1024) {
            Taken::Refused(why) => assert!(why.contains("2048 bytes"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A clock stepped back a little: taken as written now.
        write(&p, &handoff(now + 30_000)).unwrap();
        assert!(matches!(
            take(&p, "/etc/sluice/sluice.toml", now, 1 << 20),
            Taken::File { gap_ms: 0, .. }
        ));
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn the_default_path_follows_systemds_runtime_directory() {
        let at = |v: Option<&str>| default_path_in(v.map(Into::into));
        assert_eq!(at(None), Path::new("/run/sluice/conntrack.handoff"));
        assert_eq!(at(Some("")), Path::new("/run/sluice/conntrack.handoff"));
        assert_eq!(
            at(Some("/run/sluice:/run/other")),
            Path::new("/run/sluice/conntrack.handoff")
        );
        assert_eq!(
            at(Some("/run/lb2")),
            Path::new("/run/lb2/conntrack.handoff")
        );
    }
}
