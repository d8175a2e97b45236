//! The dataplane's coarse time.

/// Milliseconds since the process's clock origin. One clock read per
/// burst (CT-5): conntrack ages, draining deadlines and the ICMP reply
/// budget all count in it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Millis(pub u64);
