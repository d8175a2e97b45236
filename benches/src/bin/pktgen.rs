//! `pktgen FLOWS OUT.pcap [VIP] [DST_MAC] [--syn|--udp|--quic=CONFIG|--one-client] [--queues=N]
//! [--owners=software]`:
//! writes one 64-byte TCP (or UDP) packet per distinct flow, for the
//! throughput harness and the demo. `--quic=plain|four-pass|single-pass`:
//! UDP to port 443 carrying a QUIC 1-RTT packet whose QUIC-LB connection ID
//! names one of the benchmark service's three backends
//! (`sluice_benches::QUIC_BENCH_CONFIGS`). `--one-client`: established
//! TCP from one client address, up to 60,000 flows told apart by port.
//! `--queues=N` also writes OUT.pcap's flows split by the worker of N that
//! owns each (the modelled RSS queue of its 5-tuple: see [`owner`]) into
//! OUT-0.pcap … OUT-(N-1).pcap: one RX queue each, so no packet is
//! steered. `--owners=software`: split by software steering's own hash
//! instead, which sluice owns by when no port hashes on 5-tuples (the
//! ring harness, whose ports are net_ring).

use std::io::BufWriter;
use std::net::Ipv4Addr;

use sluice_core::rss::RssModel;
use sluice_core::steering::{five_tuple_key, Owners};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: pktgen FLOWS OUT.pcap [VIP] [DST_MAC] [--syn|--udp|--quic=CONFIG|--one-client] \
         [--queues=N] [--owners=software]";
    let positional: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let syn = args.iter().any(|a| a == "--syn");
    let udp = args.iter().any(|a| a == "--udp");
    let one_client = args.iter().any(|a| a == "--one-client");
    let quic = args.iter().find_map(|a| a.strip_prefix("--quic="));
    if let Some(config) = quic {
        if sluice_benches::quic_flow_frame(0, Ipv4Addr::LOCALHOST, [0; 6], config).is_none() {
            eprintln!("pktgen: --quic={config}: use plain, four-pass or single-pass");
            std::process::exit(2);
        }
    }
    let queues: usize = match args.iter().find_map(|a| a.strip_prefix("--queues=")) {
        Some(n) => n.parse().map_err(std::io::Error::other)?,
        None => 0,
    };
    let (Some(flows), Some(out)) = (positional.first(), positional.get(1)) else {
        eprintln!("{usage}");
        std::process::exit(2);
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
    let frame = |i| {
        if let Some(config) = quic {
            sluice_benches::quic_flow_frame(i, vip, mac, config).unwrap_or_default()
        } else if udp {
            sluice_benches::udp_flow_frame(i, vip, mac)
        } else if one_client {
            sluice_benches::tcp_one_client_frame(i, vip, mac)
        } else {
            sluice_benches::tcp_flow_frame(i, vip, mac, syn)
        }
    };
    let file = BufWriter::new(std::fs::File::create(out)?);
    sluice_benches::write_pcap(file, (0..flows).map(frame))?;
    eprintln!("pktgen: wrote {flows} flows to {out}");
    let stem = out.strip_suffix(".pcap").unwrap_or(out);
    let owners = if args.iter().any(|a| a == "--owners=software") {
        Some(Owners::Hash { workers: queues })
    } else {
        rss_owners(queues)
    };
    for q in 0..queues {
        let path = format!("{stem}-{q}.pcap");
        let file = BufWriter::new(std::fs::File::create(&path)?);
        let mine = (0..flows)
            .map(frame)
            .filter(|f| owners.as_ref().and_then(|o| owner(f, o)) == Some(q));
        sluice_benches::write_pcap(file, mine)?;
        eprintln!("pktgen: wrote the flows worker {q} of {queues} owns to {path}");
    }
    Ok(())
}

/// The worker of `workers` owning an untagged IPv4 frame's flow, as
/// sluice owns it on the benchmarks' devices: on net_pcap their backends
/// port (net_null) hashes TCP and UDP on the 5-tuple, and where any port does,
/// every port's tracked packets belong to that port's modelled RSS queue
/// (`controlplane/src/run/ownership.rs`), software-steered ones too. The
/// model's redirection table is round robin, so its size does not change
/// the queue (any power of two the queues divide).
fn owner(frame: &[u8], owners: &Owners) -> Option<usize> {
    let Ok(sluice_core::wire::Parsed::Ip(ip)) = sluice_core::wire::parse(frame) else {
        return None;
    };
    let ports = ip.ports?;
    Some(owners.of_key(&five_tuple_key(ip.src, ip.dst, ip.protocol, ports)))
}

/// The owners [`owner`] splits by, for `workers` workers (None past what a
/// redirection table can name).
fn rss_owners(workers: usize) -> Option<Owners> {
    let queues = u16::try_from(workers).ok()?;
    let reta = RssModel::round_robin(128, queues);
    Some(Owners::Rss(std::sync::Arc::new(
        RssModel::new(&reta, queues).ok()?,
    )))
}
