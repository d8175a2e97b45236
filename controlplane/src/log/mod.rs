//! Operator log lines on stderr, one line per event: time, level, message.
//!
//! Events are `tracing` events: the crate root re-exports `error!`,
//! `warn!`, `info!`, `debug!` and `trace!` (format arguments, and fields
//! where they help searching, e.g. `backend`, `service`, `reason` on a
//! health transition). [`init`] installs the one subscriber: a level
//! filter from `SLUICE_LOG` (else `RUST_LOG`, else `info`), in `EnvFilter`
//! syntax (`debug`, `warn,controlplane::health=trace`, `dpdk=off`), and
//! [`LineFormat`], which writes each event to stderr in a single write.
//!
//! Anywhere but the journal (a terminal, a test capturing stderr, a
//! redirect) a line reads `2026-12-01T22:15:04.512Z WARN sluice: health:
//! ...`: UTC time to the millisecond, the level (`ERROR`, `WARN`, `INFO`,
//! `DEBUG`, `TRACE`), then the message, which always starts `sluice: ` and
//! names its subject (`health:`, `reload:`, `port "uplink":`, ...), then
//! the event's fields as ` key=value` (`grep 'service=web'`).
//!
//! Under systemd, stderr is a stream to journald and `JOURNAL_STREAM` holds
//! its `device:inode`. journald reads a leading `<N>` on each line as the
//! line's syslog priority (sd-daemon(3)): `<3>` error, `<4>` warning, `<6>`
//! info, `<7>` debug and trace; `journalctl -p warning` then filters by it,
//! and the journal adds its own time stamp, so the line carries neither
//! time nor level name. A message of several lines (configuration
//! diagnostics) gets the prefix on each, since journald stores each line
//! as its own entry.
//!
//! DPDK's own messages (EAL, drivers) arrive through [`dpdk`] as events of
//! target `dpdk` at their mapped level.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// The filter when neither `SLUICE_LOG` nor `RUST_LOG` is set.
pub const DEFAULT_FILTER: &str = "info";

/// A syslog priority, as journald reads it from a line's `<N>` prefix.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Priority {
    Error = 3,
    Warning = 4,
    Info = 6,
    Debug = 7,
}

