//! Room for a key in a full bucket pair, bounded: the home slot when its
//! entry expired, else an expired or the oldest half-open entry among at
//! most [`EVICTION_PROBES`] read, else one of at most
//! [`RELOCATION_PROBES`] residents moved to its other bucket (the cuckoo
//! step). A SYN flood fills tables with half-open entries; this is what
//! lets a new key in anyway, reading a bounded number of lines.

use super::{Shard, EVICTION_PROBES, HALF_OPEN, RELOCATION_PROBES, SLOTS};
use crate::time::Millis;

impl Shard {
    /// A full bucket pair's way to a free slot, bounded: the home slot if
    /// its entry expired (the line is in cache: the lookup read it), a
    /// half-open entry, a relocation. The slot returned is free.
    pub(super) fn reclaim(
        &mut self,
        home: usize,
        b1: usize,
        b2: usize,
        sig: u32,
        now: Millis,
    ) -> Option<usize> {
        if self.entries.get(home).is_some_and(|e| e.expired(now)) {
            self.free(home);
            self.counters.expirations += 1;
            return Some(home);
        }
        if let Some((slot, expired)) = self.evictable(b1, b2, sig, now) {
            self.free(slot);
            if expired {
                self.counters.expirations += 1;
            } else {
                self.counters.half_open_evicted += 1;
            }
            return Some(slot);
        }
        // Where a bucket's probes start: from the key's signature, so keys
        // sharing a bucket try different residents.
        let start = (sig >> 5) as usize;
        // Every probed resident's other signature line is requested
        // first, so that their misses overlap instead of queueing.
        for b in [b1, b2] {
            self.prefetch_relocation_targets(b, start);
        }
        self.relocate_from(b1, start)
            .or_else(|| self.relocate_from(b2, start))
    }

    fn prefetch_relocation_targets(&self, b: usize, start: usize) {
        let Some(sigs) = self.sigs.get(b) else {
            return;
        };
        for k in 0..RELOCATION_PROBES / 2 {
            let stored = sigs.0[(start + k) % SLOTS];
            if let Some(alt) = self.sigs.get(self.other_bucket(b, stored & !HALF_OPEN)) {
                sluice_platform::prefetch_read(alt);
            }
        }
    }

    /// A slot of the full buckets `b1` and `b2` to take, from at most
    /// [`EVICTION_PROBES`] entries read (starting at a position drawn from
    /// `sig`): the first expired one, else the oldest half-open one, with
    /// whether it expired. When the signature lines show half-open
    /// entries only those are read; when there are none, other entries
    /// are read for expiry alone.
    fn evictable(&self, b1: usize, b2: usize, sig: u32, now: Millis) -> Option<(usize, bool)> {
        let m1 = u64::from(self.sigs.get(b1)?.half_open());
        let m2 = if b2 == b1 {
            0
        } else {
            u64::from(self.sigs.get(b2)?.half_open())
        };
        // One 32-slot ring over both buckets, rotated to a random start.
        let at = |i: u32| {
            if i < 16 {
                b1 * SLOTS + i as usize
            } else {
                b2 * SLOTS + (i - 16) as usize
            }
        };
        let mut both = m1 | (m2 << 16);
        let half_open = both != 0;
        if !half_open {
            both = if b2 == b1 { 0xffff } else { 0xffff_ffff };
        }
        let r = (sig >> 7) % 32;
        let mut m = ((both >> r) | (both << (32 - r))) & 0xffff_ffff;
        // The probed slots, their lines requested together (overlapping
        // misses), then read.
        let mut probes = [0usize; EVICTION_PROBES];
        let mut n = 0;
        for p in probes.iter_mut() {
            if m == 0 {
                break;
            }
            *p = at((m.trailing_zeros() + r) % 32);
            m &= m - 1;
            n += 1;
            if let Some(e) = self.entries.get(*p) {
                sluice_platform::prefetch_read(e);
            }
        }
        let mut best: Option<(usize, Millis)> = None;
        for &slot in probes.iter().take(n) {
            #[cfg(test)]
            self.probed.set(self.probed.get() + 1);
            let e = self.entries.get(slot)?;
            if e.expired(now) {
                return Some((slot, true));
            }
            if half_open && best.is_none_or(|(_, seen)| e.last_seen() < seen) {
                best = Some((slot, e.last_seen()));
            }
        }
        best.map(|(slot, _)| (slot, false))
    }

    /// Frees a slot of the full bucket `b` by moving one of at most half
    /// of [`RELOCATION_PROBES`] residents (from slot `start`, wrapping) to
    /// an empty slot of its other bucket; returns the freed slot.
    fn relocate_from(&mut self, b: usize, start: usize) -> Option<usize> {
        let sigs = self.sigs.get(b)?.0;
        for k in 0..RELOCATION_PROBES / 2 {
            let i = (start + k) % SLOTS;
            let stored = *sigs.get(i)?;
            let alt = self.other_bucket(b, stored & !HALF_OPEN);
            if alt == b {
                continue;
            }
            #[cfg(test)]
            self.probed.set(self.probed.get() + 1);
            let Some(to) = self.empty_slot(alt) else {
                continue;
            };
            let from = b * SLOTS + i;
            let e = *self.entries.get(from)?;
            *self.entries.get_mut(to)? = e;
            *self.sigs.get_mut(alt)?.0.get_mut(to % SLOTS)? = stored;
            *self.sigs.get_mut(b)?.0.get_mut(i)? = 0;
            self.entries.get_mut(from)?.sig = 0;
            return Some(from);
        }
        None
    }
}
