//! Questions to a worker about its own state, answered between bursts:
//! `sluice explain` asks for the conntrack entry of a flow, which only
//! the worker that owns the shard may read.
//!
//! The worker polls its mailbox once every [`POLLS_PER_CHECK`] polls with
//! a non-blocking receive (an atomic load when empty): nothing on the
//! packet path locks, and the worker writes nothing shared but the reply.

use std::sync::mpsc::{Receiver, Sender};

use sluice_core::explain::{conntrack_entry, ConntrackAnswer};
use sluice_core::pipeline::PipelineCtx;
use sluice_core::snapshot::ForwardingState;

/// How often (in polls) a worker looks at its mailbox: a few microseconds
/// apart under load, and well under a millisecond while idle polling
/// backs off.
pub const POLLS_PER_CHECK: u32 = 64;

/// "What does your shard hold for this frame's flow?"
#[derive(Debug)]
pub struct ConntrackQuery {
    pub frame: Vec<u8>,
    /// The worker's index and its answer.
    pub reply: Sender<(usize, ConntrackAnswer)>,
}

/// A worker's end of its mailbox.
#[derive(Debug)]
pub struct Mailbox {
    queries: Receiver<ConntrackQuery>,
    polls: u32,
}

impl Mailbox {
    pub fn new(queries: Receiver<ConntrackQuery>) -> Self {
        Self { queries, polls: 0 }
    }

    /// Once every [`POLLS_PER_CHECK`] calls, answers the queries waiting.
    #[inline]
    pub(super) fn serve(&mut self, index: usize, state: &ForwardingState, ctx: &mut PipelineCtx) {
        self.polls += 1;
        if self.polls < POLLS_PER_CHECK {
            return;
        }
        self.polls = 0;
        while let Ok(q) = self.queries.try_recv() {
            let answer = conntrack_entry(&q.frame, state, &mut ctx.conntrack, ctx.now);
            let _ = q.reply.send((index, answer));
        }
    }
}
