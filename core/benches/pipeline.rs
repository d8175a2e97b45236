//! Per-packet cost of the sans-IO pipeline, without DPDK: stage 1
//! (parse + rule + flow hash) and the whole decision including GRE/L2
//! encapsulation, over 32-packet batches of distinct TCP flows; stage 1 per
//! protocol (TCP, UDP, fragments, ESP, GRE, ICMP echo, ICMP errors steered
//! by their quote, IPv6 with extension headers) and the encapsulator alone
//! per encapsulation and outer family.
//!
//! The snapshot is built here from core's types alone (the control plane
//! would build the same rules, ports and backends from a config), so the
//! bench needs neither DPDK nor the control plane:
//! `cargo bench -p sluice-core --bench pipeline`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice_core::affinity::SessionAffinity;
use sluice_core::backend::{BackendState, Egress};
use sluice_core::encap::{self, Encapsulation, Geneve, Gre, Gue, Ipip};
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::maglev_table::MaglevTable;
use sluice_core::packet::VecPacket;
use sluice_core::pipeline::{self, PipelineCtx};
use sluice_core::port::PortState;
use sluice_core::rules::{ForwardingRule, PortRange, RuleProtocol, RuleTable};
use sluice_core::service::ServiceState;
use sluice_core::wire::{parse, Parsed};
use sluice_core::ForwardingState;

const BATCH: usize = 32;

/// The backends' addresses, one table slot each in turn.
const BACKENDS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(198, 18, 0, 10),
    Ipv4Addr::new(198, 18, 0, 11),
    Ipv4Addr::new(198, 18, 0, 12),
];

/// Ports "clients" (0) and "backends" (1), service "web" with three
/// backends behind port 1 spread over a 65,537-slot table, and one rule per
/// `(vip, protocol, ports)` for it.
fn state(
    encapsulation: Encapsulation,
    rules: &[(IpAddr, RuleProtocol, PortRange)],
) -> ForwardingState {
    let port = |name: &str, mac: [u8; 6], ipv4: Ipv4Addr| PortState {
        name: name.into(),
        mac,
        ipv4: Some(ipv4),
        ipv6: Some("fd00::1".parse().unwrap()),
        mtu: 1500,
        vlan: None,
    };
    let backends: Vec<_> = BACKENDS
        .iter()
        .zip(0u8..)
        .map(|(a, i)| {
            Some(backend(
                u32::from(i),
                IpAddr::V4(*a),
                [2, 0, 0, 0, 0, 0x10 + i],
            ))
        })
        .collect();
    let ids: Vec<_> = (0..3).map(BackendId).collect();
    let table = MaglevTable {
        slots: (0..65_537u32).map(|i| BackendId(i % 3)).collect(),
    };
    let rules = rules
        .iter()
        .map(|&(vip, protocol, ports)| ForwardingRule {
            name: format!("web-{vip}-{protocol:?}"),
            vip,
            protocol,
            ports,
            service: ServiceId(0),
            counter: 0,
        })
        .collect();
    let mut st = ForwardingState {
        generation: 1,
        rules: std::sync::Arc::new(RuleTable::new(rules)),
        services: vec![ServiceState {
            name: "web".into(),
            encapsulation,
            affinity: SessionAffinity::None,
            tracking: Default::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            follow_fragments: false,
            pool_epoch: 0,
            backends: ids,
            quic_lb: None,
            tables: vec![Arc::new(table)],
        }],
        backends,
        ports: vec![
            port("clients", [2, 0, 0, 0, 0, 1], Ipv4Addr::new(192, 0, 2, 1)),
            port("backends", [2, 0, 0, 0, 0, 2], Ipv4Addr::new(198, 18, 0, 1)),
        ],
        zones: Default::default(),
        lane_backends: Default::default(),
        flow_seed: Default::default(),
    };
    st.lane_backends = st.build_lane_backends();
    st
}

/// A healthy backend `id` of service 0 behind port 1.
fn backend(id: u32, address: IpAddr, mac: [u8; 6]) -> BackendState {
    BackendState {
        id: BackendId(id),
        service: ServiceId(0),
        address,
        healthy: true,
        weight: 1,
        pool: Default::default(),
        draining_until: None,
        egress: Egress {
            port: 1,
            next_hop_mac: Some(mac),
        },
    }
}

