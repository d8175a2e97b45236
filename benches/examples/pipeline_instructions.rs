//! Runs the sans-IO pipeline over many distinct flows in bursts of 32, as
//! the worker does (`BurstStages::prepare` over a burst, then `deliver`
//! for each packet: stage 1, the conntrack lookahead, the established
//! lane and the general stage 2; no steering, no RX/TX), for counting
//! instructions per packet and per function with valgrind:
//!
//! ```sh
//! cargo build --release -p sluice-benches --example pipeline_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!   target/release/examples/pipeline_instructions udp gre 100000
//! callgrind_annotate --inclusive=yes /tmp/cg.out | head -40
//! ```
//!
//! Arguments: traffic (`tcp` | `udp`), encapsulation (any `encapsulation`
//! value: `l2`, `gre`, `ipip`, `gue`, `geneve`), packets. The frames are reset between passes by `reset`, which
//! shows up as its own function in the profile.

use std::hint::black_box;
use std::net::Ipv4Addr;

use sluice_core::burst::{BurstStages, Outcome};
use sluice_core::packet::VecPacket;
use sluice_core::pipeline::PipelineCtx;
use sluice_core::Verdict;

/// Packets per burst: the worker's default RX burst.
const BURST: usize = 32;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let traffic = args.get(1).map_or("udp", String::as_str);
    let encap = args.get(2).map_or("gre", String::as_str);
    let packets: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let (proto, port) = if traffic == "tcp" {
        ("TCP", "80")
    } else {
        ("UDP", "53")
    };
    let state = sluice_benches::web_state(encap, proto, port);
    let macs = sluice_benches::WEB_PORT_MACS;
    let vip = Ipv4Addr::new(203, 0, 113, 10);
    let frames: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| match traffic {
            "tcp" => sluice_benches::tcp_flow_frame(i, vip, macs[0], false),
            _ => sluice_benches::udp_flow_frame(i, vip, macs[0]),
        })
        .collect();
    let mut pkts: Vec<VecPacket> = frames
        .iter()
        .map(|f| VecPacket::with_headroom(f, 128))
        .collect();
    let mut ctx = PipelineCtx::new(1 << 16);
    let mut stages = BurstStages::default();
    let mut forwarded = 0usize;
    for pass in 0..packets.div_ceil(frames.len()) {
        if pass > 0 {
            reset(&mut pkts, &frames);
        }
        for burst in pkts.chunks_mut(BURST) {
            stages.prepare(burst, &state, &ctx, None, None, None);
            for (i, p) in burst.iter_mut().enumerate() {
                let outcome = stages.deliver(i, p, &state, &mut ctx);
                forwarded +=
                    usize::from(matches!(outcome, Outcome::Verdict(Verdict::Forward { .. })));
            }
            stages.finish();
        }
    }
    println!("forwarded {}", black_box(forwarded));
}

#[inline(never)]
fn reset(pkts: &mut [VecPacket], frames: &[Vec<u8>]) {
    for (p, f) in pkts.iter_mut().zip(frames) {
        *p = VecPacket::with_headroom(f, 128);
    }
}
