//! The dataplane's coarse time.

/// Milliseconds since the process's clock origin. One clock read per
/// burst (CT-5): conntrack ages, draining deadlines and the ICMP reply
/// budget all count in it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Millis(pub u64);

impl Millis {
    /// `ms` milliseconds later (the clock's end, should it be reached).
    #[inline(always)]
    pub fn after(self, ms: u32) -> Millis {
        Millis(self.0.saturating_add(u64::from(ms)))
    }
}
