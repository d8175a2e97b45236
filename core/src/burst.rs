//! The staged pipeline over one burst, sans-IO: stage 1 for every packet
//! (with its conntrack key and home-entry request), the steering decision,
//! then stage 2 packet by packet with its lookahead into the shard (see `docs/architecture.md`,
//! "Two-stage burst processing"). The `dataplane` worker drives it over
//! DPDK mbufs and queues each [`Outcome`]; tests and the `burst` fuzz
//! target drive it over `VecPacket`s.

use crate::conntrack::{policy, Home, TrackKey, Tracked};
use crate::drop_reason::DropReason;
use crate::established;
use crate::fast_path::{self, LastRule};
use crate::flow::TupleKind;
use crate::icmp_error;
use crate::ids::BackendId;
use crate::packet::{PacketBuf, VecPacket};
use crate::pipeline::{self, PipelineCtx};
use crate::snapshot::ForwardingState;
use crate::stage::{
    prefetch_table, Balance, Keyed, KeyedOut, LanePacket, Stage, StatelessPacket, Verdict,
};
use crate::stateless;
use crate::stats::RuleCounters;
use crate::steering::Owners;
use crate::vlan;

/// Largest burst a queue is polled or flushed with, and the most packets
/// one [`BurstStages`] holds.
pub const MAX_BURST: usize = 64;

/// A packet the staged burst can run over.
pub trait BurstPacket: PacketBuf {
    /// Whether the packet is one segment (the pipeline reads only those).
    fn is_contiguous(&self) -> bool;
}

impl BurstPacket for VecPacket {
    fn is_contiguous(&self) -> bool {
        true
    }
}

/// Software steering of one burst (see [`crate::steering`]): this
/// worker's index, the owner function, and whether the receiving port's
/// RSS already put 5-tuple keys on their owner's queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SteerFor<'o> {
    pub index: usize,
    pub owners: &'o Owners,
    pub five_tuples_kept: bool,
}

/// A packet forwarded by the established lane or the stateless one
/// ([`BurstStages::forward_on_lane`]): the port it leaves by and its
/// backend, as [`Verdict::Forward`] would say. It opened no conntrack
/// entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Forwarded {
    pub port: u16,
    pub backend: BackendId,
}

impl From<Forwarded> for Outcome {
    fn from(Forwarded { port, backend }: Forwarded) -> Self {
        Outcome::Verdict(Verdict::Forward { port, backend })
    }
}

/// Where stage 2 sends one packet of the burst.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Tracked by another worker's shard: hand it to that worker, untouched.
    Steer(usize),
    /// Handled here: the pipeline's verdict (the packet rewritten as it says).
    Verdict(Verdict),
}

/// Stage 2 looks this many packets ahead to check a tracked packet's home
/// entry (requested before stage 2 began, so present by now), and
/// [`FALLBACK_AHEAD`] packets ahead to request what a key away from home
/// needs next: each dependent line gets several deliveries' time to
/// arrive instead of stalling the lookup. A delivery takes ~30 ns of the
/// ~85 ns a tracked packet costs, a DRAM line ~150–200 ns here: at 8 and
/// 4 the signature and entry lines of a 1M-flow shard still arrived late
/// (`prefetch_matches` and `find` were 23 % of the worker); 16 and 8
/// measured +9 % at 1M flows (11.7 → 12.7 Mpps), 20/10, 24/12 and 32/16
/// the same as 16/8, and no change at 100k flows or for SYNs.
const HOME_CHECK_AHEAD: usize = 16;
const FALLBACK_AHEAD: usize = 8;

/// `steer_to` value of a packet this worker handles itself.
const NO_STEER: u16 = u16::MAX;

/// One burst's state between the stages, reused burst after burst (no
/// allocation on the packet path): per packet a slot, which is all that
/// a packet of the established lane has, a `StatelessPacket` that only a
/// packet of the stateless lane's slot points to, and a `Stage` that only
/// the others' slots point to (stage 1 writes each only for them).
#[derive(Debug)]
pub struct BurstStages {
    slots: [Slot; MAX_BURST],
    stages: [Stage; MAX_BURST],
    stateless: [StatelessPacket; MAX_BURST],
    /// Packets in the prepared burst.
    len: usize,
    /// Stage 1 learnt the stateless rule, and not the established lane's,
    /// first: see [`BurstStages::stateless_burst`].
    stateless_burst: bool,
    /// The lookahead's packets away from home: found by its first step,
    /// in order, each waiting for its second.
    away: Away,
}

