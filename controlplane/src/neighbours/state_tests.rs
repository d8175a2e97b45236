//! Kernel messages as bytes laid out per `linux/netlink.h`,
//! `linux/neighbour.h` and `linux/rtnetlink.h`, parsed and applied as the
//! resolver does.

use super::super::kernel::{parse, Incoming};
use super::*;

/// The route in the answer to request `seq`, as the lookup reads it.
fn route_answer(datagram: &[u8], seq: u32) -> Option<std::io::Result<Option<Route>>> {
    crate::rtnetlink::answer(datagram, seq).map(|a| {
        a.map(|m| match m {
            Some(RouteNetlinkMessage::NewRoute(r)) => Some(Route::from_message(&r)),
            _ => None,
        })
    })
}

const RTM_NEWROUTE: u16 = 24;
const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const AF_INET: u8 = 2;
const AF_BRIDGE: u8 = 7;
const AF_INET6: u8 = 10;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_MULTIPATH: u16 = 9;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_FAILED: u16 = 0x20;
const NUD_PERMANENT: u16 = 0x80;
/// The TAP's interface index in these messages.
const TAP: u32 = 7;

pub(crate) fn nlmsg(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize(a.len().next_multiple_of(4), 0);
    a
}

fn ip_bytes(a: IpAddr) -> (u8, Vec<u8>) {
    match a {
        IpAddr::V4(v4) => (AF_INET, v4.octets().to_vec()),
        IpAddr::V6(v6) => (AF_INET6, v6.octets().to_vec()),
    }
}

/// An `RTM_NEWNEIGH`/`RTM_DELNEIGH` as the kernel sends it: `struct
/// ndmsg`, NDA_DST, NDA_LLADDR.
pub(crate) fn neigh(kind: u16, dst: &str, mac: Option<[u8; 6]>, state: u16) -> Vec<u8> {
    let (family, dst) = ip_bytes(dst.parse().unwrap());
    neigh_of_family(kind, family, &dst, mac, state)
}

fn neigh_of_family(kind: u16, family: u8, dst: &[u8], mac: Option<[u8; 6]>, state: u16) -> Vec<u8> {
    let mut body = vec![family, 0, 0, 0];
    body.extend_from_slice(&TAP.to_ne_bytes());
    body.extend_from_slice(&state.to_ne_bytes());
    body.extend_from_slice(&[0, 1]); // flags, type RTN_UNICAST
    body.extend(attr(NDA_DST, dst));
    if let Some(mac) = mac {
        body.extend(attr(NDA_LLADDR, &mac));
    }
    nlmsg(kind, 0, &body)
}

/// An `RTM_NEWROUTE` answer to a route get: `struct rtmsg`, RTA_DST, then
/// `attrs`.
fn route_msg(seq: u32, dst: &str, attrs: &[Vec<u8>]) -> Vec<u8> {
    let (family, dst) = ip_bytes(dst.parse().unwrap());
    let mut body = vec![family, (dst.len() * 8) as u8, 0, 0, 254, 2, 0, 1];
    body.extend_from_slice(&0x200u32.to_ne_bytes()); // RTM_F_CLONED
    body.extend(attr(RTA_DST, &dst));
    for a in attrs {
        body.extend_from_slice(a);
    }
    nlmsg(RTM_NEWROUTE, seq, &body)
}

fn incoming(datagram: &[u8]) -> Vec<Incoming> {
    let mut out = Vec::new();
    parse(datagram, &mut out);
    out
}

fn apply_all(n: &mut Neighbours, datagram: &[u8]) -> Vec<Change> {
    incoming(datagram)
        .iter()
        .map(|m| match m {
            Incoming::Message(m) => n.apply(m),
            Incoming::DumpDone { .. } => Change::Nothing,
        })
        .collect()
}

fn taps() -> Vec<Option<String>> {
    vec![None, Some("sl-b".into())]
}

fn via_tap(gateway: Option<&str>) -> Route {
    Route {
        oif: Some(TAP),
        dev: Some("sl-b".into()),
        gateway: gateway.map(|g| g.parse().unwrap()),
    }
}

