//! Prebuilt outer headers: for each backend reached by layer-2 DSR or by a
//! tunnel over an outer IPv4 header, the bytes that precede an inner IPv4
//! packet are built once per snapshot, so delivering a packet is one
//! fixed-size copy and a few patched fields (outer total length, DF and
//! header checksum; a UDP tunnel's length and source port) instead of
//! assembling every header from the snapshot.
//!
//! The bytes are the general path's: [`OuterHeader::build`] runs
//! [`crate::encap::encapsulate`] on a probe packet and keeps what it wrote
//! in front of it, so a tunnel's header is defined once, by its
//! `encap::Tunnel`. They are stored right-aligned in a buffer as long as
//! the longest header (GENEVE from a trunk port): every header is written
//! by the same fixed-size copy of the whole buffer ending at the inner
//! packet, and the bytes in front of it, which land in the headroom, are
//! trimmed off. No tunnel-specific code and no per-length dispatch here.
//!
//! Only the common case has a header here: an inner IPv4 packet that fits
//! the egress MTU. Everything else — inner IPv6, an IPv6 outer header,
//! oversize packets, an unresolved next hop — takes
//! [`crate::encap::encapsulate`], which writes the same bytes for every
//! packet this one accepts (property-tested in `tests/outer_header.rs`).

use std::net::IpAddr;

use crate::encap::{self, udp_src_port, Carrier};
use crate::packet::{PacketBuf, VecPacket};
use crate::snapshot::{BackendId, BackendState, Encapsulation, ForwardingState, PortState};
use crate::wire::ethernet::{self, ETHERTYPE_IPV4};
use crate::wire::{ipv4, udp, L3Layout};

/// The longest header: Ethernet with an 802.1Q tag, IPv4 and the longest
/// tunnel's headers.
const MAX_LEN: usize =
    ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN + ipv4::HEADER_LEN + encap::MAX_TUNNEL_LEN;
/// DF in the flags byte.
const DF_BIT: u8 = 0x40;

/// Which fields [`OuterHeader::apply`] patches per packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Patch {
    /// Layer 2: none.
    Ethernet,
    /// The outer IPv4 header's total length, DF and checksum.
    Ipv4,
    /// Those, and the UDP header's source port and length.
    Ipv4Udp,
}

/// The bytes in front of an inner IPv4 packet for one backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OuterHeader {
    /// The header in the last `len` bytes.
    bytes: [u8; MAX_LEN],
    /// Bytes of the header: Ethernet (14, 18 with the 802.1Q tag), and
    /// for a tunnel the outer IPv4 header and the tunnel's headers.
    len: u8,
    /// Offset of the outer IPv4 header in `bytes` (tunnels only).
    ip_at: u8,
    patch: Patch,
    /// Ones' complement sum of the outer IPv4 header with total length,
    /// flags and checksum zero, folded to 16 bits.
    partial_sum: u16,
    /// Largest inner IP packet that leaves within the egress MTU.
    max_inner_len: u16,
    /// The egress port (config index).
    pub port: u16,
}

// One cache line per backend on the packet path.
const _: () = assert!(std::mem::size_of::<Option<OuterHeader>>() <= 64);