/// The packets of a burst whose lookup needs more than its home entry,
/// as the lookahead's first step finds them (in order), for its second
/// step a few packets later: a queue, so that the second step costs a
/// packet at home one compare.
#[derive(Debug)]
struct Away {
    packets: [u8; MAX_BURST],
    len: usize,
    /// The queue's next packet, for the second step.
    next: usize,
    /// That packet's index, or [`Away::NONE`] while the queue is empty.
    head: usize,
}

impl Away {
    const NONE: usize = usize::MAX;
    const EMPTY: Away = Away {
        packets: [0; MAX_BURST],
        len: 0,
        next: 0,
        head: Away::NONE,
    };

    /// Empty again, for the next burst: the packets past `len` are never
    /// read, so they are left as they are.
    #[inline(always)]
    fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
        self.head = Away::NONE;
    }

    /// Packet `j` (checked after every earlier one) waits for step 2.
    #[inline(always)]
    fn push(&mut self, j: usize) {
        if let Some(p) = self.packets.get_mut(self.len) {
            *p = j as u8;
            if self.len == self.next {
                self.head = j;
            }
            self.len += 1;
        }
    }

    /// Step 2 for the queue's head is done: the next one is due.
    #[inline(always)]
    fn pop(&mut self) {
        self.next += 1;
        self.head = match self.packets.get(self.next) {
            Some(&p) if self.next < self.len => usize::from(p),
            _ => Away::NONE,
        };
    }
}

/// What the passes of one burst know about one of its packets: one cache
/// line.
#[derive(Copy, Clone, Debug)]
struct Slot {
    /// Its tracking key and shard hash (read only when `keyed` says a key
    /// was written).
    tracked: Tracked,
    /// Where its IP packet is, for [`Keyed::Lane`].
    lane: LanePacket,
    /// Which records stage 1 wrote.
    keyed: Keyed,
    /// The worker it is steered to, when `keyed` is [`Keyed::Steered`].
    steer_to: u16,
}

const _: () = assert!(std::mem::size_of::<Slot>() <= 64);

impl Slot {
    const EMPTY: Slot = Slot {
        tracked: Tracked {
            key: TrackKey {
                src: [0; 2],
                dst: [0; 2],
                meta: 0,
            },
            hash: 0,
        },
        lane: LanePacket {
            l3_offset: 0,
            dont_fragment: false,
            ip_len: 0,
            home: Home::ZERO,
        },
        keyed: Keyed::Staged,
        steer_to: NO_STEER,
    };
}

impl Default for BurstStages {
    fn default() -> Self {
        Self {
            slots: [Slot::EMPTY; MAX_BURST],
            stages: [Stage::UNSTAGED; MAX_BURST],
            stateless: [StatelessPacket::default(); MAX_BURST],
            len: 0,
            stateless_burst: false,
            away: Away::EMPTY,
        }
    }
}