const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC2: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// AP-4: a neighbour's life, one event at a time: it appears REACHABLE,
/// its MAC changes, it goes STALE (usable, nudged), FAILED (unresolved,
/// the operator sees the state), and is deleted.
#[test]
fn ap_4_neighbour_events_drive_the_egress() {
    let backend: IpAddr = "10.0.0.9".parse().unwrap();
    let route = via_tap(None);
    let mut n = Neighbours::default();
    let egress = |n: &Neighbours| resolve(backend, Ok(&route), &taps(), n);

    let why = egress(&n).unwrap_err().1.to_string();
    assert_eq!(why, "next hop 10.0.0.9: no neighbour entry yet");

    let add = neigh(RTM_NEWNEIGH, "10.0.0.9", Some(MAC1), NUD_REACHABLE);
    assert_eq!(apply_all(&mut n, &add), [Change::Neighbour]);
    assert_eq!(apply_all(&mut n, &add), [Change::Nothing], "no change");
    let (e, fresh) = egress(&n).unwrap();
    assert_eq!((e.port, e.next_hop_mac, fresh), (1, Some(MAC1), true));

    let moved = neigh(RTM_NEWNEIGH, "10.0.0.9", Some(MAC2), NUD_PERMANENT);
    assert_eq!(apply_all(&mut n, &moved), [Change::Neighbour]);
    assert_eq!(egress(&n).unwrap().0.next_hop_mac, Some(MAC2));

    let stale = neigh(RTM_NEWNEIGH, "10.0.0.9", Some(MAC2), NUD_STALE);
    apply_all(&mut n, &stale);
    let (e, fresh) = egress(&n).unwrap();
    assert_eq!(e.next_hop_mac, Some(MAC2));
    assert!(!fresh, "STALE is usable but asks for a nudge");

    let failed = neigh(RTM_NEWNEIGH, "10.0.0.9", None, NUD_FAILED);
    apply_all(&mut n, &failed);
    let (e, why) = egress(&n).unwrap_err();
    assert_eq!((e.port, e.next_hop_mac), (1, None));
    assert_eq!(why.to_string(), "next hop 10.0.0.9: neighbour state FAILED");

    let del = neigh(RTM_DELNEIGH, "10.0.0.9", None, NUD_FAILED);
    assert_eq!(apply_all(&mut n, &del), [Change::Neighbour]);
    assert_eq!(apply_all(&mut n, &del), [Change::Nothing]);
    assert!(matches!(
        egress(&n).unwrap_err().1,
        Unresolved::NoNeighbour { .. }
    ));
}

/// Several messages in one datagram (a dump's batch), IPv6 among them; a
/// bridge's forwarding entries (also RTM_NEWNEIGH) are not neighbours.
#[test]
fn a_datagram_of_neighbours_and_a_dump_end() {
    let mut datagram = neigh(RTM_NEWNEIGH, "10.0.0.1", Some(MAC1), NUD_STALE);
    datagram.extend(neigh(
        RTM_NEWNEIGH,
        "2001:db8::1",
        Some(MAC2),
        NUD_REACHABLE,
    ));
    datagram.extend(neigh_of_family(
        RTM_NEWNEIGH,
        AF_BRIDGE,
        &[0; 4],
        Some(MAC1),
        NUD_PERMANENT,
    ));
    datagram.extend(nlmsg(NLMSG_DONE, 42, &0i32.to_ne_bytes()));
    let mut n = Neighbours::default();
    let changes = apply_all(&mut n, &datagram);
    assert_eq!(
        changes,
        [
            Change::Neighbour,
            Change::Neighbour,
            Change::Nothing,
            Change::Nothing
        ]
    );
    assert!(matches!(
        incoming(&datagram).last(),
        Some(Incoming::DumpDone { seq: 42 })
    ));
    let v6 = n.get(TAP, "2001:db8::1".parse().unwrap()).unwrap();
    assert_eq!(v6.usable_mac(), Some(MAC2));
    assert!(incoming(&datagram[..20]).is_empty(), "truncated: nothing");
}

/// Any route event makes every cached route lookup stale.
#[test]
fn a_route_event_invalidates_routes() {
    let mut n = Neighbours::default();
    let event = route_msg(0, "198.51.100.0", &[attr(RTA_OIF, &TAP.to_ne_bytes())]);
    assert_eq!(apply_all(&mut n, &event), [Change::Routes]);
}

