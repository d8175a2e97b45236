//! The stable names of what a snapshot holds: backends ([`BackendId`]) and
//! services ([`ServiceId`]). A conntrack entry, a forwarding rule and the
//! per-backend counters hold these, never a reference into a snapshot, so
//! each survives the snapshot it was made under (CT-7, CT-10).

/// A backend's stable identity, assigned by the control plane: an index
/// (low `BackendId::INDEX_BITS` bits) into the snapshot's backend table
/// and the per-backend counters, and a generation (high bits) that changes
/// each time the index is given to another backend. An entry that recorded
/// an earlier generation of the index matches no backend any more (the
/// snapshot's lookup compares the whole id), so a reused index never
/// inherits connections. The control plane reuses an index only after
/// every snapshot naming its previous backend is gone, and lets a
/// generation come round again only after every conntrack entry that could
/// hold it has expired (`controlplane::publish::BackendIds`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BackendId(pub u32);

impl BackendId {
    /// Bits of the index: at most 2²⁰ = 1,048,576 backends at once
    /// (configured, draining and waiting for reuse together).
    pub(crate) const INDEX_BITS: u32 = 20;
    /// Number of distinct indexes.
    pub const INDEXES: usize = 1 << Self::INDEX_BITS;
    /// Number of generations of one index (2¹²) before it wraps.
    pub const GENERATIONS: u32 = 1 << (32 - Self::INDEX_BITS);

    /// The id of `index` (< [`Self::INDEXES`]) at `generation`
    /// (< [`Self::GENERATIONS`]; higher bits are dropped).
    #[inline]
    pub const fn new(index: u32, generation: u32) -> Self {
        Self((generation << Self::INDEX_BITS) | (index & (Self::INDEXES as u32 - 1)))
    }

    /// Position in the snapshot's backend table and in per-backend
    /// counters.
    #[inline(always)]
    pub const fn index(self) -> usize {
        (self.0 & (Self::INDEXES as u32 - 1)) as usize
    }

    #[inline]
    pub const fn generation(self) -> u32 {
        self.0 >> Self::INDEX_BITS
    }
}

/// Index of a service in the snapshot's service table.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ServiceId(pub u16);

impl ServiceId {
    /// Most services a snapshot holds: ids are 16 bits, `u16::MAX` unused.
    pub const MAX_SERVICES: usize = u16::MAX as usize;

    /// The id of the service at `index` in the configuration; None beyond
    /// [`Self::MAX_SERVICES`] (never truncated: a truncated id would send
    /// one service's traffic to another).
    pub fn from_index(index: usize) -> Option<Self> {
        u16::try_from(index)
            .ok()
            .filter(|&i| usize::from(i) < Self::MAX_SERVICES)
            .map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service index past the id space gets no id, where
    /// `index as u16` gave service 65,536 the id of service 0.
    #[test]
    fn service_ids_are_never_truncated() {
        assert_eq!(ServiceId::from_index(0), Some(ServiceId(0)));
        assert_eq!(ServiceId::from_index(65_534), Some(ServiceId(65_534)));
        assert_eq!(ServiceId::from_index(65_535), None);
        assert_eq!(ServiceId::from_index(65_536), None);
        assert_eq!(ServiceId::from_index(usize::MAX), None);
    }

    /// An id is an index and a generation.
    #[test]
    fn backend_ids_are_an_index_and_a_generation() {
        let id = BackendId::new(70_000, 3);
        assert_eq!((id.index(), id.generation()), (70_000, 3));
        assert_eq!(BackendId(5), BackendId::new(5, 0));
        let max = BackendId::new(BackendId::INDEXES as u32 - 1, BackendId::GENERATIONS - 1);
        assert_eq!(max.0, u32::MAX);
    }
}
