//! The worker's staged burst path (`sluice_core::burst`) on arbitrary
//! bursts: stage 1 for every packet, the steering decision between two
//! workers, the conntrack pass and stage 2 with its lookahead, the owner
//! handling what was steered to it, fragments split as the worker splits
//! them. Checked against `process()` run packet by packet on a twin
//! context per worker: the staging, the lookahead and the steering must
//! change nothing but where a packet is handled (AP-1, CT-3, AP-3).
//!
//! Input: one configuration byte (bit 0: the small-MTU snapshot; bit 1:
//! two workers; bit 2: which worker's RX queue gets the first frame, the
//! others alternating; bit 3: headroom from bits 4..8 instead of the
//! default; without bit 3, bit 4: owners by a modelled NIC's RSS instead
//! of software steering's hash), then frames, each a big-endian u16 length and its bytes (the
//! last one cut to what is left). The whole exchange runs twice, so the
//! second round meets the conntrack entries of the first.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_core::burst::MAX_BURST;
use sluice_core::burst::{BurstStages, Outcome, SteerFor};
use sluice_core::conntrack::Shard;
use sluice_core::fragment::FragmentIds;
use sluice_core::packet::{PacketBuf, VecPacket, DEFAULT_HEADROOM};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::rss::RssModel;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::WorkerStats;
use sluice_core::steering::Owners;
use sluice_core::time::Millis;
use sluice_fuzz::{check_fragments, state};
use std::sync::Arc;

/// One worker: the staged path's context and stages, and the context
/// `process()` runs on. Fresh per input (a small shard with a fixed seed),
/// so a failure replays from its input alone.
/// The counters stage 1 counts rules in (one block for every input: the
/// fuzz target checks verdicts, not counts).
fn stats() -> &'static WorkerStats {
    static STATS: OnceLock<WorkerStats> = OnceLock::new();
    STATS.get_or_init(WorkerStats::default)
}

struct Worker {
    staged: PipelineCtx,
    reference: PipelineCtx,
    stages: BurstStages,
}

impl Worker {
    fn new(index: usize) -> Self {
        let ctx = || PipelineCtx {
            now: Millis(0),
            icmp_replies: Default::default(),
            conntrack: Shard::with_capacity_and_seed(256, 0x5eed),
            fragment_ids: FragmentIds::for_worker(index),
            opened: false,
            quic_lb: Default::default(),
            fragments: Default::default(),
        };
        Worker {
            staged: ctx(),
            reference: ctx(),
            stages: BurstStages::default(),
        }
    }

    /// Stage 2's verdict on `pkt` (received as `frame`) must be the one
    /// `process()` gives the same frame on the twin context, with the same
    /// bytes out.
    fn check(
        &mut self,
        st: &ForwardingState,
        v: Verdict,
        mut pkt: VecPacket,
        frame: &[u8],
        headroom: usize,
    ) {
        let mut twin = VecPacket::with_headroom(frame, headroom);
        let expected = process(&mut twin, 0, st, &mut self.reference);
        assert_eq!(v, expected, "staged verdict differs from process()");
        assert_eq!(
            (self.staged.quic_lb.routed, self.staged.quic_lb.fallback),
            (
                self.reference.quic_lb.routed,
                self.reference.quic_lb.fallback
            ),
            "staged QUIC-LB decisions differ from process()"
        );
        assert_eq!(
            pkt.data(),
            twin.data(),
            "staged bytes differ from process()"
        );
        match v {
            Verdict::Forward { .. } => assert!(pkt.data().len() >= 14),
            Verdict::Fragment { port, .. } => {
                check_fragments(&mut pkt, st.ports[usize::from(port)].mtu)
            }
            Verdict::Reply => {
                let n = pkt.data().len();
                assert!((14 + 28..=22 + 1280).contains(&n), "{n}");
            }
            _ => assert_eq!(pkt.data(), frame),
        }
    }
}

