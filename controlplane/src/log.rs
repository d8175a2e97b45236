//! Operator log lines on stderr, one line per event, with the journal's
//! priority when stderr is the journal.
//!
//! Under systemd, stderr is a stream to journald and `JOURNAL_STREAM` holds
//! its `device:inode`. journald reads a leading `<N>` on each line as the
//! line's syslog priority (sd-daemon(3)): `<3>` error, `<4>` warning, `<6>`
//! info; `journalctl -p warning` then filters by it. Anywhere else (a
//! terminal, a test capturing stderr, a redirect) lines stay plain. A
//! message of several lines (configuration diagnostics) gets the prefix on
//! each, since journald stores each line as its own entry.
//!
//! Use the macros: `error!`, `warn!`, `info!` (exported at the crate root),
//! with `format!` arguments.

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

/// A syslog priority, as journald reads it from a line's `<N>` prefix.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Priority {
    Error = 3,
    Warning = 4,
    Info = 6,
}

/// Whether stderr is the journal stream named by `JOURNAL_STREAM`
/// (checked once: stderr does not change while sluice runs).
pub fn stderr_is_journal() -> bool {
    static JOURNAL: OnceLock<bool> = OnceLock::new();
    *JOURNAL.get_or_init(|| {
        let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
            return false;
        };
        let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
            return false;
        };
        matches_stream(&stream.to_string_lossy(), stat.st_dev, stat.st_ino)
    })
}

/// `JOURNAL_STREAM`'s `device:inode` (decimal) names this file.
fn matches_stream(stream: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = stream.split_once(':') else {
        return false;
    };
    d.parse() == Ok(dev) && i.parse() == Ok(ino)
}

/// `text` as written to stderr: every line ends in a newline and, for the
/// journal, starts with the priority prefix.
pub fn render(priority: Priority, text: &str, journal: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.lines() {
        if journal {
            out.push_str(&format!("<{}>", priority as u8));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Writes one event to stderr in a single write (lines from several
/// threads do not interleave).
pub fn write(priority: Priority, args: fmt::Arguments<'_>) {
    let text = render(priority, &args.to_string(), stderr_is_journal());
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Logs an error (priority 3).
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Priority::Error, format_args!($($arg)*))
    };
}

/// Logs a warning (priority 4).
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Priority::Warning, format_args!($($arg)*))
    };
}

/// Logs an informational event (priority 6).
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => {
        $crate::log::write($crate::log::Priority::Info, format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_lines_carry_the_priority_on_every_line() {
        assert_eq!(
            render(Priority::Error, "reload failed:\na.toml:3:1: bad", true),
            "<3>reload failed:\n<3>a.toml:3:1: bad\n"
        );
        assert_eq!(render(Priority::Info, "up\n", false), "up\n");
        assert_eq!(render(Priority::Warning, "w", true), "<4>w\n");
    }

    #[test]
    fn journal_stream_names_device_and_inode() {
        assert!(matches_stream("64769:12345", 64769, 12345));
        assert!(!matches_stream("64769:12345", 64769, 12346));
        assert!(!matches_stream("garbage", 1, 2));
    }
}
