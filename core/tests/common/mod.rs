//! Small packet builders shared by the integration tests. Independent of
//! the crate's emitters on purpose, so a bug there cannot cancel out.
// Shared by integration tests, each its own binary crate: `pub` here
// means "for the test files", never reachable from outside the test.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x01];
pub const PORT_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x01];
pub const NEXT_HOP_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x01];

pub const DF: u16 = 0x4000;
pub const MF: u16 = 0x2000;

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

pub fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// RFC 1071, written out independently of `wire::checksum`.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in data.chunks(2) {
        let hi = u32::from(pair[0]) << 8;
        let lo = pair.get(1).map_or(0, |b| u32::from(*b));
        sum += hi | lo;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet frame from CLIENT_MAC to PORT_MAC with VLAN tags (`tpids`, outer
/// first, VIDs 10, 11, …).
pub fn eth(tpids: &[u16], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&PORT_MAC);
    f.extend_from_slice(&CLIENT_MAC);
    for (i, tpid) in tpids.iter().enumerate() {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(10 + i as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// IPv4 with a correct header checksum; `flags_frag` is the 16-bit
/// flags + fragment offset field (DF, MF | offset in 8-byte units).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, flags_frag: u16, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0xbe, 0xef]);
    p.extend_from_slice(&flags_frag.to_be_bytes());
    p.extend_from_slice(&[61, proto, 0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let c = inet_checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// IPv6 whose first next header is `next`; `payload` holds any extension
/// headers and the upper layer.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[next, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// IPv6 Fragment header (offset in 8-byte units).
pub fn frag6(next: u8, offset: u16, more: bool, ident: u32) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
    h.extend_from_slice(&ident.to_be_bytes());
    h
}

/// An 8-byte options header (hop-by-hop, destination options, routing).
pub fn opts6(next: u8) -> Vec<u8> {
    vec![next, 0, 1, 4, 0, 0, 0, 0]
}

pub fn tcp(sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0x20, 0, 0, 0, 0, 0]);
    s.extend_from_slice(payload);
    s
}

pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&sport.to_be_bytes());
    d.extend_from_slice(&dport.to_be_bytes());
    d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    d
}

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;
pub const ESP: u8 = 50;
pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_IPV6: u16 = 0x86dd;
pub const ETH_ARP: u16 = 0x0806;
pub const VLAN: u16 = 0x8100;
pub const QINQ: u16 = 0x88a8;
pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;

pub mod state;
