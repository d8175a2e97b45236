//! A Maglev lookup table (MG-1, MG-2): the backend that owns a flow hash's
//! slot. The control plane builds the tables; the packet path only looks
//! up and prefetches.

use crate::ids::BackendId;

/// A complete Maglev lookup table: `slots[slot_index(hash)]` is the owner.
/// Empty when the eligible set is empty (new flows are dropped: EL-4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaglevTable {
    pub slots: Box<[BackendId]>,
}

impl MaglevTable {
    /// The owner of `hash`'s slot.
    ///
    /// The slot is `(low32(hash) × M) >> 32` (Lemire's multiply-shift
    /// reduction) rather than `hash % M`: one multiply instead of a 64-bit
    /// division on every packet, equally uniform for M ≪ 2³², and just as
    /// deterministic across machines (MG-2). The high 32 bits of the hash are
    /// left for other uses (GUE source port).
    // Public for core/tests (pipeline.rs, icmp.rs, conntrack_support).
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<BackendId> {
        self.slots.get(self.slot_index(hash)?).copied()
    }

    /// Index of `hash`'s slot (None for an empty table).
    #[inline]
    pub(crate) fn slot_index(&self, hash: u64) -> Option<usize> {
        let n = self.slots.len() as u64;
        if n == 0 {
            return None;
        }
        Some((((hash & 0xffff_ffff) * n) >> 32) as usize)
    }

    /// Hints the cache that `hash`'s slot is about to be read.
    #[inline(always)]
    pub(crate) fn prefetch(&self, hash: u64) {
        if let Some(slot) = self.slot_index(hash).and_then(|i| self.slots.get(i)) {
            sluice_platform::prefetch_read(slot);
        }
    }
}
