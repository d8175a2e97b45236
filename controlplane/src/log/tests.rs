use std::io;
use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::SubscriberExt as _;

use super::*;

/// 2026-12-01T22:15:04.512Z
const AT: u64 = 1_796_163_304_512;

fn at() -> u64 {
    AT
}

/// What a subscriber of `format` under `filter` writes while `emit` runs.
fn written(filter: &str, format: LineFormat, emit: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let out = buffer.clone();
    let lines = tracing_subscriber::fmt::layer()
        .event_format(format)
        .with_writer(move || out.clone());
    let subscriber = tracing_subscriber::registry()
        .with(EnvFilter::new(filter))
        .with(lines);
    tracing::subscriber::with_default(subscriber, emit);
    let bytes = buffer.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn journal_lines_carry_the_priority_on_every_line() {
    assert_eq!(
        render(
            Level::ERROR,
            "reload failed:\na.toml:3:1: bad",
            Sink::Journal
        ),
        "<3>reload failed:\n<3>a.toml:3:1: bad\n"
    );
    assert_eq!(render(Level::WARN, "w", Sink::Journal), "<4>w\n");
    assert_eq!(render(Level::TRACE, "t", Sink::Journal), "<7>t\n");
}

#[test]
fn plain_lines_carry_time_and_level_on_every_line() {
    let at = Sink::Plain { unix_ms: AT };
    assert_eq!(
        render(Level::INFO, "sluice: up\n", at),
        "2026-12-01T22:15:04.512Z INFO sluice: up\n"
    );
    assert_eq!(
        render(Level::WARN, "a\nb", at),
        "2026-12-01T22:15:04.512Z WARN a\n2026-12-01T22:15:04.512Z WARN b\n"
    );
}

/// The subscriber's lines: time, level name, message, then the fields.
#[test]
fn events_are_formatted_as_plain_lines() {
    let out = written("info", LineFormat::plain(at), || {
        crate::warn!(
            backend = %"127.0.0.1:80",
            reason = "http_status",
            note = "two words",
            "sluice: health: backend {} is unhealthy",
            "127.0.0.1:80"
        );
        crate::info!("sluice: up");
        crate::error!("sluice: a.toml:\nline 3: bad");
    });
    assert_eq!(
        out,
        "2026-12-01T22:15:04.512Z WARN sluice: health: backend 127.0.0.1:80 is unhealthy \
         backend=127.0.0.1:80 reason=http_status note=\"two words\"\n\
         2026-12-01T22:15:04.512Z INFO sluice: up\n\
         2026-12-01T22:15:04.512Z ERROR sluice: a.toml:\n\
         2026-12-01T22:15:04.512Z ERROR line 3: bad\n"
    );
}

/// journald's lines: the priority on each line of a multi-line message,
/// no time, no level name.
#[test]
fn events_are_formatted_as_journal_lines() {
    let out = written("trace", LineFormat::journal(), || {
        crate::error!("sluice: reload failed:\na.toml:3:1: bad");
        crate::warn!("sluice: w");
        crate::info!("sluice: i");
        crate::debug!("sluice: d");
        crate::trace!("sluice: t");
    });
    assert_eq!(
        out,
        "<3>sluice: reload failed:\n<3>a.toml:3:1: bad\n<4>sluice: w\n<6>sluice: i\n\
         <7>sluice: d\n<7>sluice: t\n"
    );
}

#[test]
fn the_filter_drops_events_below_its_level() {
    let emit = || {
        crate::warn!("sluice: w");
        crate::info!("sluice: i");
        crate::debug!("sluice: d");
    };
    let levels = |filter: &str| -> Vec<String> {
        written(filter, LineFormat::plain(at), emit)
            .lines()
            .map(|l| l.split(' ').nth(1).unwrap().to_string())
            .collect()
    };
    assert_eq!(levels("info"), ["WARN", "INFO"]);
    assert_eq!(levels("warn"), ["WARN"]);
    assert_eq!(levels("debug"), ["WARN", "INFO", "DEBUG"]);
    assert_eq!(levels("controlplane::log=debug"), ["WARN", "INFO", "DEBUG"]);
    assert_eq!(levels("controlplane::health=debug,warn"), ["WARN"]);
}

#[test]
fn the_filter_comes_from_sluice_log_then_rust_log() {
    let text = |f: EnvFilter| f.to_string();
    assert_eq!(text(filter(None, None).0), "info");
    assert_eq!(text(filter(Some("debug"), Some("warn")).0), "debug");
    assert_eq!(text(filter(None, Some("warn")).0), "warn");
    assert_eq!(text(filter(Some(" "), Some("warn")).0), "warn");
    let (f, complaint) = filter(Some("dpdk=loud"), None);
    assert_eq!(text(f), "info");
    let complaint = complaint.unwrap();
    assert!(
        complaint.starts_with("sluice: SLUICE_LOG=\"dpdk=loud\" is not a log filter"),
        "{complaint}"
    );
}

/// DPDK's messages are events of target `dpdk` at their mapped level:
/// the filter can silence them apart from sluice's own.
#[test]
fn dpdk_messages_are_events_at_their_level() {
    use dataplane::dpdk::DpdkLogLevel;
    let emit = || {
        dpdk(
            DpdkLogLevel::Error,
            "EAL: Cannot get hugepage information.\n",
        );
        dpdk(DpdkLogLevel::Debug, "EAL: a detail\n");
        dpdk(DpdkLogLevel::Info, "\n");
        crate::info!("sluice: up");
    };
    assert_eq!(
        written("info", LineFormat::plain(at), emit),
        "2026-12-01T22:15:04.512Z ERROR sluice: DPDK: EAL: Cannot get hugepage information.\n\
         2026-12-01T22:15:04.512Z INFO sluice: up\n"
    );
    assert_eq!(
        written("debug,dpdk=off", LineFormat::plain(at), emit),
        "2026-12-01T22:15:04.512Z INFO sluice: up\n"
    );
    assert!(written("dpdk=debug", LineFormat::plain(at), emit)
        .contains(" DEBUG sluice: DPDK: EAL: a detail\n"));
}

#[test]
fn harmless_dpdk_tap_and_telemetry_reports_are_information() {
    use dataplane::dpdk::DpdkLogLevel;
    assert_eq!(
        dpdk_level(
            DpdkLogLevel::Error,
            "eth_dev_tap_create(): sl-up: failed to create multiq qdisc."
        ),
        Level::INFO
    );
    assert_eq!(
        dpdk_level(DpdkLogLevel::Error, "EAL: Cannot get hugepage information."),
        Level::ERROR
    );
    assert_eq!(
        dpdk_level(DpdkLogLevel::Warning, "EAL: No free 2048 kB hugepages"),
        Level::WARN
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
