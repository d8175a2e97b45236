//! HA-4: ICMP/ICMPv6 errors quoting a packet of a VIP flow reach the
//! backend that owns the flow; ICMP echo and other portless protocols
//! under `L3_DEFAULT` are balanced by their 3-tuple (HA-1…HA-3, FR-1).

mod common;

use common::state::*;
use common::*;
use sluice_core::flow::{flow_hash, FlowKey};
use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::pipeline::{process, PipelineCtx, Verdict};
use sluice_core::wire::Ports;
use sluice_core::DropReason;

fn run(frame: &[u8]) -> (Verdict, Vec<u8>) {
    let mut pkt = VecPacket::new(frame);
    let v = process(&mut pkt, 0, &state(), &mut PipelineCtx::default());
    (v, pkt.data().to_vec())
}

fn owner(key: &FlowKey) -> BackendId {
    table01().lookup(flow_hash(key)).unwrap()
}

fn backend_of(v: Verdict) -> BackendId {
    match v {
        Verdict::Forward { backend, .. } => backend,
        other => panic!("expected Forward, got {other:?}"),
    }
}

/// An ICMPv4 frag-needed from a router on the client's path to the VIP,
/// quoting the first 8 bytes of the backend's TCP reply VIP:80 → client.
fn frag_needed_v4(client: &str, sport: u16, icmp_src: &str, quoted_src: &str) -> Vec<u8> {
    let reply = ipv4(
        v4(quoted_src),
        v4(client),
        TCP,
        DF,
        &tcp(80, sport, 0x10, &[]),
    );
    let mut msg = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    msg.extend_from_slice(&reply[..28]);
    eth(&[], ETH_IPV4, &ipv4(v4(icmp_src), v4(VIP4), ICMP, 0, &msg))
}

/// HA-4: a frag-needed quoting a TCP flow goes to the backend of the
/// client's 5-tuple (quoted header swapped), whole and untouched inside L2
/// DSR; over many client ports both backends are hit, so the hash really
/// depends on the quoted ports.
#[test]
fn ha_4_icmp_frag_needed_reaches_the_flows_backend() {
    let mut seen = [false; 2];
    for sport in 30000..30032 {
        let frame = frag_needed_v4("198.51.100.7", sport, "192.0.2.254", VIP4);
        let (v, out) = run(&frame);
        let key = FlowKey::five_tuple(
            ip("198.51.100.7"),
            ip(VIP4),
            TCP,
            Ports {
                src: sport,
                dst: 80,
            },
        );
        let want = owner(&key);
        assert_eq!(backend_of(v), want, "sport {sport}");
        assert_eq!(out[14..], frame[14..], "ICMP packet delivered untouched");
        seen[want.0 as usize] = true;
    }
    assert_eq!(seen, [true, true]);
}

/// HA-4: an error whose quote was not sent by the VIP it is addressed to
/// is not steered; VIP4 has no `L3_DEFAULT` rule, so it is dropped (FR-3).
#[test]
fn ha_4_quote_from_another_source_is_not_steered() {
    let frame = frag_needed_v4("198.51.100.7", 30000, "192.0.2.254", "203.0.113.99");
    assert_eq!(run(&frame).0, Verdict::Drop(DropReason::NoRule));
}

/// HA-4: a truncated quote (IP header cut) is not steered and never panics.
#[test]
fn ha_4_truncated_quotes_fall_back_without_panic() {
    let full = frag_needed_v4("198.51.100.7", 30000, "192.0.2.254", VIP4);
    for cut in 14..full.len() {
        let mut f = full[..cut].to_vec();
        // Keep the outer header consistent so only the quote is short.
        if cut >= 34 {
            let total = (cut - 14) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
        }
        let _ = run(&f);
    }
}

