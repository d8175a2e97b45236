//! How the families that grow with the configuration are written: each
//! section writes one family row by row from a [`Cursor`], so a scrape can
//! stop after any row and go on later. A family's header is written with
//! its first row ([`Rows`]): a family without rows is left out.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;

use super::text::{self, Label, Value, MAX_LABELS};
use crate::control::View;
use crate::health::ProbeStatus;
use crate::metrics::family::Family;

/// What a scrape reads.
pub(super) struct Context<'a> {
    pub workers: &'a [Arc<CachePadded<WorkerStats>>],
    pub snap: &'a ForwardingState,
    pub view: Option<&'a View>,
    /// Per-backend series are exported (under the limit).
    pub per_backend: bool,
}

/// Where a section is: an outer index (service, rule, VIP), an inner one
/// (a service's backend) and whether the family's header is written.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cursor {
    pub(super) i: usize,
    pub(super) j: usize,
    pub(super) started: bool,
}

/// Writes rows from the cursor until `out` holds `budget` bytes; true when
/// the section is complete.
pub(super) type Section = fn(&Context<'_>, &mut Cursor, &mut Vec<u8>, usize) -> bool;

/// A family's rows being written: the header goes out with the first.
pub(super) struct Rows<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) family: &'static Family,
    pub(super) started: &'a mut bool,
}

impl Rows<'_> {
    fn start(&mut self) {
        if !*self.started {
            *self.started = true;
            text::header(self.out, self.family);
        }
    }

    /// One sample: `values` are the family's labels' values, in the order
    /// its declaration names them.
    pub(super) fn sample(&mut self, values: &[Label<'_>], value: Value) {
        self.start();
        let (pairs, n) = self.labelled(values);
        text::sample(self.out, self.family.name, &pairs[..n], value);
    }

    pub(super) fn histogram(&mut self, values: &[Label<'_>], st: &ProbeStatus) {
        self.start();
        let (pairs, n) = self.labelled(values);
        text::histogram(
            self.out,
            self.family.name,
            &pairs[..n],
            &crate::health::scheduler::LATENCY_BUCKETS,
            &st.latency_counts,
            st.latency_sum,
        );
    }

    /// `values` named by the family's declared labels.
    fn labelled<'v>(
        &self,
        values: &[Label<'v>],
    ) -> ([(&'static str, Label<'v>); MAX_LABELS], usize) {
        debug_assert!(
            values.len() == self.family.labels.len() && values.len() <= MAX_LABELS,
            "{}'s labels",
            self.family.name
        );
        let mut pairs = [("", Label::Text("")); MAX_LABELS];
        let mut n = 0;
        for (pair, (&name, &value)) in pairs.iter_mut().zip(self.family.labels.iter().zip(values)) {
            *pair = (name, value);
            n += 1;
        }
        (pairs, n)
    }
}

/// The sum over every worker of `f`, wrapping as the counters do.
pub(super) fn sum(
    workers: &[Arc<CachePadded<WorkerStats>>],
    f: impl Fn(&WorkerStats) -> u64,
) -> u64 {
    workers.iter().map(|w| f(w)).fold(0u64, u64::wrapping_add)
}
