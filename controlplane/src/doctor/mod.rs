//! `sluice doctor`: every path a client's packets take, checked against
//! the running appliance, with what is wrong and the fix. For each
//! service, backend and VIP (the VIPs its rules give the service, at the
//! health check's port, else the rule's first port):
//!
//! - **next hop**: the backend's next hop is resolved on its egress port;
//! - **direct**: the backend answers from the appliance's own address
//!   (what a `path = "direct"` check sees, HC-8);
//! - **to VIP**: a connection to the VIP, sent as a client's packets are
//!   (encapsulated by the service's own encapsulation through the data
//!   port: the data-path probe of HC-9), comes up — the VIP is accepted,
//!   answered from the VIP, and the answer returns to the appliance;
//! - **to backend**: when the VIP is not answered, the same through the
//!   tunnel to the backend's own address tells a tunnel the backend drops
//!   from a VIP it does not hold, and an ICMP error about the tunnel
//!   (`refusals`) a backend without a decapsulation device;
//! - **full size**: on the VIP's connection, full-size segments through
//!   the encapsulation are acknowledged (MTU headroom).
//!
//! The report ([`Report`]) is JSON on the control socket; the command
//! renders it ([`render`]) and exits by its verdict
//! ([`Report::exit_status`]). Rows are checked in parallel, each check
//! with a deadline, and at most [`MAX_ROWS`] of them: a request is
//! bounded however large the configuration.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod diagnosis;
mod plan;
mod probe;
mod refusals;
pub mod render;

pub use diagnosis::Problem;

use crate::config::Config;
use crate::health::data_socket::DataPathContext;

/// The most rows one report checks; the rest are counted as unchecked.
pub const MAX_ROWS: usize = 512;

/// Rows checked at once.
const PARALLEL_ROWS: usize = 32;

/// How long a connection or an answer is waited for.
const ANSWER_WAIT: Duration = Duration::from_millis(1500);

/// How long full-size segments have to be acknowledged.
const FULL_SIZE_WAIT: Duration = Duration::from_millis(3500);

/// `sluice doctor`'s default `--timeout`: a report of [`MAX_ROWS`] rows
/// in the worst case, and a margin.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

/// What one check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub outcome: Outcome,
    /// Why a failed check failed, one stable word (`no_answer`,
    /// `refused`, `lost`, …: the health checks' reasons where they
    /// apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What was seen, for the operator (an address, a reason, a size).
    pub detail: String,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    /// Not run: not applicable, or not needed for the diagnosis.
    Skipped,
}

impl Check {
    fn pass(detail: impl Into<String>) -> Self {
        Check {
            outcome: Outcome::Pass,
            reason: None,
            detail: detail.into(),
        }
    }
    fn fail(reason: &str, detail: impl Into<String>) -> Self {
        Check {
            outcome: Outcome::Fail,
            reason: Some(reason.to_string()),
            detail: detail.into(),
        }
    }
    fn skipped(detail: impl Into<String>) -> Self {
        Check {
            outcome: Outcome::Skipped,
            reason: None,
            detail: detail.into(),
        }
    }
    /// Why it failed; None when it did not.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }
}

/// One backend through one VIP of its service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub service: String,
    /// The service's `encapsulation` as configured (`vxlan`, `l2`, …).
    pub encapsulation: String,
    pub backend: IpAddr,
    pub vip: IpAddr,
    /// `tcp` or `udp`.
    pub protocol: String,
    pub port: u16,
    pub next_hop: Check,
    pub direct: Check,
    pub to_vip: Check,
    pub to_backend: Check,
    pub full_size: Check,
    /// What is wrong with the path clients take; None when it works.
    pub problem: Option<Problem>,
    /// What to do about it (or a note when the path works but something
    /// beside it does not).
    pub hint: Option<String>,
}

/// Everything `sluice doctor` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Rows past [`MAX_ROWS`], not checked.
    pub unchecked: usize,
}

impl Report {
    /// The rows whose path fails.
    pub fn failing(&self) -> usize {
        self.rows.iter().filter(|r| r.problem.is_some()).count()
    }

    /// 0 when every path checked works, 1 when one fails (the report
    /// names it). Not being able to ask is the command's 2.
    pub fn exit_status(&self) -> u8 {
        u8::from(self.failing() > 0)
    }
}

/// Checks every path of `cfg` through the running appliance.
pub fn run(cfg: &Config, ctx: &DataPathContext) -> Report {
    let state = ctx.snapshots.load();
    let (targets, unchecked) = plan::targets(cfg, &state, MAX_ROWS);
    drop(state);
    let refusals = refusals::Listener::start();
    let mut rows = Vec::with_capacity(targets.len());
    for chunk in targets.chunks(PARALLEL_ROWS) {
        std::thread::scope(|s| {
            let running: Vec<_> = chunk
                .iter()
                .map(|t| s.spawn(|| (t.clone(), probe::check_row(t, ctx, &refusals))))
                .collect();
            rows.extend(running.into_iter().filter_map(|h| h.join().ok()));
        });
    }
    refusals.stop();
    diagnosis::refine(&mut rows);
    Report {
        rows: rows.into_iter().map(|(_, r)| r).collect(),
        unchecked,
    }
}