const VIP4: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10));

/// The benchmark harness's service: TCP to the VIP's port 80.
fn web_state(encapsulation: Encapsulation) -> ForwardingState {
    let http = PortRange {
        first: 80,
        last: 80,
    };
    state(encapsulation, &[(VIP4, RuleProtocol::Tcp, http)])
}

/// 64-byte TCP frames (ACK) of distinct flows to the VIP's port 80.
fn frames() -> Vec<Vec<u8>> {
    (0..BATCH as u32)
        .map(|i| {
            let mut f = v4(i * 7919, 6, 0x4000, &ports(1024 + i as u16, 80, 20));
            f.resize(60, 0);
            f
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let frames = frames();
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(BATCH as u64));
    let st = web_state(Encapsulation::Gre(Gre));
    g.bench_function("classify_tcp_v4_batch32", |b| {
        b.iter(|| {
            for f in &frames {
                black_box(pipeline::classify(black_box(f), &st));
            }
        })
    });
    for (encap, e) in [("gre", Encapsulation::Gre(Gre)), ("l2", Encapsulation::L2)] {
        let st = web_state(e);
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

/// A snapshot whose two VIPs (203.0.113.10, 2001:db8::10) take every
/// protocol (`L3_DEFAULT`), so each protocol's stage 1 runs to the hash.
fn l3_default_state() -> ForwardingState {
    let vip6 = IpAddr::V6("2001:db8::10".parse().unwrap());
    state(
        Encapsulation::Gre(Gre),
        &[
            (VIP4, RuleProtocol::L3Default, PortRange::ALL),
            (vip6, RuleProtocol::L3Default, PortRange::ALL),
        ],
    )
}

fn eth(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0xcc];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

fn v4(i: u32, proto: u8, flags_frag: u16, l4: &[u8]) -> Vec<u8> {
    let src = Ipv4Addr::from(0x0a00_0000 + i * 7919);
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&flags_frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&[203, 0, 113, 10]);
    h.extend_from_slice(l4);
    eth(0x0800, &h)
}

fn v6(i: u32, next: u8, rest: &[u8]) -> Vec<u8> {
    let src = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, (i >> 16) as u16, i as u16);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&"2001:db8::10".parse::<Ipv6Addr>().unwrap().octets());
    h.extend_from_slice(rest);
    eth(0x86dd, &h)
}

fn ports(sp: u16, dp: u16, len: usize) -> Vec<u8> {
    let mut l4 = sp.to_be_bytes().to_vec();
    l4.extend_from_slice(&dp.to_be_bytes());
    l4.resize(len, 0);
    if len >= 20 {
        l4[12] = 0x50;
    }
    l4
}

/// 32 frames of distinct flows for each protocol case.
fn protocol_batches() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let batch = |f: &dyn Fn(u32) -> Vec<u8>| (0..BATCH as u32).map(f).collect::<Vec<_>>();
    vec![
        (
            "tcp_v4",
            batch(&|i| v4(i, 6, 0x4000, &ports(1024 + i as u16, 80, 20))),
        ),
        (
            "udp_v4",
            batch(&|i| v4(i, 17, 0, &ports(1024 + i as u16, 53, 8))),
        ),
        (
            "udp_v4_first_fragment",
            batch(&|i| v4(i, 17, 0x2000, &ports(1024, 53, 8))),
        ),
        ("udp_v4_later_fragment", batch(&|i| v4(i, 17, 3, &[0; 8]))),
        ("esp_v4", batch(&|i| v4(i, 50, 0, &i.to_be_bytes()))),
        ("gre_v4", batch(&|i| v4(i, 47, 0, &[0, 0, 8, 0]))),
        (
            "icmp_echo_v4",
            batch(&|i| v4(i, 1, 0, &[8, 0, 0, 0, 0, 1, 0, i as u8])),
        ),
        (
            "icmp_frag_needed_v4_steered",
            batch(&|i| {
                let quoted = v4(i, 6, 0x4000, &ports(80, 1024 + i as u16, 8));
                // Quote = the VIP's reply: swap the addresses of the IPv4 header.
                let mut q = quoted[14..14 + 28].to_vec();
                let (a, b) = (q[12..16].to_vec(), q[16..20].to_vec());
                q[12..16].copy_from_slice(&b);
                q[16..20].copy_from_slice(&a);
                let mut m = vec![3, 4, 0, 0, 0, 0, 5, 0];
                m.extend_from_slice(&q);
                v4(i, 1, 0, &m)
            }),
        ),
        (
            "tcp_v6",
            batch(&|i| v6(i, 6, &ports(1024 + i as u16, 80, 20))),
        ),
        (
            "udp_v6_dest_opts_fragment",
            batch(&|i| {
                let mut r = vec![44, 0, 1, 4, 0, 0, 0, 0]; // dest opts → fragment
                r.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, i as u8]); // first, more
                r.extend_from_slice(&ports(1024, 53, 8));
                v6(i, 60, &r)
            }),
        ),
    ]
}

