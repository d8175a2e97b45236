//! Later fragments of `fragments = "follow_flow"` datagrams that came
//! before their first fragment (`Verdict::Hold`): the worker keeps at most
//! `fragment_flows::HELD` of them, decides them again (the whole pipeline,
//! from the unchanged frame) each time its table learns a new datagram's
//! ports, and drops them as `fragment_unplaced` once they waited
//! `fragment_flows::HOLD_MS`. Both vectors are reserved at start and only
//! swapped and drained: nothing is allocated per packet.

use sluice_core::drop_reason::DropReason;
use sluice_core::fragment_flows::{HELD, HOLD_MS};
use sluice_core::time::Millis;

use crate::dpdk::Mbuf;

/// One held fragment: the packet, when it was held, the config port it
/// came in on (None: steered here).
pub(super) type HeldFragment = (Mbuf, Millis, Option<usize>);

pub(super) struct Held {
    waiting: Vec<HeldFragment>,
    spare: Vec<HeldFragment>,
    /// The fragment table's generation at the last retry.
    generation: u64,
}

impl Held {
    pub(super) fn new() -> Self {
        Self {
            waiting: Vec::with_capacity(HELD),
            spare: Vec::with_capacity(HELD),
            generation: 0,
        }
    }

    /// Nothing is held: a poll has nothing to retry.
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Keeps `f`, or gives it back when [`HELD`] are held already.
    /// `generation`: the fragment table's now, when `f` is the first held
    /// (the fragments are decided again only once it moves).
    pub(super) fn hold(
        &mut self,
        f: HeldFragment,
        generation: u64,
    ) -> Result<(), (Mbuf, DropReason)> {
        if self.waiting.is_empty() {
            self.generation = generation;
        }
        if self.waiting.len() < HELD {
            self.waiting.push(f);
            Ok(())
        } else {
            Err((f.0, DropReason::FragmentHoldFull))
        }
    }

    /// An empty stand-in (it allocates nothing) while the worker's own is
    /// being swept.
    pub(super) fn idle() -> Self {
        Self {
            waiting: Vec::new(),
            spare: Vec::new(),
            generation: 0,
        }
    }

    /// Calls `decide` with each fragment that waited too long (`true`: it
    /// is to be dropped) and, when `generation` moved since the last call,
    /// with every other one (`false`: decide it again, giving back what is
    /// still to hold).
    pub(super) fn sweep(
        &mut self,
        now: Millis,
        generation: u64,
        mut decide: impl FnMut(HeldFragment, bool) -> Option<HeldFragment>,
    ) {
        if self.waiting.is_empty() {
            self.generation = generation;
            return;
        }
        let moved = generation != self.generation;
        self.generation = generation;
        std::mem::swap(&mut self.waiting, &mut self.spare);
        for f in self.spare.drain(..) {
            let expired = now.0.saturating_sub(f.1 .0) >= HOLD_MS;
            if !expired && !moved {
                self.waiting.push(f);
            } else if let Some(back) = decide(f, expired) {
                self.waiting.push(back);
            }
        }
    }

    /// Every held fragment, for the worker's stop.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Mbuf> + '_ {
        self.waiting.drain(..).map(|f| f.0)
    }
}
