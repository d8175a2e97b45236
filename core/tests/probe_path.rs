//! HC-9, data-path probes (`probe_path`): a probe socket's packet from the
//! kernel leaves encapsulated to its backend exactly as a client's packet
//! to that backend would (AP-3, the same bytes as `encap::encapsulate`);
//! anything else the kernel sends is left alone; a probe packet that cannot
//! be sent is a named drop the table remembers; answers are told apart by
//! where they come from (the VIP, the backend's own address, elsewhere).

mod common;

use common::state::{backend_state, state, SVC_UDP_GRE, VIP4};
use common::*;
use sluice_core::encap::encapsulate;
use sluice_core::ids::BackendId;
use sluice_core::packet::{PacketBuf, VecPacket};
use sluice_core::probe_path::{
    is_port_address, note_inbound, steer_outbound, Outbound, ProbeProto, ProbeTable, Seen,
};
use sluice_core::wire::{parse, IpInfo, Parsed};
use sluice_core::DropReason;

const PROBE_PORT: u16 = 41_000;

/// The lab state with backend 3 in the GRE service.
const GRE_BACKEND: BackendId = BackendId(3);

fn state_with_gre_backend() -> sluice_core::snapshot::ForwardingState {
    let mut st = state();
    st.backends.push(Some(backend_state(
        3,
        SVC_UDP_GRE,
        ip("10.1.0.9"),
        0,
        Some(NEXT_HOP_MAC),
    )));
    st
}

fn info(frame: &[u8]) -> IpInfo {
    match parse(frame) {
        Ok(Parsed::Ip(i)) => i,
        other => panic!("{other:?}"),
    }
}

/// A SYN the kernel sends from the port's address to the VIP.
fn kernel_syn(sport: u16) -> Vec<u8> {
    eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4(VIP4), TCP, DF, &tcp(sport, 80, SYN, b"")),
    )
}

/// The probe's packet leaves as the service's encapsulation to the
/// registered backend: byte for byte what the client path writes.
#[test]
fn hc_9_a_probe_packet_leaves_encapsulated_to_its_backend() {
    let st = state_with_gre_backend();
    let table = ProbeTable::new();
    // Backend 0 of service 0 (layer 2); a GRE service's backend below.
    table.register(ProbeProto::Tcp, PROBE_PORT, BackendId(0));
    let frame = kernel_syn(PROBE_PORT);
    let i = info(&frame);
    let mut pkt = VecPacket::new(&frame);
    assert_eq!(
        steer_outbound(&mut pkt, &i, &st, &table),
        Outbound::Deliver { port: 0 }
    );
    let backend = st.backend(BackendId(0)).unwrap();
    let mut want = VecPacket::new(&frame);
    let svc = st.service(backend.service).unwrap();
    encapsulate(&mut want, &i, svc.encapsulation, backend, &st.ports[0], 0).unwrap();
    assert_eq!(pkt.data(), want.data(), "layer 2: the backend's MAC");
    assert!(table.seen(ProbeProto::Tcp, PROBE_PORT).sent);

    // Under GRE: the outer header to the backend, the SYN inside untouched.
    let gre_backend = GRE_BACKEND;
    table.register(ProbeProto::Tcp, PROBE_PORT + 1, gre_backend);
    let frame = kernel_syn(PROBE_PORT + 1);
    let i = info(&frame);
    let mut pkt = VecPacket::new(&frame);
    let out = steer_outbound(&mut pkt, &i, &st, &table);
    let b = st.backend(gre_backend).unwrap();
    assert_eq!(
        out,
        Outbound::Deliver {
            port: b.egress.port
        }
    );
    let out = pkt.data();
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    assert_eq!(out[14 + 9], 47, "outer protocol GRE");
    assert_eq!(&out[14 + 16..14 + 20], &[10, 1, 0, 9], "to the backend");
    assert!(out.ends_with(&frame[14..]), "the inner packet unchanged");
}