impl BurstStages {
    /// Stage 1 over the whole burst (at most [`MAX_BURST`] packets; more
    /// are left as `internal` drops), which also builds every tracked
    /// packet's key and requests its home entry before any packet is
    /// delivered, so the misses of different packets overlap (a packet
    /// then steered away had its entry requested in vain: one prefetch);
    /// then the steering decision when `steer` is given. `vlan`: the receive port
    /// is a trunk port of that VLAN, whose other frames are dropped
    /// (`wrong_vlan`). `rules`: where each packet that matches a rule is
    /// counted under it (None: a burst steered in, counted by the worker
    /// that received it). Follow with [`BurstStages::deliver`] for each
    /// packet, in order.
    #[inline]
    pub fn prepare<P: BurstPacket>(
        &mut self,
        packets: &[P],
        state: &ForwardingState,
        ctx: &PipelineCtx,
        steer: Option<SteerFor<'_>>,
        vlan: Option<u16>,
        rules: Option<&RuleCounters>,
    ) {
        // (Prefetching packet and headroom lines too measured slower on
        // net_pcap, whose copies leave them hot; revisit on real NICs.)
        let mut last = LastRule::NONE;
        let input = StageOneInput {
            state,
            ctx,
            vlan,
            rules,
        };
        // The loops run by one index over the arrays (bounds known from
        // `len`), so a later one starts where the first broke off.
        let len = packets.len().min(MAX_BURST);
        let mut n = 0;
        // Until a packet has taught stage 1 the established lane's rule or
        // the stateless one (all along for SYNs and misses), every packet
        // takes the whole of stage 1, inlined here.
        while n < len {
            let (Some(m), Some(slot), Some(stage)) = (
                packets.get(n),
                self.slots.get_mut(n),
                self.stages.get_mut(n),
            ) else {
                break;
            };
            n += 1;
            slot.keyed = if m.is_contiguous() {
                stage_one(m.data(), &input, &mut last, slot, stage)
            } else {
                *stage = Stage::Done(Verdict::Drop(DropReason::MultiSegment));
                Keyed::Staged
            };
            if last.lane_learnt() || last.stateless_learnt() {
                break;
            }
        }
        // From then on the learnt rule's packets are tried first. (Only
        // an untagged frame teaches either rule, and a trunk port drops
        // those first: here the port is no trunk.)
        n = if last.lane_learnt() {
            self.stage_one_lane_rule(packets, n, len, &input, &mut last)
        } else {
            self.stage_one_stateless_rule(packets, n, len, &input, &mut last)
        };
        self.stateless_burst = !last.lane_learnt() && last.stateless_learnt();
        last.flush(rules);
        self.len = n;
        if let Some(s) = steer {
            for ((m, slot), stage) in packets
                .iter()
                .zip(self.slots.iter_mut())
                .zip(self.stages.iter())
            {
                slot.steer_to = steer_target(m.data(), slot, stage, state, s);
                if slot.steer_to != NO_STEER {
                    slot.keyed = Keyed::Steered;
                }
            }
        }
        self.away.clear();
        for j in 0..HOME_CHECK_AHEAD {
            self.check_home(state, ctx, j);
        }
        for j in 0..FALLBACK_AHEAD {
            self.fetch_fallback(ctx, j);
        }
    }

    /// Stage 1 from packet `n` to `len` once a packet took the
    /// established lane: its rule's packets take
    /// [`fast_path::classify_lane`], the others stage 1 out of line,
    /// keeping this loop's values in registers. Only the slot is at hand
    /// here; the other records are found out of line, by the packets that
    /// need them. Returns the packets done.
    #[inline(always)]
    fn stage_one_lane_rule<P: BurstPacket>(
        &mut self,
        packets: &[P],
        mut n: usize,
        len: usize,
        input: &StageOneInput<'_>,
        last: &mut LastRule,
    ) -> usize {
        while n < len {
            let (Some(m), Some(slot)) = (packets.get(n), self.slots.get_mut(n)) else {
                break;
            };
            let lane = m.is_contiguous()
                && fast_path::classify_lane(
                    m.data(),
                    last,
                    &input.ctx.conntrack,
                    KeyedOut {
                        tracked: &mut slot.tracked,
                        lane: &mut slot.lane,
                    },
                );
            slot.keyed = if lane {
                Keyed::Lane
            } else {
                let others = (&mut self.stages, &mut self.stateless);
                stage_one_out_of_line(m, input, last, n, slot, others)
            };
            n += 1;
        }
        n
    }

    /// [`BurstStages::stage_one_lane_rule`] once a stateless rule was
    /// learnt: its packets take [`fast_path::classify_stateless`] and the
    /// stateless lane.
    #[inline(always)]
    fn stage_one_stateless_rule<P: BurstPacket>(
        &mut self,
        packets: &[P],
        mut n: usize,
        len: usize,
        input: &StageOneInput<'_>,
        last: &mut LastRule,
    ) -> usize {
        while n < len {
            let (Some(m), Some(slot), Some(stateless)) = (
                packets.get(n),
                self.slots.get_mut(n),
                self.stateless.get_mut(n),
            ) else {
                break;
            };
            let taken = m.is_contiguous()
                && fast_path::classify_stateless(m.data(), last, input.state, stateless);
            slot.keyed = if taken {
                Keyed::Stateless
            } else {
                let others = (&mut self.stages, &mut self.stateless);
                stage_one_out_of_line(m, input, last, n, slot, others)
            };
            n += 1;
        }
        n
    }

    /// Stage 2 for packet `i` of the prepared burst (called for i = 0, 1,
    /// … in order): looks ahead into the shard for later packets, then
    /// decides this one. A packet forwarded with a new conntrack entry
    /// leaves `ctx.opened` set (see [`PipelineCtx::opened`]).
    #[inline]
    pub fn deliver<P: PacketBuf>(
        &mut self,
        i: usize,
        pkt: &mut P,
        state: &ForwardingState,
        ctx: &mut PipelineCtx,
    ) -> Outcome {
        match self.forward_on_lane(i, pkt, state, ctx) {
            Some(forwarded) => forwarded.into(),
            None => self.deliver_other(i, pkt, state, ctx),
        }
    }

