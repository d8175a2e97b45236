//! AP-1 and HA-4 on a port with RSS on 5-tuples: the burst's steering
//! decision (`BurstStages::prepare` with `SteerFor`) leaves a 5-tuple
//! key's packets where the NIC put them, and sends what the NIC does not
//! place by 5-tuple — an ICMP error, a PER_SESSION × CLIENT_IP key — to
//! the worker the RSS model names. The model's queue is computed here from
//! the Toeplitz input as a NIC forms it (source, destination, source port,
//! destination port), independently of the tracking key.

mod common;

use std::sync::Arc;

use common::state::*;
use common::*;
use sluice_core::burst::{BurstStages, Outcome, SteerFor};
use sluice_core::packet::VecPacket;
use sluice_core::pipeline::PipelineCtx;
use sluice_core::rss::RssModel;
use sluice_core::service::TrackingMode;
use sluice_core::snapshot::ForwardingState;
use sluice_core::steering::Owners;

const CLIENT: &str = "198.51.100.7";

fn model() -> Arc<RssModel> {
    Arc::new(RssModel::new(&RssModel::round_robin(128, 2), 2).unwrap())
}

/// The NIC's queue for an IPv4 input of addresses and, if given, ports.
fn nic_queue(m: &RssModel, src: &str, dst: &str, ports: Option<(u16, u16)>) -> usize {
    let mut input = v4(src).octets().to_vec();
    input.extend(v4(dst).octets());
    if let Some((s, d)) = ports {
        input.extend(s.to_be_bytes());
        input.extend(d.to_be_bytes());
    }
    m.queue_of_hash(m.hash(&input))
}

/// Worker `index`'s steering decision for each frame of one burst.
fn steered(
    st: &ForwardingState,
    frames: &[Vec<u8>],
    index: usize,
    owners: &Owners,
    five_tuples_kept: bool,
) -> Vec<Option<usize>> {
    let mut ctx = PipelineCtx::default();
    let mut stages = BurstStages::default();
    let pkts: Vec<VecPacket> = frames.iter().map(|f| VecPacket::new(f)).collect();
    let steer = SteerFor {
        index,
        owners,
        five_tuples_kept,
    };
    stages.prepare(&pkts, st, &ctx, Some(steer), None, None);
    let out = pkts
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| match stages.deliver(i, &mut p, st, &mut ctx) {
            Outcome::Steer(to) => Some(to),
            Outcome::Verdict(_) => None,
        })
        .collect();
    stages.finish();
    out
}

fn ack(client: &str, sport: u16, vip: &str) -> Vec<u8> {
    eth(
        &[],
        ETH_IPV4,
        &ipv4(v4(client), v4(vip), TCP, DF, &tcp(sport, 80, 0x10, &[])),
    )
}

/// A frag-needed from a router about the backend's reply VIP:80 → client.
fn frag_needed(client: &str, sport: u16) -> Vec<u8> {
    let reply = ipv4(v4(VIP4), v4(client), TCP, DF, &tcp(80, sport, 0x10, &[]));
    let mut msg = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    msg.extend_from_slice(&reply[..28]);
    eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("192.0.2.254"), v4(VIP4), ICMP, 0, &msg),
    )
}

/// AP-1: a 5-tuple key's packets stay where the NIC put them; with
/// software steering by the same model they would go to the model's queue,
/// which is where the NIC puts them.
#[test]
fn ap_1_five_tuple_keys_stay_where_rss_put_them() {
    let st = state();
    let m = model();
    let owners = Owners::Rss(Arc::clone(&m));
    let frames: Vec<Vec<u8>> = (40_000..40_030).map(|p| ack(CLIENT, p, VIP4)).collect();
    for index in 0..2 {
        assert!(
            steered(&st, &frames, index, &owners, true)
                .iter()
                .all(Option::is_none),
            "worker {index} steered a 5-tuple key its port's RSS placed"
        );
        let by_software = steered(&st, &frames, index, &owners, false);
        for (sport, to) in (40_000..40_030).zip(by_software) {
            let nic = nic_queue(&m, CLIENT, VIP4, Some((sport, 80)));
            assert_eq!(to, (nic != index).then_some(nic), "port {sport}");
        }
    }
}

/// HA-4 with AP-1: an ICMP error arrives where the NIC hashes the router's
/// address pair; it goes to the queue the NIC gives the flow it quotes.
#[test]
fn ha_4_an_icmp_error_goes_to_the_queue_rss_gives_its_flow() {
    let st = state();
    let m = model();
    let owners = Owners::Rss(Arc::clone(&m));
    let mut seen = [0; 2];
    for sport in 30_000..30_032 {
        let frame = frag_needed(CLIENT, sport);
        let owner = nic_queue(&m, CLIENT, VIP4, Some((sport, 80)));
        seen[owner] += 1;
        for index in 0..2 {
            let to = steered(&st, std::slice::from_ref(&frame), index, &owners, true);
            assert_eq!(to, [(owner != index).then_some(owner)], "port {sport}");
        }
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "both queues own some: {seen:?}"
    );
}

/// AP-1 under PER_SESSION × CLIENT_IP: the key is the address pair, the
/// NIC hashes the 5-tuple, so each connection goes to the address pair's
/// queue — one worker for all of the client's connections.
#[test]
fn ap_1_a_client_ip_session_goes_to_its_address_pairs_queue() {
    let mut st = state();
    st.services[usize::from(SVC_CLIENT_IP)].tracking.mode = TrackingMode::PerSession;
    let m = model();
    let owners = Owners::Rss(Arc::clone(&m));
    for client in [
        "198.51.100.7",
        "198.51.100.8",
        "198.51.100.9",
        "198.51.100.10",
    ] {
        let owner = nic_queue(&m, client, VIP_CLIENT_IP, None);
        let frames: Vec<Vec<u8>> = (50_000..50_016)
            .map(|p| ack(client, p, VIP_CLIENT_IP))
            .collect();
        for index in 0..2 {
            let to = steered(&st, &frames, index, &owners, true);
            assert!(
                to.iter().all(|&t| t == (owner != index).then_some(owner)),
                "{client} on worker {index}: {to:?}, owner {owner}"
            );
        }
    }
}