impl Priority {
    /// A `tracing` level's priority: trace has none below debug.
    pub fn of(level: Level) -> Self {
        if level == Level::ERROR {
            Priority::Error
        } else if level == Level::WARN {
            Priority::Warning
        } else if level == Level::INFO {
            Priority::Info
        } else {
            Priority::Debug
        }
    }
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
pub fn render(level: Level, text: &str, sink: Sink) -> String {
    let prefix = match sink {
        Sink::Journal => format!("<{}>", Priority::of(level) as u8),
        Sink::Plain { unix_ms } => format!("{} {} ", utc_time(unix_ms), level.as_str()),
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

/// Milliseconds since the Unix epoch, now.
fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The `tracing` event format of sluice's log lines (see the module
/// documentation): the message, then the other fields as ` key=value`,
/// rendered by [`render`] for the journal or with the time from `clock`.
#[derive(Copy, Clone, Debug)]
pub struct LineFormat {
    journal: bool,
    clock: fn() -> u64,
}

impl LineFormat {
    /// For stderr: the journal's shape when stderr is its stream.
    pub fn stderr() -> Self {
        Self {
            journal: stderr_is_journal(),
            clock: unix_ms_now,
        }
    }

    /// Lines for the journal (no time).
    pub fn journal() -> Self {
        Self {
            journal: true,
            clock: unix_ms_now,
        }
    }

    /// Plain lines, timed by `clock` (milliseconds since the Unix epoch).
    pub fn plain(clock: fn() -> u64) -> Self {
        Self {
            journal: false,
            clock,
        }
    }
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut text = EventText::default();
        event.record(&mut text);
        let sink = if self.journal {
            Sink::Journal
        } else {
            Sink::Plain {
                unix_ms: (self.clock)(),
            }
        };
        text.message.push_str(&text.fields);
        writer.write_str(&render(*event.metadata().level(), &text.message, sink))
    }
}

/// An event's message and its other fields, ` key=value` each: a string
/// value as it is unless it is empty or holds a space or a quote (then
/// quoted), any other value in its `Debug` form (`%` fields: `Display`).
#[derive(Default)]
struct EventText {
    message: String,
    fields: String,
}

impl Visit for EventText {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '"') {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

/// The level filter: `SLUICE_LOG` when set, else `RUST_LOG`, else
/// [`DEFAULT_FILTER`]. A value that does not parse leaves the default
/// and is returned as a message for the log.
pub fn filter(sluice_log: Option<&str>, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let chosen = [("SLUICE_LOG", sluice_log), ("RUST_LOG", rust_log)]
        .into_iter()
        .find_map(|(var, v)| v.filter(|v| !v.trim().is_empty()).map(|v| (var, v)));
    let default = || EnvFilter::new(DEFAULT_FILTER);
    match chosen {
        None => (default(), None),
        Some((var, value)) => match EnvFilter::builder().parse(value) {
            Ok(f) => (f, None),
            Err(e) => (
                default(),
                Some(format!(
                    "sluice: {var}={value:?} is not a log filter ({e}); logging at \
                     {DEFAULT_FILTER:?}. Write a level (error, warn, info, debug, trace) or \
                     target=level pairs, e.g. {var}=warn,controlplane::health=debug"
                )),
            ),
        },
    }
}

/// Installs the process's subscriber: [`filter`] from the environment,
/// lines of [`LineFormat::stderr`]. Call once, first thing in `main`; a
/// second call leaves the first subscriber.
pub fn init() {
    let var = |name| std::env::var(name).ok();
    let (filter, complaint) = filter(var("SLUICE_LOG").as_deref(), var("RUST_LOG").as_deref());
    let lines = tracing_subscriber::fmt::layer()
        .event_format(LineFormat::stderr())
        .with_writer(std::io::stderr);
    let subscriber = tracing_subscriber::registry().with(filter).with(lines);
    if tracing::subscriber::set_global_default(subscriber).is_ok() {
        if let Some(complaint) = complaint {
            tracing::warn!("{complaint}");
        }
    }
}

/// The level of one of DPDK's own messages (EAL, drivers), which come in
/// through [`dataplane::dpdk::log_to`]. The TAP driver reports at error
/// level that the kernel lacks the multiq qdisc and that it therefore
/// disables rte_flow on the TAP, and telemetry that it opened no legacy
/// socket: sluice uses neither, so those are information.
pub fn dpdk_level(level: dataplane::dpdk::DpdkLogLevel, text: &str) -> Level {
    use dataplane::dpdk::DpdkLogLevel;
    const HARMLESS: [&str; 5] = [
        "tap_nl_dump_ext_ack(): Specified qdisc kind is unknown",
        "qdisc_create_multiq(): Could not add multiq qdisc",
        "failed to create multiq qdisc",
        "Disabling rte flow support",
        "TELEMETRY: No legacy callbacks, legacy socket not created",
    ];
    match level {
        _ if HARMLESS.iter().any(|h| text.contains(h)) => Level::INFO,
        DpdkLogLevel::Error => Level::ERROR,
        DpdkLogLevel::Warning => Level::WARN,
        DpdkLogLevel::Info => Level::INFO,
        DpdkLogLevel::Debug => Level::DEBUG,
    }
}

/// One DPDK log message as one event of target `dpdk` at its
/// [`dpdk_level`]: the sink for [`dataplane::dpdk::log_to`].
pub fn dpdk(level: dataplane::dpdk::DpdkLogLevel, text: &str) {
    let text = text.trim_end();
    if text.is_empty() {
        return;
    }
    let level = dpdk_level(level, text);
    if level == Level::ERROR {
        tracing::error!(target: "dpdk", "sluice: DPDK: {text}");
    } else if level == Level::WARN {
        tracing::warn!(target: "dpdk", "sluice: DPDK: {text}");
    } else if level == Level::INFO {
        tracing::info!(target: "dpdk", "sluice: DPDK: {text}");
    } else {
        tracing::debug!(target: "dpdk", "sluice: DPDK: {text}");
    }
}

#[cfg(test)]
mod tests;