/// Route get answers: directly connected (the backend is the next hop),
/// through a gateway, multipath (the first path), the kernel's refusal
/// (the operator reads its reason), and answers to other requests.
#[test]
fn route_answers_with_and_without_gateway() {
    let oif = attr(RTA_OIF, &TAP.to_ne_bytes());
    let direct = route_msg(5, "10.0.0.11", std::slice::from_ref(&oif));
    let r = route_answer(&direct, 5).unwrap().unwrap().unwrap();
    assert_eq!((r.oif, r.gateway), (Some(TAP), None));
    assert!(route_answer(&direct, 6).is_none(), "another request's");

    let gw = attr(RTA_GATEWAY, &[10, 0, 0, 1]);
    let via = route_msg(6, "10.9.0.1", &[gw.clone(), oif]);
    let r = route_answer(&via, 6).unwrap().unwrap().unwrap();
    assert_eq!(r.gateway, Some("10.0.0.1".parse().unwrap()));
    assert_eq!(r.oif, Some(TAP));

    // struct rtnexthop: len, flags, hops, ifindex; then its attributes.
    let mut paths = Vec::new();
    for (ifindex, gw) in [(TAP, [10, 0, 0, 1]), (8, [10, 0, 1, 1])] {
        let gw = attr(RTA_GATEWAY, &gw);
        paths.extend_from_slice(&((8 + gw.len()) as u16).to_ne_bytes());
        paths.extend_from_slice(&[0, 0]);
        paths.extend_from_slice(&ifindex.to_ne_bytes());
        paths.extend(gw);
    }
    let ecmp = route_msg(7, "10.9.0.1", &[attr(RTA_MULTIPATH, &paths)]);
    let r = route_answer(&ecmp, 7).unwrap().unwrap().unwrap();
    assert_eq!(
        (r.oif, r.gateway),
        (Some(TAP), Some("10.0.0.1".parse().unwrap()))
    );

    // struct nlmsgerr: -errno, then the request's header.
    let mut err = (-libc::ENETUNREACH).to_ne_bytes().to_vec();
    err.extend_from_slice(&[0; 16]);
    let refused = nlmsg(NLMSG_ERROR, 8, &err);
    let e = route_answer(&refused, 8).unwrap().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
    let failed = LookupError::Kernel {
        addr: "198.51.100.1".parse().unwrap(),
        source: e,
    };
    let (egress, why) = resolve(
        "198.51.100.1".parse().unwrap(),
        Err(&failed),
        &taps(),
        &Neighbours::default(),
    )
    .unwrap_err();
    assert_eq!(egress.next_hop_mac, None);
    assert!(
        why.to_string()
            .starts_with("no route: route get 198.51.100.1: Network is unreachable"),
        "{why}"
    );
}

#[test]
fn resolves_through_the_tap_and_the_gateway() {
    let mut n = Neighbours::default();
    apply_all(
        &mut n,
        &neigh(RTM_NEWNEIGH, "10.0.0.1", Some(MAC1), NUD_STALE),
    );
    let (egress, fresh) = resolve(
        "10.9.0.1".parse().unwrap(),
        Ok(&via_tap(Some("10.0.0.1"))),
        &taps(),
        &n,
    )
    .unwrap();
    assert_eq!((egress.port, egress.next_hop_mac), (1, Some(MAC1)));
    assert!(!fresh);
    // The gateway's entry on another interface is not this route's.
    let other = Route {
        oif: Some(TAP + 1),
        ..via_tap(Some("10.0.0.1"))
    };
    assert!(resolve("10.9.0.1".parse().unwrap(), Ok(&other), &taps(), &n).is_err());
}

#[test]
fn a_route_outside_the_taps_is_unresolved_and_says_why() {
    let route = Route {
        oif: Some(2),
        dev: Some("eth0".into()),
        gateway: None,
    };
    let (_, why) = resolve(
        "192.0.2.1".parse().unwrap(),
        Ok(&route),
        &taps(),
        &Neighbours::default(),
    )
    .unwrap_err();
    assert!(why.to_string().contains("via \"eth0\""), "{why}");
}
