//! What other threads answer from without the control thread (AP-5): the
//! control socket's `status`, `status-json`, `explain` and `doctor` are
//! rendered
//! from the published snapshot and the shared view on the socket's own
//! threads, so they are answered while the control thread is busy (a long
//! reload) and never hold it up.

use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use dataplane::worker::mailbox::ConntrackQuery;
use sluice_core::probe_path::ProbeTable;
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::WorkerStats;

use super::{render_status, status_json, Controller, Shared};
use crate::control_socket::Answers;

/// The published state, for any thread: cheap to clone (reference
/// counts), each method renders afresh.
#[derive(Clone)]
pub struct Readers {
    cell: Arc<SnapshotCell>,
    shared: Arc<Shared>,
    stats: Vec<Arc<CachePadded<WorkerStats>>>,
    path: Option<PathBuf>,
    mailboxes: Arc<Vec<Sender<ConntrackQuery>>>,
    probes: Arc<ProbeTable>,
}

impl Controller {
    /// The state's readers, once the workers' counters and mailboxes are
    /// attached ([`Controller::count_backends_in`],
    /// [`Controller::ask_workers_through`]).
    pub fn readers(&self) -> Readers {
        Readers {
            cell: Arc::clone(&self.cell),
            shared: Arc::clone(&self.shared),
            stats: self.stats.clone(),
            path: self.path.clone(),
            mailboxes: Arc::clone(&self.mailboxes),
            probes: Arc::clone(&self.probes),
        }
    }
}

impl Answers for Readers {
    /// `sluice status`.
    fn status(&self) -> String {
        render_status(&self.cell.load(), &self.shared.view())
    }

    /// `sluice status --json`.
    fn status_json(&self) -> String {
        let config_path = self.path.as_ref().map(|p| p.display().to_string());
        let (snap, view) = (self.cell.load(), self.shared.view());
        let doc = status_json::render(&snap, &view, &self.stats, config_path);
        let mut text = Vec::with_capacity(1 << 16);
        // Serializing in memory fails only on a map with non-string keys,
        // which the document has none of.
        let _ = serde_json::to_writer_pretty(&mut text, &doc);
        text.push(b'\n');
        String::from_utf8(text).unwrap_or_default()
    }

    /// `sluice explain`'s answer (`crate::explain::live`), the conntrack
    /// entries asked of the workers.
    fn explain(&self, args: &str) -> Result<String, String> {
        let view = self.shared.view();
        let cfg = view.config.ok_or("no configuration published yet")?;
        let ask = |frames: &[Vec<u8>]| ask_workers(&self.mailboxes, frames);
        crate::explain::live::answer(&cfg, self.cell.load(), view.reports, args, ask)
    }

    /// `sluice doctor`'s report: every path checked through the data path
    /// the workers run now.
    fn doctor(&self) -> Result<String, String> {
        let cfg = self
            .shared
            .view()
            .config
            .ok_or("no configuration published yet")?;
        let ctx = crate::health::data_socket::DataPathContext {
            probes: Arc::clone(&self.probes),
            snapshots: Arc::clone(&self.cell),
        };
        let report = crate::doctor::run(&cfg, &ctx);
        serde_json::to_string(&report).map_err(|e| e.to_string())
    }
}

/// Asks every worker's mailbox about each frame's flow; per frame, the
/// answers that came within one second for the whole batch (a worker
/// serves its mailbox between bursts, every query waiting at once).
fn ask_workers(
    mailboxes: &[Sender<ConntrackQuery>],
    frames: &[Vec<u8>],
) -> Vec<Vec<(usize, sluice_core::explain::ConntrackAnswer)>> {
    let asked: Vec<_> = frames
        .iter()
        .map(|frame| {
            let (reply, answers) = std::sync::mpsc::channel();
            let asked = mailboxes
                .iter()
                .filter(|m| {
                    let q = ConntrackQuery {
                        frame: frame.clone(),
                        reply: reply.clone(),
                    };
                    m.send(q).is_ok()
                })
                .count();
            (asked, answers)
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    asked
        .into_iter()
        .map(|(asked, answers)| {
            let mut out = Vec::with_capacity(asked);
            while out.len() < asked {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match answers.recv_timeout(left) {
                    Ok(a) => out.push(a),
                    Err(_) => break,
                }
            }
            out
        })
        .collect()
}
