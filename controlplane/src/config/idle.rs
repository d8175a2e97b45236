//! `[dataplane] idle` and `idle_sleep_max_us`: how workers poll when no
//! packets arrive — busy (the default: a core per worker) or adaptive
//! (back off and sleep, for cores shared with other programs).

use super::context::Ctx;
use std::time::Duration;

use super::raw::RawDataplane;
use super::values;
use dataplane::worker::IdlePolling;

/// The longest sleep `idle_sleep_max_us` allows: 10 ms. A worker waking
/// after that finds at most 10 ms of arrivals in its RX ring, which 1024
/// descriptors hold only below ~100 kpps.
pub(crate) const SLEEP_MAX_US: (i64, i64) = (1, 10_000);

/// Default bound on one idle sleep: 1 ms. The first packet after a quiet
/// spell waits at most this plus the kernel's timer slack (50 µs by
/// default) and wake-up; 1024 RX descriptors hold 1 ms of arrivals up to
/// ~1 Mpps; an idle worker wakes ~1,000 times a second (~3 % of a core in
/// `docs/performance.md`'s measurement, against ~10 % at 100 µs).
pub(crate) const DEFAULT_SLEEP_MAX_US: u32 = 1000;

pub(crate) fn idle_polling(cx: &mut Ctx<'_>, d: &RawDataplane) -> IdlePolling {
    let adaptive = match &d.idle {
        None => false,
        Some(v) => cx
            .parse(v, "dataplane.idle", |s| {
                values::choice(s, &[("busy", false), ("adaptive", true)]).map_err(|(m, h)| {
                    (
                        m,
                        format!(
                            "{h}: \"busy\" polls without pause (a dedicated core per \
                             worker), \"adaptive\" sleeps while no packets arrive (shared cores)"
                        ),
                    )
                })
            })
            .unwrap_or(false),
    };
    let sleep_max_us = match &d.idle_sleep_max_us {
        None => DEFAULT_SLEEP_MAX_US,
        Some(v) => {
            let (lo, hi) = SLEEP_MAX_US;
            values::int_in(*v.get_ref(), lo, hi, "idle_sleep_max_us").unwrap_or_else(|(m, _)| {
                cx.err(
                    v.span(),
                    "dataplane.idle_sleep_max_us",
                    (
                        m,
                        format!(
                            "give the longest idle sleep in microseconds, from {lo} to {hi}:                              the first packet after a quiet spell may wait that long                              (default {DEFAULT_SLEEP_MAX_US})"
                        ),
                    ),
                );
                DEFAULT_SLEEP_MAX_US
            })
        }
    };
    match (&d.idle_sleep_max_us, adaptive) {
        (Some(v), false) => {
            cx.err(
                v.span(),
                "dataplane.idle_sleep_max_us",
                (
                    "idle_sleep_max_us is set but workers busy-poll (idle is \"busy\"), so they \
                     never sleep"
                        .into(),
                    "set idle = \"adaptive\" in [dataplane] to let idle workers sleep, or remove \
                     idle_sleep_max_us"
                        .into(),
                ),
            );
            IdlePolling::Busy
        }
        (_, true) => IdlePolling::Adaptive {
            sleep_max: Duration::from_micros(u64::from(sleep_max_us)),
        },
        (None, false) => IdlePolling::Busy,
    }
}