    /// The first half of [`BurstStages::deliver`], for a caller that
    /// handles the common outcome apart from the others: looks ahead into
    /// the shard for later packets, then forwards packet `i` if one of the
    /// lanes takes it — the established lane an established flow's packet
    /// (never one that opens a conntrack entry), the stateless lane an
    /// untracked UDP packet of the stateless rule. None, with the packet
    /// untouched: [`BurstStages::deliver_other`] decides it.
    #[inline(always)]
    pub fn forward_on_lane<P: PacketBuf>(
        &mut self,
        i: usize,
        pkt: &mut P,
        state: &ForwardingState,
        ctx: &mut PipelineCtx,
    ) -> Option<Forwarded> {
        self.check_home(state, ctx, i + HOME_CHECK_AHEAD);
        self.fetch_fallback(ctx, i + FALLBACK_AHEAD);
        let slot = self.slots.get(i)?;
        // A steered packet's slot says `Steered`, whatever stage 1 wrote.
        let forwarded = match slot.keyed {
            Keyed::Lane => established::forward_lane(
                pkt,
                &slot.lane,
                &slot.tracked,
                state,
                &mut ctx.conntrack,
                ctx.now,
            ),
            Keyed::Stateless => stateless::forward_out_of_line(pkt, self.stateless.get(i)?, state),
            _ => None,
        };
        forwarded.map(|(port, backend)| Forwarded { port, backend })
    }

    /// Whether stage 1 learnt the stateless rule first in the prepared
    /// burst: its packets are then mostly the stateless lane's, and the
    /// worker delivers them with [`BurstStages::forward_stateless`] in a
    /// loop of their own, with [`BurstStages::deliver_other`] for the
    /// others.
    #[inline(always)]
    pub fn stateless_burst(&self) -> bool {
        self.stateless_burst
    }

    /// Stage 2 for packet `i` in the order the worker runs it: in a
    /// [`BurstStages::stateless_burst`] the stateless lane alone, then
    /// [`BurstStages::deliver_other`]; otherwise
    /// [`BurstStages::deliver`]. For the tests and the `burst` fuzz
    /// target: the worker runs the two ways in loops of their own.
    pub fn deliver_as_worker<P: PacketBuf>(
        &mut self,
        i: usize,
        pkt: &mut P,
        state: &ForwardingState,
        ctx: &mut PipelineCtx,
    ) -> Outcome {
        if !self.stateless_burst {
            return self.deliver(i, pkt, state, ctx);
        }
        match self.forward_stateless(i, pkt, state) {
            Some(forwarded) => forwarded.into(),
            None => self.deliver_other(i, pkt, state, ctx),
        }
    }

    /// The stateless lane alone for packet `i` of a
    /// [`BurstStages::stateless_burst`]: its untracked UDP packet of the
    /// stateless rule forwarded, or None, with the packet untouched, for
    /// any other packet or one the lane declines
    /// ([`BurstStages::deliver_other`] decides it: the general stage 2,
    /// also for an established flow's packet, which the established lane
    /// would have forwarded alike). No lookahead: stage 1 keyed nothing
    /// for these packets, and a tracked packet among them only goes
    /// without a prefetch.
    #[inline(always)]
    pub fn forward_stateless<P: PacketBuf>(
        &self,
        i: usize,
        pkt: &mut P,
        state: &ForwardingState,
    ) -> Option<Forwarded> {
        let (Some(slot), Some(s)) = (self.slots.get(i), self.stateless.get(i)) else {
            return None;
        };
        if slot.keyed != Keyed::Stateless {
            return None;
        }
        let (port, backend) = stateless::forward(pkt, s, state)?;
        Some(Forwarded { port, backend })
    }

