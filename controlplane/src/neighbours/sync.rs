//! Keeping the neighbour table in step with the kernel's: events as they
//! come, a full dump at start, every [`RESYNC`] and after lost events
//! (`ENOBUFS`), rebuilt aside so the table never looks half empty.

use std::time::{Duration, Instant};

use super::kernel::Incoming;
use super::state::{Change, Neighbours};

/// How often the neighbour table is dumped again and every route looked
/// up again, for events the kernel could not deliver.
pub const RESYNC: Duration = Duration::from_secs(30);
/// A dump not finished by then is given up and asked again.
const DUMP_TIMEOUT: Duration = Duration::from_secs(5);

/// A neighbour dump in flight: its sequence number, when it was asked,
/// and the table it rebuilds.
#[derive(Debug)]
struct Dump {
    seq: u32,
    asked: Instant,
    table: Neighbours,
}

/// The neighbour table and the dumps that rebuild it.
#[derive(Debug)]
pub(super) struct TableSync {
    pub neighbours: Neighbours,
    dump: Option<Dump>,
    /// A dump has completed: `neighbours` is the kernel's table.
    pub synced: bool,
    /// A dump is due (at start, after lost events).
    wanted: bool,
    last_dump: Instant,
}

impl TableSync {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            neighbours: Neighbours::default(),
            dump: None,
            synced: false,
            wanted: true,
            last_dump: now,
        }
    }

    /// Applies an event or a dump's entry or end. A dump's end replaces
    /// the table with what the dump (and the events during it) built.
    pub(super) fn apply(&mut self, m: &Incoming) -> Change {
        match m {
            Incoming::Message(m) => {
                if let Some(d) = &mut self.dump {
                    d.table.apply(m);
                }
                self.neighbours.apply(m)
            }
            Incoming::DumpDone { seq } => match self.dump.take_if(|d| d.seq == *seq) {
                Some(d) => {
                    self.neighbours = d.table;
                    self.synced = true;
                    Change::Neighbour
                }
                None => Change::Nothing,
            },
        }
    }

    /// The kernel dropped events (`ENOBUFS`): a dump is due.
    pub(super) fn events_lost(&mut self) {
        self.wanted = true;
    }

    /// Whether to ask for a dump now: one is due, and none is in flight
    /// (one in flight too long is given up).
    pub(super) fn dump_due(&mut self, now: Instant) -> bool {
        if self
            .dump
            .as_ref()
            .is_some_and(|d| now.duration_since(d.asked) >= DUMP_TIMEOUT)
        {
            self.dump = None;
            self.wanted = true;
        }
        let periodic = now.duration_since(self.last_dump) >= RESYNC;
        (self.wanted || periodic) && self.dump.is_none()
    }

    /// A dump was asked with sequence number `seq`.
    pub(super) fn dump_asked(&mut self, seq: u32, now: Instant) {
        self.dump = Some(Dump {
            seq,
            asked: now,
            table: Neighbours::default(),
        });
        self.wanted = false;
        self.last_dump = now;
    }

    /// Time left until the periodic dump.
    pub(super) fn until_resync(&self, now: Instant) -> Duration {
        RESYNC.saturating_sub(now.duration_since(self.last_dump))
    }
}

#[cfg(test)]
mod tests {
    use super::super::kernel::parse;
    use super::super::state::tests::{neigh, nlmsg};
    use super::*;

    fn feed(s: &mut TableSync, datagram: &[u8]) -> Vec<Change> {
        let mut out = Vec::new();
        parse(datagram, &mut out);
        out.iter().map(|m| s.apply(m)).collect()
    }

    fn done(seq: u32) -> Vec<u8> {
        nlmsg(3, seq, &0i32.to_ne_bytes())
    }

    fn has(s: &TableSync, dst: &str) -> bool {
        s.neighbours.get(7, dst.parse().unwrap()).is_some()
    }

    /// A dump replaces the table at its end, with the events that came
    /// during it; until the first dump ends the table is not the kernel's.
    #[test]
    fn a_dump_rebuilds_the_table_aside() {
        let t0 = Instant::now();
        let mut s = TableSync::new(t0);
        assert!(s.dump_due(t0), "at start");
        s.dump_asked(1, t0);
        assert!(!s.dump_due(t0), "one in flight");
        feed(&mut s, &neigh(28, "10.0.0.1", Some([2; 6]), 2));
        assert!(!s.synced);
        feed(&mut s, &done(1));
        assert!(s.synced && has(&s, "10.0.0.1"));

        // Lost events: a dump is due at once; the old table serves
        // meanwhile; an entry the dump does not list is gone at its end.
        s.events_lost();
        assert!(s.dump_due(t0));
        s.dump_asked(2, t0);
        feed(&mut s, &neigh(28, "10.0.0.2", Some([2; 6]), 2));
        assert!(has(&s, "10.0.0.1") && has(&s, "10.0.0.2"));
        assert_eq!(feed(&mut s, &done(9)), [Change::Nothing], "not ours");
        assert_eq!(feed(&mut s, &done(2)), [Change::Neighbour]);
        assert!(!has(&s, "10.0.0.1") && has(&s, "10.0.0.2"));
    }

    #[test]
    fn dumps_are_periodic_and_a_stuck_one_is_asked_again() {
        let t0 = Instant::now();
        let mut s = TableSync::new(t0);
        s.dump_asked(1, t0);
        assert!(!s.dump_due(t0 + DUMP_TIMEOUT / 2));
        assert!(s.dump_due(t0 + DUMP_TIMEOUT), "its end was lost");
        s.dump_asked(2, t0 + DUMP_TIMEOUT);
        feed(&mut s, &done(2));
        let t1 = t0 + DUMP_TIMEOUT;
        assert!(!s.dump_due(t1 + RESYNC / 2));
        assert_eq!(s.until_resync(t1 + RESYNC / 2), RESYNC / 2);
        assert!(s.dump_due(t1 + RESYNC));
    }
}
