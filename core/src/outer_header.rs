//! Prebuilt outer headers: for each backend reached by layer-2 DSR or by a
//! tunnel over an outer IPv4 header, the bytes that precede an inner IPv4
//! packet are built once per snapshot, so delivering a packet is two
//! fixed-size moves and a few patched fields (outer total length, DF and
//! header checksum; a UDP tunnel's length and source port) instead of
//! assembling every header from the snapshot.
//!
//! The bytes are the general path's: [`OuterHeader::build`] runs
//! [`crate::encap::encapsulate`] on a probe packet and keeps what it wrote
//! in front of it, so a tunnel's header is defined once, by its
//! `encap::Tunnel`, and nothing here depends on which tunnel it is. Every
//! header is 14 to 54 bytes long (GENEVE from a trunk port), and is copied
//! as memcpy copies small sizes: two N-byte moves, one from its start and
//! one ending at its end, overlapping in between, with N (8, 16 or 32) the
//! size class of its length.
//!
//! Only the common case has a header here: an inner IPv4 packet that fits
//! the egress MTU, in a tunnel of up to 16 bytes. Everything else — inner
//! IPv6, an IPv6 outer header, VXLAN's 30 bytes of tunnel headers,
//! oversize packets, an unresolved next hop — takes
//! [`crate::encap::encapsulate`], which writes the same bytes for every
//! packet this one accepts (property-tested in `tests/outer_header.rs`).

use std::net::IpAddr;

use crate::backend::BackendState;
use crate::encap::{self, udp_src_port, Carrier, Encapsulation};
use crate::packet::{PacketBuf, VecPacket};
use crate::port::PortState;
use crate::wire::checksum;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4};
use crate::wire::ipv4::{self, Ipv4Packet, FLAG_DF};
use crate::wire::udp::{self, UdpDatagram};
use crate::wire::L3Layout;

/// The longest tunnel headers prebuilt here: GENEVE's UDP and base header.
/// Longer ones (VXLAN's, with its inner Ethernet header) would take a
/// second cache line per backend; their packets take the general path.
const MAX_PREBUILT_TUNNEL_LEN: usize = 16;

/// The longest header: Ethernet with an 802.1Q tag, IPv4 and the longest
/// prebuilt tunnel headers.
const MAX_LEN: usize =
    ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN + ipv4::HEADER_LEN + MAX_PREBUILT_TUNNEL_LEN;

/// The largest outer IPv4 total length a prebuilt header takes: with DF
/// (0x4000) it stays a 16-bit number, so its checksum update folds once.
/// Far beyond any Ethernet MTU; a longer packet takes the general path.
const MAX_OUTER_TOTAL: usize = 0xffff - FLAG_DF as usize;

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
    /// The header in the first `len` bytes.
    bytes: [u8; MAX_LEN],
    /// Bytes of the header: Ethernet (14, 18 with the 802.1Q tag), and
    /// for a tunnel the outer IPv4 header and the tunnel's headers.
    len: u8,
    /// Bytes of the Ethernet header: 14, or 18 with the tag. The outer
    /// IPv4 header, if any, follows.
    l2_len: u8,
    patch: Patch,
    /// Ones' complement sum of the outer IPv4 header with total length,
    /// flags and checksum zero, folded to 16 bits.
    partial_sum: u16,
    /// Largest inner IP packet that leaves within the egress MTU (and
    /// within [`MAX_OUTER_TOTAL`]).
    max_inner_len: u16,
    /// The egress port (config index).
    pub(crate) port: u16,
}

// One cache line per backend on the packet path.
const _: () = assert!(std::mem::size_of::<Option<OuterHeader>>() <= 64);
// `put`'s largest class, two 32-byte moves, covers every header.
const _: () = assert!(MAX_LEN <= 2 * 32);

impl OuterHeader {
    /// The header for `backend` under `encap` out of `port`, or None when
    /// the general path must handle it.
    // Public for core/tests/outer_header.rs.
    pub fn build(encap: Encapsulation, backend: &BackendState, port: &PortState) -> Option<Self> {
        if encap.is_tunnel() && !matches!((backend.address, port.ipv4), (IpAddr::V4(_), Some(_))) {
            return None;
        }
        if encap.tunnel_len() > MAX_PREBUILT_TUNNEL_LEN {
            return None;
        }
        // The general path's bytes in front of a bare IPv4 header.
        let mut frame = [0u8; ethernet::HEADER_LEN + ipv4::HEADER_LEN];
        if let Some(h) = frame.last_chunk_mut::<{ ipv4::HEADER_LEN }>() {
            Ipv4Packet::new_unchecked(h).set_header_len(ipv4::HEADER_LEN);
        }
        let probe_ip = L3Layout::ipv4(ethernet::HEADER_LEN, ipv4::HEADER_LEN, false);
        let mut probe = VecPacket::with_headroom(&frame, MAX_LEN);
        encap::encapsulate(&mut probe, probe_ip, encap, backend, port, 0).ok()?;
        let len = probe.data().len().checked_sub(ipv4::HEADER_LEN)?;
        let mut bytes = [0u8; MAX_LEN];
        bytes
            .get_mut(..len)?
            .copy_from_slice(probe.data().get(..len)?);
        let l2 = ethernet::HEADER_LEN + port.vlan.map_or(0, |_| ethernet::VLAN_TAG_LEN);
        let mtu = usize::from(port.mtu);
        let mut out = Self {
            bytes,
            len: u8::try_from(len).ok()?,
            l2_len: u8::try_from(l2).ok()?,
            patch: Patch::Ethernet,
            partial_sum: 0,
            max_inner_len: u16::try_from(mtu.min(MAX_OUTER_TOTAL).saturating_sub(len - l2))
                .unwrap_or(u16::MAX),
            port: backend.egress.port,
        };
        if !encap.is_tunnel() {
            return Some(out);
        }
        // Zero what varies per packet: total length, flags, checksum; a UDP
        // tunnel's source port and length (its checksum is 0 over IPv4).
        let mut outer = Ipv4Packet::new_unchecked(out.bytes.get_mut(l2..l2 + ipv4::HEADER_LEN)?);
        outer.set_total_len(0);
        outer.set_flags_frag(0);
        outer.set_checksum(0);
        out.partial_sum = checksum::ones_complement_sum(outer.header_bytes());
        out.patch = Patch::Ipv4;
        if let Some(Carrier::Udp { .. }) = encap.carrier() {
            let at = l2 + ipv4::HEADER_LEN;
            let mut u = UdpDatagram::new_unchecked(out.bytes.get_mut(at..at + udp::HEADER_LEN)?);
            u.set_src_port(0);
            u.set_len(0);
            out.patch = Patch::Ipv4Udp;
        }
        Some(out)
    }

