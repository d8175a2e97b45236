//! A shard's entries handed from one process to the next: read out at a
//! planned stop, written back at start, before the first packet. Neither
//! runs on the packet path (the read-out allocates).

use super::{Entry, Full, Shard};
use crate::time::Millis;

impl Shard {
    /// Every entry still live at `now` (expired ones not reclaimed yet are
    /// left out), in slot order.
    pub fn live_entries(&self, now: Millis) -> impl Iterator<Item = &Entry> + '_ {
        self.entries
            .iter()
            .filter(move |e| e.sig != 0 && !e.expired(now))
    }

    /// Writes back an entry another process held, half-open or not as it
    /// was there (its signature is recomputed: this shard's hash seed is
    /// its own). Not counted as an insert: nothing new was tracked.
    /// `Full` when its bucket pair has no room, as for an insert.
    pub fn restore(&mut self, entry: Entry, now: Millis) -> Result<usize, Full> {
        let h = self.hash(&entry.key);
        let inserts = self.counters.inserts;
        let slot = self.upsert(entry, h, now);
        self.counters.inserts = inserts;
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::TrackKey;
    use crate::ids::BackendId;

    fn key(i: u64) -> TrackKey {
        TrackKey {
            src: [0, 0x0a00_0000 + i],
            dst: [0, 0xcb00_710a],
            meta: (2 << 40) | (6 << 32) | (i << 16) | 80,
        }
    }

    #[test]
    fn entries_read_out_of_one_shard_are_found_in_another_with_another_seed() {
        let now = Millis(10_000);
        let mut a = Shard::with_capacity_and_seed(4096, 1);
        for i in 0..3000 {
            let mut e = Entry::new(key(i), BackendId::new(i as u32 % 7, 0), 3, now, 60_000);
            if i % 10 == 0 {
                e = e.half_open();
            }
            a.upsert(e, a.hash(&e.key), now).unwrap();
        }
        // One expired entry is not handed on.
        let old = Entry::new(key(9999), BackendId::new(1, 0), 3, Millis(0), 5_000);
        a.upsert(old, a.hash(&old.key), now).unwrap();
        let out: Vec<Entry> = a.live_entries(now).copied().collect();
        assert_eq!(out.len(), 3000);

        let mut b = Shard::with_capacity_and_seed(4096, 2);
        for e in &out {
            b.restore(*e, now).unwrap();
        }
        assert_eq!(b.len(), 3000);
        assert_eq!(b.counters.inserts, 0, "restores are not inserts");
        for i in 0..3000 {
            let k = key(i);
            let slot = b.lookup(&k, b.hash(&k), now).expect("restored");
            let e = b.entry(slot).unwrap();
            assert_eq!(e.backend, BackendId::new(i as u32 % 7, 0));
            assert_eq!(e.pool_epoch, 3);
            assert_eq!(e.is_half_open(), i % 10 == 0, "key {i}");
        }
        assert!(b.lookup(&key(9999), b.hash(&key(9999)), now).is_none());
    }

    #[test]
    fn restoring_twice_keeps_one_entry() {
        let now = Millis(1);
        let mut b = Shard::with_capacity_and_seed(64, 5);
        let e = Entry::new(key(1), BackendId::new(2, 0), 0, now, 1000);
        b.restore(e, now).unwrap();
        b.restore(e, now).unwrap();
        assert_eq!(b.len(), 1);
    }
}
