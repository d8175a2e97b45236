//! One received burst through the staged pipeline onto the output lanes
//! (`docs/architecture.md`, "Two-stage burst processing"):
//!
//! 1. [`BurstPath::prepare`]: stage 1 (parse, rule, flow hash; a tracked
//!    packet's key, and its home entry requested) for every packet, then
//!    the steering decision — `sluice_core::burst`, sans-IO;
//! 2. per packet, stage 2 (`BurstStages::forward_on_lane`: conntrack
//!    lookahead, then an established flow's packet forwarded by the
//!    established lane, or an untracked UDP packet by the stateless lane,
//!    and queued at once; `BurstStages::deliver_other`
//!    for the others: decision, backend, encapsulation, then
//!    [`BurstPath::route`] puts it on the lane its outcome names);
//! 3. the burst's drops are freed together.

use super::held::Held;
use super::lanes::Lanes;
use crate::dpdk::{Mbuf, MbufBurst, PortId};
use sluice_core::burst::{BurstStages, Outcome, SteerFor};
use sluice_core::drop_reason::DropReason;
use sluice_core::pipeline::{self, PipelineCtx, Verdict};
use sluice_core::snapshot::ForwardingState;
use sluice_core::steering::{Owners, RxPlacement};
use sluice_core::vlan;

/// What a worker's bursts run through: its pipeline context (conntrack
/// shard, clock, rate limits), the stages' per-burst state, and the lanes.
pub(super) struct BurstPath {
    /// This worker's index among the workers steering to each other.
    index: usize,
    /// DPDK port id of each config port (steered packets carry the id).
    port_ids: Vec<PortId>,
    pub(super) ctx: PipelineCtx,
    stages: BurstStages,
    pub(super) lanes: Lanes,
    /// `follow_flow` fragments waiting for their first fragment.
    held: Held,
    /// Who owns a tracking key (AP-1).
    owners: Owners,
}

impl BurstPath {
    pub(super) fn new(
        index: usize,
        port_ids: Vec<PortId>,
        ctx: PipelineCtx,
        lanes: Lanes,
        owners: Owners,
    ) -> Self {
        Self {
            index,
            port_ids,
            ctx,
            stages: BurstStages::default(),
            lanes,
            held: Held::new(),
            owners,
        }
    }

    /// Held fragments: decided again once a new datagram's ports were
    /// learnt, dropped once they waited too long (`worker::held`).
    #[inline]
    pub(super) fn retry_held(&mut self, state: &ForwardingState) {
        if self.held.is_empty() {
            return;
        }
        self.retry_held_fragments(state);
    }

    #[cold]
    #[inline(never)]
    fn retry_held_fragments(&mut self, state: &ForwardingState) {
        let now = self.ctx.now;
        let generation = self.ctx.fragments.generation();
        let mut held = std::mem::replace(&mut self.held, Held::idle());
        held.sweep(now, generation, |(mut m, since, rx), expired| {
            if expired {
                self.lanes.discard(DropReason::FragmentUnplaced, m);
                return None;
            }
            let port = rx.unwrap_or_else(|| self.port_index(&m));
            match pipeline::process(&mut m, port as u16, state, &mut self.ctx) {
                Verdict::Hold => Some((m, since, rx)),
                verdict => {
                    self.route(state, verdict, m, rx);
                    None
                }
            }
        });
        self.held = held;
        self.lanes.free_dropped();
    }

    /// The worker stops: held fragments are dropped, counted.
    pub(super) fn drop_held(&mut self) {
        let mut held = std::mem::replace(&mut self.held, Held::idle());
        for m in held.drain() {
            self.lanes.discard(DropReason::FragmentUnplaced, m);
        }
        self.lanes.free_dropped();
    }

    /// Runs the pipeline over one burst and queues every packet where its
    /// outcome sends it. `rx_port`: the config port the whole burst came
    /// from (None: steered packets, each carrying its own). `placement`:
    /// which tracked packets are already at their owner; the others go to
    /// their owner when it is another worker (see
    /// [`sluice_core::steering`]).
    #[inline]
    pub(super) fn handle_burst(
        &mut self,
        state: &ForwardingState,
        burst: &mut MbufBurst,
        rx_port: Option<usize>,
        placement: RxPlacement,
    ) {
        self.prepare(state, burst, rx_port, placement);
        if self.stages.stateless_burst() {
            self.forward_stateless_burst(state, burst, rx_port);
            return;
        }
        for (i, mut m) in burst.drain().enumerate() {
            // Most packets: an established flow's, forwarded by the
            // established lane (no new entry), or an untracked UDP
            // packet, by the stateless lane; queued here in one line.
            if let Some(f) = self.stages.forward_on_lane(i, &mut m, state, &mut self.ctx) {
                let stats = self.lanes.stats();
                stats.backend(f.backend, 1, u64::from(m.pkt_len()));
                self.lanes.transmit(usize::from(f.port), m);
                continue;
            }
            match self.stages.deliver_other(i, &mut m, state, &mut self.ctx) {
                Outcome::Steer(owner) => self.lanes.steer(owner, m),
                Outcome::Verdict(verdict) => self.route(state, verdict, m, rx_port),
            }
        }
        self.lanes.free_dropped();
        self.stages.finish();
    }

