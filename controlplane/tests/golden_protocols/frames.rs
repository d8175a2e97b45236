//! Frame builders for `golden_protocols.rs`: Ethernet with tags from the
//! test client to the port, IPv4 (with header checksum) and IPv6 headers,
//! TCP/UDP with fixed contents. Checksums of L4 are left 0: the appliance
//! passes inner packets on untouched and never reads them.

// Shared by integration tests, each its own binary crate: `pub` here
// means "for the test files", never reachable from outside the test.
#![allow(unreachable_pub)]

use std::net::Ipv6Addr;

use super::{CLIENT_MAC, PORT_MAC};

pub fn eth(tags: &[u16], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = PORT_MAC.to_vec();
    f.extend_from_slice(&CLIENT_MAC);
    for (i, t) in tags.iter().enumerate() {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

pub fn ip4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    id: u16,
    flags_frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&flags_frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// IPv4 with options `opts` (a multiple of 4 bytes), DF clear.
pub fn ip4_with_options(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    id: u16,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let ihl = 20 + opts.len();
    let mut h = vec![0x40 | (ihl / 4) as u8, 0];
    h.extend_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&[0, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(opts);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

pub fn ip6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

pub fn tcp(sp: u16, dp: u16, len: usize) -> Vec<u8> {
    let mut t = sp.to_be_bytes().to_vec();
    t.extend_from_slice(&dp.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    t.resize(20 + len, 0x5a);
    t
}

pub fn udp(sp: u16, dp: u16, len: usize) -> Vec<u8> {
    let mut u = sp.to_be_bytes().to_vec();
    u.extend_from_slice(&dp.to_be_bytes());
    u.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.resize(8 + len, 0xa5);
    u
}

pub const DF: u16 = 0x4000;
pub const MF: u16 = 0x2000;