/// The configuration byte and the frames of one input.
fn split(data: &[u8]) -> Option<(u8, Vec<&[u8]>)> {
    let (&cfg, mut rest) = data.split_first()?;
    let mut frames = Vec::new();
    while rest.len() >= 2 && frames.len() < MAX_BURST {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let body = &rest[2..];
        let (frame, tail) = body.split_at(len.min(body.len()));
        frames.push(frame);
        rest = tail;
    }
    Some((cfg, frames))
}

fuzz_target!(|data: &[u8]| {
    static STATES: OnceLock<[ForwardingState; 2]> = OnceLock::new();
    let states = STATES.get_or_init(|| [state(1500), state(200)]);
    let Some((cfg, frames)) = split(data) else {
        return;
    };
    let st = &states[usize::from(cfg & 1)];
    let workers = 1 + usize::from(cfg >> 1 & 1);
    let rx = usize::from(cfg >> 2 & 1) % workers;
    let headroom = match cfg & 8 {
        0 => DEFAULT_HEADROOM,
        _ => usize::from(cfg >> 4) * 10,
    };
    let owners = if cfg & 0x18 == 0x10 {
        static MODELS: OnceLock<[Owners; 2]> = OnceLock::new();
        let models = MODELS.get_or_init(|| {
            let model = |queues| {
                Owners::Rss(Arc::new(
                    RssModel::new(&RssModel::round_robin(128, queues), queues).unwrap(),
                ))
            };
            [model(1), model(2)]
        });
        models[workers - 1].clone()
    } else {
        Owners::Hash { workers }
    };
    let mut pool: Vec<Worker> = (0..workers).map(Worker::new).collect();

    for round in 0..2u64 {
        for w in &mut pool {
            w.staged.now = Millis(1000 + round);
            w.reference.now = Millis(1000 + round);
        }
        // Each worker's RX burst through the stages, steering what another
        // worker owns. The same stages then handle what was steered in:
        // a burst never inherits the previous one's steering.
        let mut steered: Vec<Vec<(VecPacket, &[u8])>> = (0..workers).map(|_| Vec::new()).collect();
        for (queue, w) in pool.iter_mut().enumerate() {
            let mine: Vec<&[u8]> = frames
                .iter()
                .enumerate()
                .filter(|(i, _)| (i + rx) % workers == queue)
                .map(|(_, f)| *f)
                .collect();
            let pkts: Vec<VecPacket> = mine
                .iter()
                .map(|f| VecPacket::with_headroom(f, headroom))
                .collect();
            let steer = (workers > 1).then_some(SteerFor {
                index: queue,
                owners: &owners,
                five_tuples_kept: false,
            });
            w.stages.prepare(
                &pkts,
                st,
                &w.staged,
                steer,
                None,
                Some(&stats().rule_packets),
            );
            for (i, (mut pkt, frame)) in pkts.into_iter().zip(mine).enumerate() {
                match w.stages.deliver_as_worker(i, &mut pkt, st, &mut w.staged) {
                    Outcome::Steer(to) => {
                        assert!(
                            workers > 1 && to < workers && to != queue,
                            "steered to {to}"
                        );
                        assert_eq!(
                            pkt.data(),
                            frame,
                            "a steered packet is handed over untouched"
                        );
                        steered[to].push((pkt, frame));
                    }
                    Outcome::Verdict(v) => w.check(st, v, pkt, frame, headroom),
                }
            }
            w.stages.finish();
        }
        // Each owner: what was steered to it, as one burst off its ring,
        // handled where it arrived (never steered again).
        for (owner, inbound) in steered.into_iter().enumerate() {
            if inbound.is_empty() {
                continue;
            }
            let w = &mut pool[owner];
            let (pkts, frames): (Vec<VecPacket>, Vec<&[u8]>) = inbound.into_iter().unzip();
            w.stages.prepare(&pkts, st, &w.staged, None, None, None);
            for (i, (mut pkt, frame)) in pkts.into_iter().zip(frames).enumerate() {
                match w.stages.deliver_as_worker(i, &mut pkt, st, &mut w.staged) {
                    Outcome::Steer(to) => panic!("a steered packet was steered again, to {to}"),
                    Outcome::Verdict(v) => w.check(st, v, pkt, frame, headroom),
                }
            }
            w.stages.finish();
        }
    }
});