    /// Whether [`OuterHeader::apply`] reads its flow hash (a UDP tunnel's
    /// source port): the established lane computes it only then.
    #[inline(always)]
    pub(crate) fn takes_flow_hash(&self) -> bool {
        self.patch == Patch::Ipv4Udp
    }

    /// Rewrites `pkt` (whose IP packet is at `ip`, of the flow `flow_hash`)
    /// for the backend. False, with the packet untouched, when this header
    /// does not apply (inner IPv6, over the MTU, no headroom): the general
    /// path decides then.
    // Public for core/tests/outer_header.rs.
    #[inline(always)]
    pub fn apply<P: PacketBuf>(&self, pkt: &mut P, ip: &L3Layout, flow_hash: u64) -> bool {
        if ip.ethertype != ETHERTYPE_IPV4 || ip.ip_len > usize::from(self.max_inner_len) {
            return false;
        }
        let len = usize::from(self.len);
        let Some(data) = pkt.reframe(ip.l3_offset, len, ip.ip_len) else {
            return false;
        };
        // From here on nothing can fail: the packet is `len` + `ip_len`
        // bytes long, and `len` is at least 14 (an Ethernet header).
        let copied = match len {
            32.. => put::<32>(data, &self.bytes, len),
            16.. => put::<16>(data, &self.bytes, len),
            _ => put::<8>(data, &self.bytes, len),
        };
        if copied && self.patch != Patch::Ethernet {
            self.patch_fields(data, ip, flow_hash);
        }
        copied
    }

    /// The outer IPv4 header's total length, DF and checksum, and a UDP
    /// tunnel's source port and length, in the header at the front of
    /// `data`. `build` placed both headers inside it, so the lookups below
    /// always succeed.
    #[inline(always)]
    fn patch_fields(&self, data: &mut [u8], ip: &L3Layout, flow_hash: u64) {
        let at = usize::from(self.l2_len);
        // The outer IPv4 header to the end of the header, then the inner
        // packet.
        let total = (usize::from(self.len) - at + ip.ip_len) as u16;
        let flags_frag = if ip.dont_fragment { FLAG_DF } else { 0 };
        let Some((h, rest)) = data
            .get_mut(at..)
            .and_then(|h| h.split_first_chunk_mut::<{ ipv4::HEADER_LEN }>())
        else {
            return;
        };
        // The header's sum is the prebuilt part's plus the two words that
        // vary (their bytes were zero when it was taken). Those two add up
        // to at most 0xffff (`MAX_OUTER_TOTAL`), so one fold of the sum of
        // two 16-bit numbers is exact.
        let varying = total + flags_frag;
        let sum = u32::from(self.partial_sum) + u32::from(varying);
        let mut outer = Ipv4Packet::new_unchecked(h);
        outer.set_total_len(total);
        outer.set_flags_frag(flags_frag);
        outer.set_checksum(!checksum::fold_once(sum));
        if self.patch == Patch::Ipv4Udp {
            if let Some(u) = rest.first_chunk_mut::<{ udp::HEADER_LEN }>() {
                let mut udp = UdpDatagram::new_unchecked(u);
                udp.set_src_port(udp_src_port(flow_hash));
                udp.set_len(total - ipv4::HEADER_LEN as u16);
            }
        }
    }
}

/// Copies the header, the first `len` bytes of `bytes` (N ≤ `len` ≤ 2N),
/// to the front of `data` as two N-byte copies, one from its start and one
/// ending at its end, overlapping in between: two fixed-size moves for any
/// length in the class, whatever the tunnel.
#[inline(always)]
fn put<const N: usize>(data: &mut [u8], bytes: &[u8; MAX_LEN], len: usize) -> bool {
    let tail_at = len.wrapping_sub(N);
    let (Some(head), Some(tail)) = (
        bytes.first_chunk::<N>(),
        bytes.get(tail_at..).and_then(|b| b.first_chunk::<N>()),
    ) else {
        return false;
    };
    let Some(out) = data.get_mut(..len) else {
        return false;
    };
    if let Some(o) = out.first_chunk_mut::<N>() {
        *o = *head;
    }
    if let Some(o) = out.last_chunk_mut::<N>() {
        *o = *tail;
    }
    true
}
