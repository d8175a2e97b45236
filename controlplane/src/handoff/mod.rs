//! Conntrack hand-off between a sluice that stops and the one that
//! starts after it (a restart, an upgrade): what goes into the file
//! (`sluice_core::handoff`, its format) at a stop and what a start makes
//! of it ([`place`]), and where it is kept ([`store`]).

pub mod place;
pub mod store;

/// What the start did with the hand-off file, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartReport {
    /// No file (a first start, an unplanned exit before, hand-off off).
    #[default]
    Nothing,
    /// A file was there and refused.
    Refused,
    /// A file was taken: its connections by outcome, and the time
    /// between its writing and this start.
    Taken {
        taken: u64,
        dropped: place::Dropped,
        gap_ms: u64,
    },
}