    /// The rest of [`BurstStages::deliver`] for packet `i`, after
    /// [`BurstStages::forward_on_lane`] returned None for it. Always
    /// inlined: the worker calls it from two places, and as a call it
    /// cost a SYN 28 more instructions.
    #[inline(always)]
    pub fn deliver_other<P: PacketBuf>(
        &mut self,
        i: usize,
        pkt: &mut P,
        state: &ForwardingState,
        ctx: &mut PipelineCtx,
    ) -> Outcome {
        let Some(slot) = self.slots.get(i) else {
            return Outcome::Verdict(Verdict::Drop(DropReason::Internal));
        };
        match slot.keyed {
            Keyed::Steered => return Outcome::Steer(usize::from(slot.steer_to)),
            Keyed::Lane => {
                return Outcome::Verdict(pipeline::deliver_lane_declined(
                    pkt,
                    &slot.tracked,
                    state,
                    ctx,
                ))
            }
            Keyed::Stateless => {
                return Outcome::Verdict(match self.stateless.get(i) {
                    Some(s) => pipeline::deliver_stateless_declined(pkt, s, state, ctx),
                    None => Verdict::Drop(DropReason::Internal),
                })
            }
            Keyed::Staged | Keyed::StagedTracked => {}
        }
        Outcome::Verdict(match self.stages.get(i) {
            Some(Stage::Balance(b)) if slot.keyed == Keyed::StagedTracked => {
                pipeline::deliver_tracked(pkt, b, &slot.tracked, state, ctx)
            }
            Some(Stage::Balance(b)) => pipeline::deliver(pkt, b, None, state, ctx),
            Some(Stage::Done(v)) => *v,
            None => Verdict::Drop(DropReason::Internal),
        })
    }

    /// End of the burst.
    #[inline]
    pub fn finish(&mut self) {
        self.len = 0;
    }
}

/// What stage 1 reads besides the packet, for [`stage_one`].
struct StageOneInput<'a> {
    state: &'a ForwardingState,
    ctx: &'a PipelineCtx,
    vlan: Option<u16>,
    rules: Option<&'a RuleCounters>,
}

/// Stage 1 of a packet by the whole fast path, or the general path when
/// the fast path declines it. Trunk ports: a frame without the port's tag
/// is dropped (`wrong_vlan`).
#[inline(always)]
fn stage_one(
    frame: &[u8],
    input: &StageOneInput<'_>,
    last: &mut LastRule,
    slot: &mut Slot,
    stage: &mut Stage,
) -> Keyed {
    if let Some(vid) = input.vlan {
        if !vlan::accepts(frame, vid) {
            *stage = Stage::Done(Verdict::Drop(DropReason::WrongVlan));
            return Keyed::Staged;
        }
    }
    pipeline::classify_keyed_into(
        frame,
        input.state,
        stage,
        input.rules,
        input.ctx,
        last,
        KeyedOut {
            tracked: &mut slot.tracked,
            lane: &mut slot.lane,
        },
    )
}

/// Stage 1 for packet `n`, whose `slot` is given, when the learnt rule's
/// stage 1 ([`fast_path::classify_lane`], [`fast_path::classify_stateless`])
/// did not take it (SYNs, another rule's packets, odd ones): its other
/// records are found here; an untracked UDP packet of a learnt stateless
/// rule takes `classify_stateless`, any other [`stage_one`].
#[inline(never)]
fn stage_one_out_of_line<P: BurstPacket>(
    m: &P,
    input: &StageOneInput<'_>,
    last: &mut LastRule,
    n: usize,
    slot: &mut Slot,
    (stages, stateless): (&mut [Stage; MAX_BURST], &mut [StatelessPacket; MAX_BURST]),
) -> Keyed {
    let Some(stage) = stages.get_mut(n) else {
        // Not reached (n < MAX_BURST); with no `Stage`, stage 2 drops it
        // as `internal`.
        return Keyed::Staged;
    };
    if !m.is_contiguous() {
        *stage = Stage::Done(Verdict::Drop(DropReason::MultiSegment));
        return Keyed::Staged;
    }
    // Only an untagged frame teaches the stateless rule, and a trunk port
    // drops those, so on a trunk port none is learnt; the port is
    // checked anyway, out here where it costs the lanes nothing.
    if input.vlan.is_none() {
        if let Some(stateless) = stateless.get_mut(n) {
            if fast_path::classify_stateless(m.data(), last, input.state, stateless) {
                return Keyed::Stateless;
            }
        }
    }
    stage_one(m.data(), input, last, slot, stage)
}