    /// Stage 2 of a burst whose stage 1 learnt the stateless rule first:
    /// its untracked UDP packets forwarded by the stateless lane, inlined
    /// in a loop of their own, apart from [`BurstPath::handle_burst`]'s so
    /// that neither loop's code shapes the other's register assignment.
    /// The others, and those the lane declines, take the general stage 2,
    /// out of line; a tracked packet too, since the established lane has
    /// one call site, in `handle_burst`, where it is inlined whole (a
    /// second one here cost tracked TCP 62 instructions per packet when
    /// the compiler stopped inlining it).
    #[inline(never)]
    fn forward_stateless_burst(
        &mut self,
        state: &ForwardingState,
        burst: &mut MbufBurst,
        rx_port: Option<usize>,
    ) {
        for (i, mut m) in burst.drain().enumerate() {
            if let Some(f) = self.stages.forward_stateless(i, &mut m, state) {
                let stats = self.lanes.stats();
                stats.backend(f.backend, 1, u64::from(m.pkt_len()));
                self.lanes.transmit(usize::from(f.port), m);
                continue;
            }
            self.deliver_rest(state, i, m, rx_port);
        }
        self.lanes.free_dropped();
        self.stages.finish();
    }

    /// A packet of [`BurstPath::forward_stateless_burst`] the stateless
    /// lane did not forward: the rest of stage 2, and its queue.
    #[inline(never)]
    fn deliver_rest(
        &mut self,
        state: &ForwardingState,
        i: usize,
        mut m: Mbuf,
        rx_port: Option<usize>,
    ) {
        match self.stages.deliver_other(i, &mut m, state, &mut self.ctx) {
            Outcome::Steer(owner) => self.lanes.steer(owner, m),
            Outcome::Verdict(verdict) => self.route(state, verdict, m, rx_port),
        }
    }

    /// Stage 1 with the conntrack keys, and the steering decision, over the
    /// whole burst before any packet is delivered.
    #[inline]
    fn prepare(
        &mut self,
        state: &ForwardingState,
        burst: &MbufBurst,
        rx_port: Option<usize>,
        placement: RxPlacement,
    ) {
        let steer =
            (placement != RxPlacement::Kept && self.lanes.workers() > 1).then_some(SteerFor {
                index: self.index,
                owners: &self.owners,
                five_tuples_kept: placement == RxPlacement::FiveTuplesKept,
            });
        // Trunk port: frames without its tag are dropped in stage 1.
        // Steered packets (no `rx_port`) passed that check where received.
        let vlan = rx_port.and_then(|p| state.ports.get(p)?.vlan);
        // Rules count what a port received; a steered packet was counted
        // by the worker that received it.
        let rules = rx_port.map(|_| &self.lanes.stats().rule_packets);
        self.stages
            .prepare(burst.as_slice(), state, &self.ctx, steer, vlan, rules);
    }

    /// Puts a delivered packet on the lane its verdict names: a forwarded
    /// packet and an ICMP answer on a port's TX lane, the others on
    /// theirs. Always inlined: out of line (the compiler's choice once
    /// it grew an arm) it cost the stateless path +58 instructions per
    /// packet (`docs/performance-log.md`).
    #[inline(always)]
    fn route(
        &mut self,
        state: &ForwardingState,
        verdict: Verdict,
        mut m: Mbuf,
        rx_port: Option<usize>,
    ) {
        let stats = self.lanes.stats();
        let out = match verdict {
            Verdict::Forward { port, backend } => {
                let opened = take_opened(&mut self.ctx);
                stats.backend_opened(backend, 1, u64::from(m.pkt_len()), opened);
                usize::from(port)
            }
            // AP-3: an ICMP answer leaves by the receive port.
            Verdict::Reply => {
                stats.icmp_replies.add(1);
                rx_port.unwrap_or_else(|| self.port_index(&m))
            }
            // AP-3: oversize IPv4 without DF, sent as fragments.
            Verdict::Fragment { port, backend } => {
                let opened = take_opened(&mut self.ctx);
                stats.backend_opened(backend, 1, u64::from(m.pkt_len()), opened);
                return self.lanes.fragment(usize::from(port), m, state);
            }
            Verdict::Punt => {
                let port = rx_port.unwrap_or_else(|| self.port_index(&m));
                // The kernel sees a trunk port's traffic untagged (its TAP
                // carries the port's addresses); stage 1 made sure the tag
                // is there.
                if state.ports.get(port).is_some_and(|p| p.vlan.is_some()) {
                    vlan::pop_tag(&mut m);
                }
                return self.lanes.punt(port, m, state);
            }
            Verdict::Drop(reason) => return self.lanes.discard(reason, m),
            Verdict::Hold => return self.hold(m, rx_port),
        };
        self.lanes.transmit(out, m);
    }

    /// A `follow_flow` fragment before its first: held, or dropped when
    /// the worker holds as many as it may (`worker::held`).
    #[cold]
    #[inline(never)]
    fn hold(&mut self, m: Mbuf, rx_port: Option<usize>) {
        let generation = self.ctx.fragments.generation();
        if let Err((m, reason)) = self.held.hold((m, self.ctx.now, rx_port), generation) {
            self.lanes.discard(reason, m);
        }
    }

    /// The config index of the port a steered packet arrived on.
    #[cold]
    fn port_index(&self, m: &Mbuf) -> usize {
        self.port_ids
            .iter()
            .position(|&id| id == m.port())
            .unwrap_or(0)
    }
}

/// Whether the packet just forwarded opened a conntrack entry (a new
/// connection to its backend, `PipelineCtx::opened`), the flag cleared for
/// the next one.
#[inline(always)]
fn take_opened(ctx: &mut PipelineCtx) -> bool {
    let opened = ctx.opened;
    if opened {
        ctx.opened = false;
    }
    opened
}
