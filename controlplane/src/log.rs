//! Operator log lines on stderr, one line per event: time, level, message.
//!
//! Anywhere but the journal (a terminal, a test capturing stderr, a
//! redirect) a line reads `2026-12-01T22:15:04.512Z WARN sluice: health:
//! ...`: UTC time to the millisecond, the level (`ERROR`, `WARN`, `INFO`),
//! then the message, which always starts `sluice: ` and names its subject
//! (`health:`, `reload:`, `port "uplink":`, ...).
//!
//! Under systemd, stderr is a stream to journald and `JOURNAL_STREAM` holds
//! its `device:inode`. journald reads a leading `<N>` on each line as the
//! line's syslog priority (sd-daemon(3)): `<3>` error, `<4>` warning, `<6>`
//! info; `journalctl -p warning` then filters by it, and the journal adds
//! its own time stamp, so the line carries neither time nor level name. A
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

impl Priority {
    /// The level's name on a line outside the journal.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Error => "ERROR",
            Priority::Warning => "WARN",
            Priority::Info => "INFO",
        }
    }
}

/// Where a line goes and so how it starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sink {
    /// journald: `<N>` priority prefix, no time (the journal stamps it).
    Journal,
    /// Anything else: UTC time (milliseconds since the Unix epoch) and
    /// level name.
    Plain { unix_ms: u64 },
}

/// `text` as written to stderr: every line ends in a newline and starts
/// with the journal's priority prefix or with the time and level.
pub fn render(priority: Priority, text: &str, sink: Sink) -> String {
    let prefix = match sink {
        Sink::Journal => format!("<{}>", priority as u8),
        Sink::Plain { unix_ms } => format!("{} {} ", utc_time(unix_ms), priority.name()),
    };
    let mut out = String::with_capacity(text.len() + prefix.len() + 1);
    for line in text.lines() {
        out.push_str(&prefix);
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// RFC 3339 UTC time to the millisecond: `2026-12-01T22:15:04.512Z`.
pub fn utc_time(unix_ms: u64) -> String {
    let (days, ms) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Writes one event to stderr in a single write (lines from several
/// threads do not interleave).
pub fn write(priority: Priority, args: fmt::Arguments<'_>) {
    let sink = if stderr_is_journal() {
        Sink::Journal
    } else {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Sink::Plain { unix_ms }
    };
    let text = render(priority, &args.to_string(), sink);
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// The priority of one of DPDK's own messages (EAL, drivers), which
/// come in through [`dataplane::dpdk::log_to`]. The TAP driver reports at
/// error level that the kernel lacks the multiq qdisc and that it
/// therefore disables rte_flow on the TAP, and telemetry that it opened no
/// legacy socket: sluice uses neither, so those are information.
pub fn dpdk_priority(level: dataplane::dpdk::DpdkLogLevel, text: &str) -> Priority {
    use dataplane::dpdk::DpdkLogLevel;
    const HARMLESS: [&str; 5] = [
        "tap_nl_dump_ext_ack(): Specified qdisc kind is unknown",
        "qdisc_create_multiq(): Could not add multiq qdisc",
        "failed to create multiq qdisc",
        "Disabling rte flow support",
        "TELEMETRY: No legacy callbacks, legacy socket not created",
    ];
    match level {
        _ if HARMLESS.iter().any(|h| text.contains(h)) => Priority::Info,
        DpdkLogLevel::Error => Priority::Error,
        DpdkLogLevel::Warning => Priority::Warning,
        DpdkLogLevel::Info => Priority::Info,
    }
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
            render(
                Priority::Error,
                "reload failed:\na.toml:3:1: bad",
                Sink::Journal
            ),
            "<3>reload failed:\n<3>a.toml:3:1: bad\n"
        );
        assert_eq!(render(Priority::Warning, "w", Sink::Journal), "<4>w\n");
    }

    #[test]
    fn plain_lines_carry_time_and_level_on_every_line() {
        let at = Sink::Plain {
            unix_ms: 1_796_163_304_512,
        };
        assert_eq!(
            render(Priority::Info, "sluice: up\n", at),
            "2026-12-01T22:15:04.512Z INFO sluice: up\n"
        );
        assert_eq!(
            render(Priority::Warning, "a\nb", at),
            "2026-12-01T22:15:04.512Z WARN a\n2026-12-01T22:15:04.512Z WARN b\n"
        );
    }

    #[test]
    fn harmless_dpdk_tap_and_telemetry_reports_are_information() {
        use dataplane::dpdk::DpdkLogLevel;
        assert_eq!(
            dpdk_priority(
                DpdkLogLevel::Error,
                "eth_dev_tap_create(): sl-up: failed to create multiq qdisc."
            ),
            Priority::Info
        );
        assert_eq!(
            dpdk_priority(DpdkLogLevel::Error, "EAL: Cannot get hugepage information."),
            Priority::Error
        );
        assert_eq!(
            dpdk_priority(DpdkLogLevel::Warning, "EAL: No free 2048 kB hugepages"),
            Priority::Warning
        );
    }

    #[test]
    fn utc_time_of_known_instants() {
        assert_eq!(utc_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_time(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn journal_stream_names_device_and_inode() {
        assert!(matches_stream("64769:12345", 64769, 12345));
        assert!(!matches_stream("64769:12345", 64769, 12346));
        assert!(!matches_stream("garbage", 1, 2));
    }
}
