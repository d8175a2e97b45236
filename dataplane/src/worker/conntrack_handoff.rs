//! A worker's part in the conntrack hand-off between two processes: it
//! restores the entries it was given into its shard before its first
//! packet, and gives its shard's live entries back when it stops. Both
//! happen outside the poll loop (the read-out allocates).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use sluice_core::conntrack::{Entry, Shard};
use sluice_core::time::Millis;

/// What a worker restores at start and where its entries go at its stop.
#[derive(Debug, Default)]
pub struct ConntrackHandoff {
    /// Entries of the previous process, already in this one's ids and
    /// clock (`controlplane::handoff::place`).
    pub restore: Vec<Entry>,
    /// Where the worker sends its live entries when it stops; None:
    /// nothing is handed on.
    pub out: Option<Sender<ShardOut>>,
    /// Whether they are wanted at this stop (a planned one): set by the
    /// main thread before it stops the workers.
    pub wanted: Arc<AtomicBool>,
    /// Where the worker says it restored its entries (None: nobody asks).
    pub restored: Option<Sender<Restored>>,
}

/// A worker's restore, done before its first packet.
#[derive(Debug)]
pub struct Restored {
    pub worker: usize,
    /// Entries written into the shard.
    pub entries: usize,
    /// Entries that found no room (counted as failed inserts).
    pub full: usize,
    pub took: std::time::Duration,
}

/// A stopped worker's live entries.
#[derive(Debug)]
pub struct ShardOut {
    pub worker: usize,
    /// The worker's clock when it read them.
    pub now: Millis,
    pub entries: Vec<Entry>,
}

impl ConntrackHandoff {
    /// Writes the entries to restore into `shard` and says so. One that
    /// finds no room is counted by the shard as a failed insert.
    pub(super) fn restore_into(&mut self, worker: usize, shard: &mut Shard, now: Millis) {
        let started = std::time::Instant::now();
        let entries = std::mem::take(&mut self.restore);
        let full = entries
            .iter()
            .filter(|e| shard.restore(**e, now).is_err())
            .count();
        if let Some(tx) = self.restored.take() {
            let _ = tx.send(Restored {
                worker,
                entries: entries.len() - full,
                full,
                took: started.elapsed(),
            });
        }
    }

    /// Sends `shard`'s live entries where they are wanted.
    pub(super) fn hand_on(&self, worker: usize, shard: &Shard, now: Millis) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        if let Some(out) = &self.out {
            let entries = shard.live_entries(now).copied().collect();
            let _ = out.send(ShardOut {
                worker,
                now,
                entries,
            });
        }
    }
}