/// What is not a registered probe socket's is the kernel's own traffic:
/// untouched.
#[test]
fn hc_9_other_kernel_packets_are_left_alone() {
    let st = state();
    let table = ProbeTable::new();
    table.register(ProbeProto::Udp, PROBE_PORT, BackendId(0));
    let frame = kernel_syn(PROBE_PORT);
    let i = info(&frame);
    let mut pkt = VecPacket::new(&frame);
    assert_eq!(
        steer_outbound(&mut pkt, &i, &st, &table),
        Outbound::NotProbe
    );
    assert_eq!(pkt.data(), &frame[..]);
    let icmp = eth(
        &[],
        ETH_IPV4,
        &ipv4(v4("10.0.0.1"), v4(VIP4), ICMP, 0, &[8, 0, 0, 0]),
    );
    let mut pkt = VecPacket::new(&icmp);
    assert_eq!(
        steer_outbound(&mut pkt, &info(&icmp), &st, &table),
        Outbound::NotProbe
    );
    assert!(is_port_address(&st, ip("10.0.0.1")) && is_port_address(&st, ip("fd00::1")));
    assert!(!is_port_address(&st, ip(VIP4)));
}

/// A probe whose backend cannot be reached from here is a named drop, and
/// the table says it was not sent; one beyond the MTU says so too.
#[test]
fn hc_9_a_probe_that_cannot_leave_is_a_named_drop() {
    let st = state_with_gre_backend();
    let table = ProbeTable::new();
    table.register(ProbeProto::Tcp, PROBE_PORT, BackendId(2)); // unresolved
    table.register(ProbeProto::Tcp, PROBE_PORT + 1, BackendId(99)); // gone
    for (port, reason) in [
        (PROBE_PORT, DropReason::NextHopUnresolved),
        (PROBE_PORT + 1, DropReason::NoBackend),
    ] {
        let frame = kernel_syn(port);
        let mut pkt = VecPacket::new(&frame);
        assert_eq!(
            steer_outbound(&mut pkt, &info(&frame), &st, &table),
            Outbound::Drop(reason)
        );
        let seen = table.seen(ProbeProto::Tcp, port);
        assert!(seen.not_sent && !seen.sent, "{reason:?}");
    }
    // A full-size packet with DF to the GRE backend: 24 bytes too many.
    table.register(ProbeProto::Udp, PROBE_PORT, GRE_BACKEND);
    let big = eth(
        &[],
        ETH_IPV4,
        &ipv4(
            v4("10.0.0.1"),
            v4(VIP4),
            UDP,
            DF,
            &udp(PROBE_PORT, 53, &[0; 1472]),
        ),
    );
    let mut pkt = VecPacket::new(&big);
    assert_eq!(
        steer_outbound(&mut pkt, &info(&big), &st, &table),
        Outbound::Drop(DropReason::MtuExceeded)
    );
    let seen = table.seen(ProbeProto::Udp, PROBE_PORT);
    assert!(seen.too_big && !seen.sent);
}

/// Answers to a probe socket are noted by source: the VIP (as a client's
/// answer), the backend's own address (it answers from the wrong one), or
/// another address; packets to other ports are not probes' answers.
#[test]
fn hc_9_answers_are_told_apart_by_their_source() {
    let st = state();
    let table = ProbeTable::new();
    let answer = |src: &str, dport: u16| {
        eth(
            &[],
            ETH_IPV4,
            &ipv4(
                v4(src),
                v4("10.0.0.1"),
                TCP,
                DF,
                &tcp(80, dport, SYN | ACK, b""),
            ),
        )
    };
    for (port, src, want) in [
        (
            PROBE_PORT,
            VIP4,
            Seen {
                answer_from_vip: true,
                ..Seen::default()
            },
        ),
        (
            PROBE_PORT + 1,
            "10.1.0.5",
            Seen {
                answer_from_backend: true,
                ..Seen::default()
            },
        ),
        (
            PROBE_PORT + 2,
            "192.0.2.99",
            Seen {
                answer_from_other: true,
                ..Seen::default()
            },
        ),
    ] {
        table.register(ProbeProto::Tcp, port, BackendId(0));
        note_inbound(&info(&answer(src, port)), &st, &table);
        assert_eq!(table.seen(ProbeProto::Tcp, port), want, "{src}");
    }
    note_inbound(&info(&answer(VIP4, PROBE_PORT + 3)), &st, &table);
    assert_eq!(table.seen(ProbeProto::Tcp, PROBE_PORT + 3), Seen::default());
}