/// The worker a packet goes to, or [`NO_STEER`] when it stays here: a
/// tracked packet belongs to the owner of its tracking key (its 5-tuple,
/// or its address pair: `steering::owner_of_key`); an ICMP error (HA-4)
/// to the owner of the flow it quotes; untracked packets stay.
#[inline]
fn steer_target(
    frame: &[u8],
    slot: &Slot,
    stage: &Stage,
    state: &ForwardingState,
    s: SteerFor<'_>,
) -> u16 {
    let owner = match (slot.keyed, stage) {
        // Where the port's RSS hashed the 5-tuple, it is at its owner.
        (Keyed::Lane | Keyed::StagedTracked, _)
            if s.five_tuples_kept && slot.tracked.key.kind() == TupleKind::Five =>
        {
            None
        }
        (Keyed::Lane | Keyed::StagedTracked, _) => Some(s.owners.of_key(&slot.tracked.key)),
        // Untracked, and no `Stage` was written for it.
        (Keyed::Stateless, _) => None,
        // A QUIC-LB packet: its key, if it falls back to one, is built in
        // stage 2 (`Balance::keyed_in_stage_one`).
        (_, Stage::Balance(b)) if b.tracked => unkeyed_owner(frame, b, state, s),
        (_, Stage::Balance(b)) if b.icmp_error => {
            icmp_error::flow_key(frame, b, state).map(|key| s.owners.of_key(&key))
        }
        // A `follow_flow` fragment: every fragment of its datagram meets
        // the one table that learns the datagram's ports.
        (_, Stage::Balance(b)) if b.meta.fragmented => state
            .service(b.service)
            .filter(|svc| pipeline::follows_flow(svc, &b.meta))
            .map(|_| s.owners.of_address_pair(frame, &b.layout)),
        _ => None,
    };
    match owner {
        Some(o) if o != s.index => o as u16,
        _ => NO_STEER,
    }
}

/// The owner of a tracked packet whose key stage 1 did not write: the
/// key built from the frame as stage 2 would.
#[cold]
#[inline(never)]
fn unkeyed_owner(
    frame: &[u8],
    b: &Balance,
    state: &ForwardingState,
    s: SteerFor<'_>,
) -> Option<usize> {
    let addrs = crate::conntrack::Addrs::from_frame(frame, &b.layout)?;
    let service = state.service(b.service)?;
    let key = crate::conntrack::session::tracking_key(&b.meta, &addrs, b.service, service)?;
    if s.five_tuples_kept && key.kind() == TupleKind::Five {
        return None;
    }
    Some(s.owners.of_key(&key))
}

impl BurstStages {
    /// Lookahead step 1 for packet `j`: is its home entry its key's?
    #[inline(always)]
    fn check_home(&mut self, state: &ForwardingState, ctx: &PipelineCtx, j: usize) {
        if j >= self.len {
            return;
        }
        let Some(slot) = self.slots.get(j) else {
            return;
        };
        let away = match slot.keyed {
            // Never a SYN; a hit reads no table.
            Keyed::Lane => ctx
                .conntrack
                .check_home_at(slot.lane.home, slot.tracked.hash),
            Keyed::StagedTracked => match self.stages.get(j) {
                Some(Stage::Balance(b)) => lookahead_home(b, &slot.tracked, state, ctx),
                _ => false,
            },
            Keyed::Staged | Keyed::Stateless | Keyed::Steered => false,
        };
        if away {
            self.away.push(j);
        }
    }

    /// Lookahead step 2 for packet `j`: the entries of its signature line,
    /// when step 1 found it away from home.
    #[inline(always)]
    fn fetch_fallback(&mut self, ctx: &PipelineCtx, j: usize) {
        if j != self.away.head {
            return;
        }
        if let Some(slot) = self.slots.get(j) {
            lookahead_fallback(&slot.tracked, ctx);
        }
        self.away.pop();
    }
}

/// Lookahead step 1 for a packet with a `Stage` (a few packets before `b`
/// is delivered; its home entry has arrived): requests the next line its
/// lookup will read when the home entry is not its key's, and the Maglev
/// slot when it will need the table. Returns whether step 2
/// ([`lookahead_fallback`]) is needed, a few packets later. Always
/// inlined: it runs once per tracked packet, and as a call its prologue
/// and epilogue cost about as much as its body.
#[inline(always)]
fn lookahead_home(b: &Balance, t: &Tracked, state: &ForwardingState, ctx: &PipelineCtx) -> bool {
    let likely_new = policy::is_syn(&b.meta);
    let away = ctx.conntrack.check_home(t.hash, likely_new);
    if likely_new || away {
        if let Some(service) = state.service(b.service) {
            prefetch_table(service, b.hash);
        }
    }
    away
}

/// Lookahead step 2, for a key away from its home slot (its first
/// signature line has arrived): requests the entries that line matches.
#[inline]
fn lookahead_fallback(t: &Tracked, ctx: &PipelineCtx) {
    ctx.conntrack.prefetch_matches(t.hash);
}