/// Stage 1 per protocol: parse + rule + flow hash, ns per packet.
fn bench_protocols(c: &mut Criterion) {
    let st = l3_default_state();
    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, frames) in protocol_batches() {
        for f in &frames {
            assert!(
                matches!(pipeline::classify(f, &st), pipeline::Stage::Balance(_)),
                "{name}: the bench packet must reach the hash"
            );
        }
        g.bench_function(format!("{name}_batch32"), |b| {
            b.iter(|| {
                for f in &frames {
                    black_box(pipeline::classify(black_box(f), &st));
                }
            })
        });
    }
    g.finish();
}

/// The encapsulator alone, per encapsulation and outer family, on 32
/// 100-byte TCP packets (buffers refilled outside the timing).
fn bench_encap(c: &mut Criterion) {
    let frames = protocol_batches().swap_remove(0).1;
    let layouts: Vec<_> = frames
        .iter()
        .map(|f| match parse(f) {
            Ok(Parsed::Ip(ip)) => ip,
            _ => unreachable!(),
        })
        .collect();
    let port = PortState {
        name: "p".into(),
        mac: [2, 0, 0, 0, 0, 1],
        ipv4: Some(Ipv4Addr::new(198, 18, 0, 1)),
        ipv6: Some("fd00::1".parse().unwrap()),
        mtu: 1500,
        vlan: None,
    };
    let backend = |address: IpAddr| BackendState {
        id: BackendId(0),
        service: ServiceId(0),
        address,
        healthy: true,
        weight: 1,
        pool: Default::default(),
        draining_until: None,
        egress: Egress {
            port: 0,
            next_hop_mac: Some([2, 0, 0, 0, 0, 0x10]),
        },
    };
    let b4 = backend(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10)));
    let b6 = backend("fd00::10".parse().unwrap());
    let geneve = Encapsulation::Geneve(Geneve { port: 6081, vni: 1 });
    let mut g = c.benchmark_group("encap");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, e, b) in [
        ("l2", Encapsulation::L2, &b4),
        ("gre_v4", Encapsulation::Gre(Gre), &b4),
        ("ipip_v4", Encapsulation::Ipip(Ipip), &b4),
        ("gue_v4", Encapsulation::Gue(Gue { port: 6080 }), &b4),
        ("gre_v6", Encapsulation::Gre(Gre), &b6),
        ("ipip_v6", Encapsulation::Ipip(Ipip), &b6),
        (
            "gue_v6_udp_checksum",
            Encapsulation::Gue(Gue { port: 6080 }),
            &b6,
        ),
        ("geneve_v4", geneve, &b4),
        ("geneve_v6_udp_checksum", geneve, &b6),
    ] {
        g.bench_function(format!("{name}_batch32"), |bn| {
            bn.iter_batched_ref(
                || frames.iter().map(|f| VecPacket::new(f)).collect::<Vec<_>>(),
                |pkts| {
                    for (p, ip) in pkts.iter_mut().zip(&layouts) {
                        black_box(encap::encapsulate(
                            p,
                            ip,
                            e,
                            b,
                            &port,
                            0x1234_5678_9abc_def0,
                        ))
                        .expect("encapsulates");
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench, bench_protocols, bench_encap);
criterion_main!(benches);