/// HA-4: ICMPv6 packet-too-big (and unreachable, time exceeded) quoting a
/// UDP flow of the IPv6 VIP reach the backend of the client's 5-tuple.
#[test]
fn ha_4_icmpv6_errors_reach_the_flows_backend() {
    for icmp_type in [1u8, 2, 3] {
        let mut seen = [false; 2];
        for sport in 5000..5032 {
            let reply = ipv6(v6(VIP6), v6("2001:db8:c::7"), UDP, &udp(53, sport, &[1; 8]));
            let mut msg = vec![icmp_type, 0, 0, 0, 0, 0, 0x05, 0x00];
            msg.extend_from_slice(&reply);
            let frame = eth(
                &[],
                ETH_IPV6,
                &ipv6(v6("2001:db8:ff::1"), v6(VIP6), ICMPV6, &msg),
            );
            let key = FlowKey::five_tuple(
                ip("2001:db8:c::7"),
                ip(VIP6),
                UDP,
                Ports {
                    src: sport,
                    dst: 53,
                },
            );
            let want = owner(&key);
            assert_eq!(backend_of(run(&frame).0), want, "type {icmp_type}");
            seen[want.0 as usize] = true;
        }
        assert_eq!(seen, [true, true]);
    }
}

/// FR-1, HA-1: ICMPv6 echo, ESP and GRE to an `L3_DEFAULT` VIP are
/// balanced by the 3-tuple (ESP's SPI is not hashed).
#[test]
fn ha_1_echo_esp_gre_hash_the_3_tuple() {
    for proto in [ICMPV6, ESP, 47u8] {
        for i in 1..16u16 {
            let client = format!("2001:db8:c::{i:x}");
            let payload = [128u8, 0, 0, 0, 0, 1, 0, (i & 0xff) as u8];
            let frame = eth(&[], ETH_IPV6, &ipv6(v6(&client), v6(VIP6), proto, &payload));
            let key = FlowKey::three_tuple(ip(&client), ip(VIP6), proto);
            assert_eq!(backend_of(run(&frame).0), owner(&key), "proto {proto}");
            // ESP: another SPI, same backend.
            let mut other = payload;
            other[0] ^= 0xff;
            let frame2 = eth(&[], ETH_IPV6, &ipv6(v6(&client), v6(VIP6), proto, &other));
            if proto == ESP {
                assert_eq!(backend_of(run(&frame2).0), owner(&key));
            }
        }
    }
}

/// HA-3: ICMP echo under `CLIENT_IP` lands with the client's other traffic.
#[test]
fn ha_3_icmp_echo_under_client_ip_uses_the_2_tuple() {
    for i in 1..16u8 {
        let client = format!("198.51.100.{i}");
        let echo = [8u8, 0, 0, 0, 0, 1, 0, i];
        let frame = eth(
            &[],
            ETH_IPV4,
            &ipv4(v4(&client), v4(VIP_CLIENT_IP), ICMP, 0, &echo),
        );
        let key = FlowKey::two_tuple(ip(&client), ip(VIP_CLIENT_IP));
        assert_eq!(backend_of(run(&frame).0), owner(&key));
    }
}

/// HA-4 with connection tracking (CT-7): after the table changes, an ICMP
/// error quoting an established flow still reaches the backend the flow's
/// entry records — the one that sent the quoted packet — while an error
/// about a flow with no entry follows the new table.
#[test]
fn ha_4_icmp_error_follows_the_flows_conntrack_entry() {
    let client = "198.51.100.7";
    let sport = 30001;
    let key = FlowKey::five_tuple(
        ip(client),
        ip(VIP4),
        TCP,
        Ports {
            src: sport,
            dst: 80,
        },
    );
    let before = owner(&key);
    let other = BackendId(1 - before.0);
    let mut ctx = PipelineCtx::default();
    let syn = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4(client), v4(VIP4), TCP, DF, &tcp(sport, 80, 0x02, &[])),
    );
    let v = process(&mut VecPacket::new(&syn), 0, &state(), &mut ctx);
    assert_eq!(backend_of(v), before);

    // The table now sends every new flow to the other backend.
    let mut changed = state();
    let svc = &mut changed.services[usize::from(SVC_TCP80_L2)];
    svc.tables = vec![MaglevTable {
        slots: vec![other; 7].into(),
    }
    .into()];
    let error = frag_needed_v4(client, sport, "192.0.2.254", VIP4);
    let v = process(&mut VecPacket::new(&error), 0, &changed, &mut ctx);
    assert_eq!(
        backend_of(v),
        before,
        "the recorded backend, not the new table's"
    );

    let untracked = frag_needed_v4(client, sport + 1, "192.0.2.254", VIP4);
    let v = process(&mut VecPacket::new(&untracked), 0, &changed, &mut ctx);
    assert_eq!(
        backend_of(v),
        other,
        "no entry: the flow's hash on the current table"
    );
    assert_eq!(ctx.conntrack.len(), 1, "an ICMP error records nothing");
}
