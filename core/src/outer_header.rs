//! Prebuilt outer headers: for each backend reached over an IPv4 outer
//! header (GRE, IP-in-IP) or by layer-2 DSR, the bytes that precede an
//! inner IPv4 packet are built once per snapshot, so delivering a packet
//! is one copy and three patched fields (outer total length, DF, header
//! checksum) instead of assembling every header from the snapshot.
//!
//! Only the common case has a header here: an inner IPv4 packet that fits
//! the egress MTU. Everything else — inner IPv6, GUE, an IPv6 outer
//! header, oversize packets, an unresolved next hop — takes
//! [`crate::encap::encapsulate`], which writes the same bytes for every
//! packet this one accepts (property-tested in `tests/outer_header.rs`).

use std::net::IpAddr;

use crate::encap::OUTER_TTL;
use crate::packet::PacketBuf;
use crate::snapshot::{BackendId, BackendState, Encapsulation, ForwardingState, PortState};
use crate::wire::ethernet::{self, EthernetRepr, ETHERTYPE_IPV4};
use crate::wire::proto::{GRE, IPV4_IN_IP};
use crate::wire::{gre, ipv4, L3Layout};

/// Ethernet with an 802.1Q tag + IPv4 + GRE: the longest header built here.
const MAX_LEN: usize =
    ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN + ipv4::HEADER_LEN + gre::HEADER_LEN;
/// DF in the flags byte.
const DF_BIT: u8 = 0x40;

/// The bytes in front of an inner IPv4 packet for one backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OuterHeader {
    bytes: [u8; MAX_LEN],
    /// Bytes used: 14 (layer 2), 34 (IP-in-IP), 38 (GRE); 4 more each
    /// on a trunk port (the 802.1Q tag).
    len: u8,
    /// Bytes of the Ethernet header: 14, or 18 with the tag. The outer
    /// IPv4 header, if any, follows.
    l2_len: u8,
    /// Ones' complement sum of the outer IPv4 header with total length,
    /// flags and checksum zero (not yet folded).
    partial_sum: u32,
    /// Largest inner IP packet that leaves within the egress MTU.
    max_inner_len: u16,
    /// The egress port (config index).
    pub port: u16,
}