impl OuterHeader {
    /// The header for `backend` under `encap` out of `port`, or None when
    /// the general path must handle it.
    pub fn build(encap: Encapsulation, backend: &BackendState, port: &PortState) -> Option<Self> {
        if encap.is_tunnel() && !matches!((backend.address, port.ipv4), (IpAddr::V4(_), Some(_))) {
            return None;
        }
        // The general path's bytes in front of a bare IPv4 header.
        let mut frame = [0u8; ethernet::HEADER_LEN + ipv4::HEADER_LEN];
        frame[ethernet::HEADER_LEN] = 0x45;
        let probe_ip = L3Layout {
            ethertype: ETHERTYPE_IPV4,
            l3_offset: ethernet::HEADER_LEN,
            ip_len: ipv4::HEADER_LEN,
            dont_fragment: false,
        };
        let mut probe = VecPacket::with_headroom(&frame, MAX_LEN);
        encap::encapsulate(&mut probe, probe_ip, encap, backend, port, 0).ok()?;
        let header = probe.data().get(..probe.data().len() - ipv4::HEADER_LEN)?;
        let len = header.len();
        let at = MAX_LEN.checked_sub(len)?;
        let mut bytes = [0u8; MAX_LEN];
        bytes.get_mut(at..)?.copy_from_slice(header);
        let l2 = ethernet::HEADER_LEN + port.vlan.map_or(0, |_| ethernet::VLAN_TAG_LEN);
        let ip_at = at + l2;
        let mtu = usize::from(port.mtu);
        let mut out = Self {
            bytes,
            len: u8::try_from(len).ok()?,
            ip_at: u8::try_from(ip_at).ok()?,
            patch: Patch::Ethernet,
            partial_sum: 0,
            max_inner_len: u16::try_from(mtu.saturating_sub(len - l2)).unwrap_or(u16::MAX),
            port: backend.egress.port,
        };
        if !encap.is_tunnel() {
            return Some(out);
        }
        // Zero what varies per packet: total length, flags, checksum; a UDP
        // tunnel's source port and length (its checksum is 0 over IPv4).
        let h = out.bytes.get_mut(ip_at..ip_at + ipv4::HEADER_LEN)?;
        h[2..4].fill(0);
        h[6] = 0;
        h[10..12].fill(0);
        let sum: u32 = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        out.partial_sum = fold(sum);
        out.patch = Patch::Ipv4;
        if let Some(Carrier::Udp { .. }) = encap.carrier() {
            let at = ip_at + ipv4::HEADER_LEN;
            let u = out.bytes.get_mut(at..at + udp::HEADER_LEN)?;
            u[0..2].fill(0);
            u[4..6].fill(0);
            out.patch = Patch::Ipv4Udp;
        }
        Some(out)
    }

    /// Rewrites `pkt` (whose IP packet is at `ip`, of the flow `flow_hash`)
    /// for the backend. False, with the packet untouched, when this header
    /// does not apply (inner IPv6, over the MTU, no headroom): the general
    /// path decides then.
    #[inline]
    pub fn apply<P: PacketBuf>(&self, pkt: &mut P, ip: &L3Layout, flow_hash: u64) -> bool {
        if ip.ethertype != ETHERTYPE_IPV4
            || ip.ip_len > usize::from(self.max_inner_len)
            || ip.l3_offset > MAX_LEN
            || !pkt.prepend(MAX_LEN - ip.l3_offset)
        {
            return false;
        }
        // The packet now begins with MAX_LEN bytes before its IP header.
        let Some(front) = pkt.data_mut().first_chunk_mut::<MAX_LEN>() else {
            let _undone = pkt.trim_front(MAX_LEN - ip.l3_offset);
            return false;
        };
        *front = self.bytes;
        if self.patch != Patch::Ethernet {
            self.patch_fields(front, ip, flow_hash);
        }
        // Cannot fail: the packet holds at least MAX_LEN bytes.
        let len = usize::from(self.len);
        let _trimmed = pkt.trim_front(MAX_LEN - len);
        pkt.truncate(len + ip.ip_len);
        true
    }

    /// The outer IPv4 header's total length, DF and checksum, and a UDP
    /// tunnel's source port and length. `build` placed both headers inside
    /// the buffer, so the lookups below always succeed.
    #[inline(always)]
    fn patch_fields(&self, front: &mut [u8; MAX_LEN], ip: &L3Layout, flow_hash: u64) {
        let at = usize::from(self.ip_at);
        // The outer IPv4 header to the end of the buffer, then the inner
        // packet.
        let total = (MAX_LEN - at + ip.ip_len) as u16;
        let flags = if ip.dont_fragment { DF_BIT } else { 0 };
        let Some((h, rest)) = front
            .get_mut(at..)
            .and_then(|h| h.split_first_chunk_mut::<{ ipv4::HEADER_LEN }>())
        else {
            return;
        };
        let sum = u32::from(self.partial_sum) + u32::from(total) + (u32::from(flags) << 8);
        let [t0, t1] = total.to_be_bytes();
        let [c0, c1] = (!fold(sum)).to_be_bytes();
        h[2] = t0;
        h[3] = t1;
        h[6] = flags;
        h[10] = c0;
        h[11] = c1;
        if self.patch == Patch::Ipv4Udp {
            if let Some(u) = rest.first_chunk_mut::<{ udp::HEADER_LEN }>() {
                let [s0, s1] = udp_src_port(flow_hash).to_be_bytes();
                let [l0, l1] = (total - ipv4::HEADER_LEN as u16).to_be_bytes();
                u[0] = s0;
                u[1] = s1;
                u[4] = l0;
                u[5] = l1;
            }
        }
    }
}

/// Folds a ones' complement sum to 16 bits (end-around carry).
#[inline(always)]
fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
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
