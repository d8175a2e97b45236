//! Per-packet cost of the sans-IO pipeline, without DPDK: stage 1
//! (parse + rule + flow hash) and the whole decision including GRE/L2
//! encapsulation, over 32-packet batches of distinct TCP flows.
//!
//! `cargo bench -p sluice-benches --bench pipeline`

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dataplane::packet::VecPacket;
use dataplane::pipeline::{self, PipelineCtx};
use dataplane::ForwardingState;

const BATCH: usize = 32;

fn state(encap: &str) -> ForwardingState {
    let cfg = format!(
        r#"
[dataplane]
workers = 1
[[dataplane.port]]
name = "clients"
device = "net_null0"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[[dataplane.port]]
name = "backends"
device = "net_null1"
mac = "02:00:00:00:00:02"
address = "198.18.0.1/24"
[[backend_service]]
name = "web"
encapsulation = "{encap}"
backend = [
  {{ address = "198.18.0.10", mac = "02:00:00:00:00:10" }},
  {{ address = "198.18.0.11", mac = "02:00:00:00:00:11" }},
  {{ address = "198.18.0.12", mac = "02:00:00:00:00:12" }},
]
[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#
    );
    let cfg = controlplane::config::load_str(&cfg, "bench.toml").expect("valid bench config");
    let mut ids = controlplane::publish::BackendIds::default();
    controlplane::publish::build_forwarding_state(
        &cfg,
        &[[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]],
        &mut ids,
        1,
    )
}

fn frames() -> Vec<Vec<u8>> {
    (0..BATCH as u32)
        .map(|i| {
            sluice_benches::tcp_flow_frame(
                i * 7919,
                Ipv4Addr::new(203, 0, 113, 10),
                [2, 0, 0, 0, 0, 1],
                false,
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let frames = frames();
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(BATCH as u64));
    let st = state("gre");
    g.bench_function("classify_tcp_v4_batch32", |b| {
        b.iter(|| {
            for f in &frames {
                black_box(pipeline::classify(black_box(f), &st));
            }
        })
    });
    for encap in ["gre", "l2"] {
        let st = state(encap);
        let mut ctx = PipelineCtx::default();
        g.bench_function(format!("process_tcp_v4_{encap}_batch32"), |b| {
            b.iter_batched_ref(
                || frames.iter().map(|f| VecPacket::new(f)).collect::<Vec<_>>(),
                |pkts| {
                    for p in pkts.iter_mut() {
                        black_box(pipeline::process(p, 0, &st, &mut ctx));
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
