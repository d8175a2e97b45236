//! The whole per-packet decision on arbitrary bytes against a small
//! snapshot whose rules cover every protocol, so that mutated packets reach
//! selection and every encapsulation.
#![no_main]

use std::cell::RefCell;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;
use sluice_fuzz::{check_fragments, state};

thread_local! {
    /// One context for the whole run: its conntrack shard is allocated
    /// once, not per input. The clock advances a second per input so the
    /// ICMP rate limit keeps refilling and the reply path stays reachable.
    static CTX: RefCell<PipelineCtx> = RefCell::new(PipelineCtx::default());
}

fuzz_target!(|data: &[u8]| {
    static STATES: OnceLock<[ForwardingState; 2]> = OnceLock::new();
    // A normal MTU, and a small one that sends most packets down the
    // MTU-exceeded path (ICMP frag-needed / packet-too-big generation).
    let states = STATES.get_or_init(|| [state(1500), state(200)]);
    // The first byte picks the headroom (so NoHeadroom paths are reached)
    // and the snapshot.
    let (headroom, st, frame) = match data.split_first() {
        Some((h, rest)) => (usize::from(*h) % 160, &states[usize::from(*h >> 7)], rest),
        None => (0, &states[0], data),
    };
    let mut pkt = VecPacket::with_headroom(frame, headroom);
    let verdict = CTX.with(|c| {
        let mut ctx = c.borrow_mut();
        ctx.now = Millis(ctx.now.0 + 1000);
        process(&mut pkt, 0, st, &mut ctx)
    });
    match verdict {
        Verdict::Forward { .. } => assert!(pkt.data().len() >= 14),
        // AP-3: oversize IPv4 without DF: the worker's fragmentation must
        // not panic either, and every fragment fits the MTU.
        Verdict::Fragment { port, .. } => {
            check_fragments(&mut pkt, st.ports[usize::from(port)].mtu)
        }
        // An ICMP error: L2 + IP + ICMP header at least, within the
        // RFC 1812 / RFC 4443 size bounds.
        Verdict::Reply => {
            let n = pkt.data().len();
            assert!(n >= 14 + 28 && n <= 22 + 1280, "{n}");
        }
        _ => assert_eq!(pkt.data(), frame),
    }
});
