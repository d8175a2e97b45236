//! `pktgen FLOWS OUT.pcap [VIP] [DST_MAC] [--syn|--udp] [--owner=K/N]`:
//! writes one 64-byte TCP (or UDP) packet per distinct flow, for the
//! throughput harness and the demo.
//!
//! `--owner=K/N` keeps only flows whose address pair worker K of N owns
//! (`sluice_core::steering::owner_of`), skipping the others until FLOWS
//! are written: the capture one RX queue of an N-worker run receives when
//! the port's RSS keeps address pairs on their owner's queue.

use std::io::BufWriter;
use std::net::Ipv4Addr;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: pktgen FLOWS OUT.pcap [VIP] [DST_MAC] [--syn|--udp] [--owner=K/N]";
    let positional: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let syn = args.iter().any(|a| a == "--syn");
    let udp = args.iter().any(|a| a == "--udp");
    let (Some(flows), Some(out)) = (positional.first(), positional.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let owner = match args.iter().find_map(|a| a.strip_prefix("--owner=")) {
        None => None,
        Some(spec) => match parse_owner(spec) {
            Some(owner) => Some(owner),
            None => {
                eprintln!("pktgen: --owner={spec}: expected K/N with K < N, e.g. --owner=0/2");
                std::process::exit(2);
            }
        },
    };
    let flows: u32 = flows.parse().map_err(std::io::Error::other)?;
    let vip: Ipv4Addr = positional
        .get(2)
        .map_or(Ok(Ipv4Addr::new(203, 0, 113, 10)), |s| s.parse())
        .map_err(std::io::Error::other)?;
    let mac = positional.get(3).map_or([2, 0, 0, 0, 0, 1], |s| {
        let mut m = [0u8; 6];
        for (b, part) in m.iter_mut().zip(s.split(':')) {
            *b = u8::from_str_radix(part, 16).unwrap_or(0);
        }
        m
    });
    let file = BufWriter::new(std::fs::File::create(out)?);
    sluice_benches::write_pcap(
        file,
        (0u32..)
            .filter(|&i| {
                owner.is_none_or(|(k, n)| {
                    let src = sluice_benches::flow_source(i);
                    sluice_core::steering::owner_of(src.into(), vip.into(), n) == k
                })
            })
            .take(flows as usize)
            .map(|i| {
                if udp {
                    sluice_benches::udp_flow_frame(i, vip, mac)
                } else {
                    sluice_benches::tcp_flow_frame(i, vip, mac, syn)
                }
            }),
    )?;
    eprintln!("pktgen: wrote {flows} flows to {out}");
    Ok(())
}

/// `K/N` with `K < N`.
fn parse_owner(spec: &str) -> Option<(usize, usize)> {
    let (k, n) = spec.split_once('/')?;
    let (k, n) = (k.parse().ok()?, n.parse().ok()?);
    (k < n).then_some((k, n))
}