impl OuterHeader {
    /// The header for `backend` under `encap` out of `port`, or None when
    /// the general path must handle it.
    pub fn build(encap: Encapsulation, backend: &BackendState, port: &PortState) -> Option<Self> {
        let next_hop = backend.egress.next_hop_mac?;
        let mut bytes = [0u8; MAX_LEN];
        let eth = EthernetRepr {
            dst: next_hop,
            src: port.mac,
            vlan: port.vlan,
            ethertype: ETHERTYPE_IPV4,
        };
        eth.emit(&mut bytes).ok()?;
        let l2 = eth.header_len();
        let mtu = usize::from(port.mtu);
        let (protocol, tunnel_len) = match encap {
            Encapsulation::L2 => {
                return Some(Self {
                    bytes,
                    len: l2 as u8,
                    l2_len: l2 as u8,
                    partial_sum: 0,
                    max_inner_len: u16::try_from(mtu).unwrap_or(u16::MAX),
                    port: backend.egress.port,
                });
            }
            Encapsulation::Gre => (GRE, gre::HEADER_LEN),
            Encapsulation::Ipip => (IPV4_IN_IP, 0),
            Encapsulation::Gue { .. } => return None,
        };
        let (IpAddr::V4(dst), Some(src)) = (backend.address, port.ipv4) else {
            return None;
        };
        let ip = &mut bytes[l2..l2 + ipv4::HEADER_LEN];
        ip[0] = 0x45;
        ip[8] = OUTER_TTL;
        ip[9] = protocol;
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let partial_sum = ip
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        if tunnel_len > 0 {
            let at = l2 + ipv4::HEADER_LEN;
            bytes[at + 2..at + 4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        }
        let overhead = ipv4::HEADER_LEN + tunnel_len;
        Some(Self {
            bytes,
            len: (l2 + overhead) as u8,
            l2_len: l2 as u8,
            partial_sum,
            max_inner_len: u16::try_from(mtu.saturating_sub(overhead)).unwrap_or(u16::MAX),
            port: backend.egress.port,
        })
    }

    /// Rewrites `pkt` (whose IP packet is at `ip`) for the backend. False,
    /// with the packet untouched, when this header does not apply (inner
    /// IPv6, over the MTU, no headroom): the general path decides then.
    #[inline]
    pub fn apply<P: PacketBuf>(&self, pkt: &mut P, ip: &L3Layout) -> bool {
        if ip.ethertype != ETHERTYPE_IPV4 || ip.ip_len > usize::from(self.max_inner_len) {
            return false;
        }
        let len = usize::from(self.len);
        let ok = if len >= ip.l3_offset {
            pkt.prepend(len - ip.l3_offset)
        } else {
            pkt.trim_front(ip.l3_offset - len)
        };
        if !ok {
            return false;
        }
        pkt.truncate(len + ip.ip_len);
        let data = pkt.data_mut();
        // One fixed-size copy per header length. From here on nothing can
        // fail: the packet is now `len` + `ip_len` bytes long, at least as
        // long as the header (the false returns below are unreachable).
        let copied = match len {
            GRE_TAGGED_LEN => put::<GRE_TAGGED_LEN>(data, &self.bytes),
            GRE_LEN => put::<GRE_LEN>(data, &self.bytes),
            IPIP_LEN => put::<IPIP_LEN>(data, &self.bytes),
            L2_TAGGED_LEN => put::<L2_TAGGED_LEN>(data, &self.bytes),
            _ => put::<{ ethernet::HEADER_LEN }>(data, &self.bytes),
        };
        // Layer 2 has no outer IPv4 header to patch.
        let l2 = usize::from(self.l2_len);
        if len == l2 || !copied {
            return copied;
        }
        let Some(h) = data
            .get_mut(l2..)
            .and_then(|d| d.first_chunk_mut::<{ ipv4::HEADER_LEN }>())
        else {
            return false;
        };
        let total = (len - l2 + ip.ip_len) as u16;
        let flags = if ip.dont_fragment { DF_BIT } else { 0 };
        let mut sum = self.partial_sum + u32::from(total) + (u32::from(flags) << 8);
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        let [t0, t1] = total.to_be_bytes();
        let [c0, c1] = (!(sum as u16)).to_be_bytes();
        h[2] = t0;
        h[3] = t1;
        h[6] = flags;
        h[10] = c0;
        h[11] = c1;
        true
    }
}

/// The header lengths (a tagged IP-in-IP header is as long as an untagged
/// GRE one, and copied alike).
const GRE_TAGGED_LEN: usize = MAX_LEN;
const GRE_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + gre::HEADER_LEN;
const IPIP_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
const L2_TAGGED_LEN: usize = ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN;

/// Copies the first `N` bytes of `bytes` to the front of `data`.
#[inline(always)]
fn put<const N: usize>(data: &mut [u8], bytes: &[u8; MAX_LEN]) -> bool {
    match (data.first_chunk_mut::<N>(), bytes.first_chunk::<N>()) {
        (Some(out), Some(b)) => {
            *out = *b;
            true
        }
        _ => false,
    }
}

/// Every backend's [`OuterHeader`], indexed by [`BackendId::index`]; part of a
/// snapshot, built by [`OuterHeaders::build`] after the rest of it.
#[derive(Clone, Debug, Default)]
pub struct OuterHeaders(Vec<Option<OuterHeader>>);

impl OuterHeaders {
    /// The headers for `state`'s backends as they stand. A snapshot that is
    /// changed afterwards must be built again (the control plane builds
    /// every snapshot whole).
    pub fn build(state: &ForwardingState) -> Self {
        let header = |b: &BackendState| {
            let service = state.service(b.service)?;
            let port = state.ports.get(usize::from(b.egress.port))?;
            OuterHeader::build(service.encapsulation, b, port)
        };
        Self(
            state
                .backends
                .iter()
                .map(|b| b.as_ref().and_then(header))
                .collect(),
        )
    }

    #[inline]
    pub fn get(&self, id: BackendId) -> Option<&OuterHeader> {
        self.0.get(id.index()).and_then(Option::as_ref)
    }
}
