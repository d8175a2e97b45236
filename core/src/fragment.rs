//! Fragmentation of oversize IPv4 packets without DF (AP-3).
//!
//! When a packet (encapsulated: its outer packet) would exceed the egress
//! MTU and the client's packet is IPv4 with DF clear, it leaves as IP
//! fragments instead of being dropped:
//!
//! - `l2` (DSR) has no outer header, so the client's IPv4 packet itself is
//!   fragmented, as a router would (RFC 791 §3.2): identification kept, the
//!   packet's own offset and MF carried on (a fragment may be fragmented
//!   again), every option in the first fragment and only the options with
//!   the copy flag in the others. TTL is left alone, as DSR leaves it.
//! - GRE, IP-in-IP and GUE in an outer IPv4 header: the outer packet is
//!   fragmented. Its DF is clear (encap copies DF from the inner packet,
//!   which has none), its identification comes from the worker's
//!   [`FragmentIds`].
//! - The same in an outer IPv6 header: the appliance is the source of the
//!   outer packet, so it fragments it with a Fragment extension header
//!   (RFC 8200 §4.5), identification again from [`FragmentIds`].
//!
//! - An IPv6 client packet of at most the IPv6 minimum MTU (1280 bytes) in
//!   a tunnel whose MTU is smaller: the outer packet is fragmented (RFC
//!   2473 §7.1 (a); RFC 4213 §3.2 for IPv6 in IPv4, outer DF clear). A
//!   Packet Too Big below 1280 would be ignored by the client (RFC 8200
//!   §5), which would then never get through.
//!
//! IPv4 with DF and larger IPv6 client packets are never fragmented: they
//! are answered with ICMP fragmentation-needed / packet-too-big (`icmp`;
//! for IPv6 with at least 1280, RFC 2473 §7.1 (b)).
//!
//! Sans-IO, in three steps. `prepare` (the pipeline's stage 2, cold path)
//! encapsulates without the MTU limit and readies the outer header; the
//! pipeline returns `Verdict::Fragment`. The worker asks [`plan`] how many
//! buffers the fragments take, allocates the extra ones from the mbuf pool
//! (all or none) and calls [`split`], which writes fragments 2..n into them
//! and cuts the original down to fragment 1. Nothing allocates or panics;
//! unit tests run the same functions over `VecPacket`s.
//!
//! Every fragment's IP packet is at most the MTU and, so that it fits a
//! fresh buffer, at most the buffer's room minus the Ethernet header;
//! fragment payloads other than the last are multiples of 8 bytes.

use crate::backend::BackendState;
use crate::drop_reason::DropReason;
use crate::encap;
use crate::encap::Encapsulation;
use crate::packet::PacketBuf;
use crate::port::PortState;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ipv4::{self, Ipv4Packet, FRAG_OFFSET_MASK};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::ipv6_ext::{Ipv6FragInfo, Ipv6FragmentHeader, FRAGMENT_HEADER_LEN};
use crate::wire::proto::IPV6_FRAGMENT;
use crate::wire::L3Layout;

/// Most fragments one packet may become (the first included). The
/// runtime's mbufs hold at most 9,408 bytes (data room sized for the
/// largest MTU, 9216), which become at most 19 fragments at the smallest
/// MTU (576, with 40 bytes of copied IPv4 options in each); the bound keeps
/// the worker's buffer array fixed. Beyond it: `mtu_exceeded`.
// Public for core/tests/fragment.rs.
pub const MAX_FRAGMENTS: usize = 64;

/// The Ethernet header in front of every fragment: the oversize
/// encapsulation always writes a plain, untagged one (on a trunk port the
/// worker pushes the 802.1Q tag onto each fragment, `crate::vlan`).
const L2_LEN: usize = ethernet::HEADER_LEN;
/// Highest IPv4 fragment offset, in 8-byte units (13 bits).
const IPV4_MAX_OFFSET: usize = FRAG_OFFSET_MASK as usize;
/// First fragment header of an IPv6 fragment: fixed header + Fragment.
const V6_HDR: usize = ipv6::HEADER_LEN + FRAGMENT_HEADER_LEN;

/// Identification values for the fragmented outer headers one worker
/// originates (RFC 6864 §4.1: unique per source, destination and protocol
/// while fragments may live). One counter per family, each starting at the
/// bit-reversed worker index (0, 0x8000, 0x4000, 0xc000, …): whatever the
/// number of workers, their sequences start as far apart as the ID space
/// allows, so workers sending to one backend do not reuse each other's
/// recent IDs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FragmentIds {
    v4: u16,
    v6: u32,
}

impl FragmentIds {
    pub fn for_worker(index: usize) -> Self {
        Self {
            v4: (index as u16).reverse_bits(),
            v6: (index as u32).reverse_bits(),
        }
    }

    fn next_v4(&mut self) -> u16 {
        let id = self.v4;
        self.v4 = id.wrapping_add(1);
        id
    }

    fn next_v6(&mut self) -> u32 {
        let id = self.v6;
        self.v6 = id.wrapping_add(1);
        id
    }
}

impl Default for FragmentIds {
    fn default() -> Self {
        Self::for_worker(0)
    }
}

/// The IPv6 minimum link MTU (RFC 8200 §5).
pub(crate) const IPV6_MIN_MTU: usize = 1280;

/// AP-3: whether an IP packet that does not fit the egress MTU with `encap`
/// leaves as fragments (else it is answered with ICMP): IPv4 without DF,
/// and an IPv6 packet of at most [`IPV6_MIN_MTU`] bytes in a tunnel, whose
/// outer packet is fragmented (RFC 2473 §7.1 (a)).
pub(crate) fn fragmentable(ip: &L3Layout, encap: Encapsulation) -> bool {
    if ip.ethertype == ETHERTYPE_IPV6 {
        !matches!(encap, Encapsulation::L2) && ip.ip_len <= IPV6_MIN_MTU
    } else {
        !ip.dont_fragment
    }
}

/// Stage 2's cold path for an oversize packet that is [`fragmentable`]
/// (the caller checked both): encapsulates it without the MTU limit and readies it for
/// [`split`]. An outer IPv4 header gets the worker's next identification;
/// an outer IPv6 header gets a Fragment header (offset 0, M clear until
/// [`split`] sets it) with the next 32-bit identification. With `l2` the
/// client's packet is only given its new Ethernet header. On error the
/// packet is as it came, like every dropped packet.
#[cold]
#[inline(never)]
pub(crate) fn prepare<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    encap: Encapsulation,
    backend: &BackendState,
    port: &PortState,
    flow_hash: u64,
    ids: &mut FragmentIds,
) -> Result<(), DropReason> {
    if matches!(encap, Encapsulation::L2) {
        return encap::encapsulate_oversize(pkt, ip, encap, backend, port, flow_hash);
    }
    if backend.address.is_ipv6() {
        // The Fragment header goes in after the encapsulation: make sure
        // the headroom holds both before writing anything. Probing with a
        // prepend and its undo touches no byte of the packet.
        let headers = L2_LEN + encap::overhead(encap, backend.address) + FRAGMENT_HEADER_LEN;
        let need = headers.saturating_sub(ip.l3_offset);
        if !pkt.prepend(need) {
            return Err(DropReason::NoHeadroom);
        }
        let _undone = pkt.trim_front(need);
    }
    encap::encapsulate_oversize(pkt, ip, encap, backend, port, flow_hash)?;
    match ethernet::ethertype_field(pkt.data()) {
        Some(ETHERTYPE_IPV4) => stamp_ipv4_ident(pkt.data_mut(), ids.next_v4()),
        Some(ETHERTYPE_IPV6) => insert_fragment_header(pkt, ids.next_v6()),
        _ => Err(DropReason::EncapUnsupported),
    }
}

/// Sets the identification of the (option-less) outer IPv4 header.
fn stamp_ipv4_ident(frame: &mut [u8], ident: u16) -> Result<(), DropReason> {
    let h = frame
        .get_mut(L2_LEN..)
        .and_then(|h| h.first_chunk_mut::<{ ipv4::HEADER_LEN }>())
        .ok_or(DropReason::NoHeadroom)?;
    let mut ip = Ipv4Packet::new_unchecked(h);
    ip.set_ident(ident);
    ip.fill_checksum();
    Ok(())
}

/// Moves the Ethernet and IPv6 headers 8 bytes to the front and writes a
/// Fragment header into the gap: the outer packet becomes an atomic
/// fragment of itself, the template [`split`] copies into every fragment.
fn insert_fragment_header<P: PacketBuf>(pkt: &mut P, ident: u32) -> Result<(), DropReason> {
    if !pkt.prepend(FRAGMENT_HEADER_LEN) {
        return Err(DropReason::NoHeadroom);
    }
    let front = pkt
        .data_mut()
        .first_chunk_mut::<{ L2_LEN + V6_HDR }>()
        .ok_or(DropReason::NoHeadroom)?;
    front.copy_within(FRAGMENT_HEADER_LEN.., 0);
    let (ip, frag) = front
        .get_mut(L2_LEN..)
        .and_then(|h| h.split_first_chunk_mut::<{ ipv6::HEADER_LEN }>())
        .ok_or(DropReason::NoHeadroom)?;
    let frag = frag
        .first_chunk_mut::<FRAGMENT_HEADER_LEN>()
        .ok_or(DropReason::NoHeadroom)?;
    let mut ip = Ipv6Packet::new_unchecked(ip);
    // No overflow: the outer packet is at most 65,535 bytes
    // (`encapsulate_oversize`), its payload 40 less.
    ip.set_payload_len(ip.payload_len().saturating_add(FRAGMENT_HEADER_LEN as u16));
    let next = ip.next_header();
    ip.set_next_header(IPV6_FRAGMENT);
    Ipv6FragInfo {
        offset: 0,
        more: false,
        ident,
        next,
    }
    .emit(frag);
    Ok(())
}

/// How a frame's IP packet splits: header sizes, payload per fragment and
/// the number of fragments. From [`plan`]; consumed by [`split`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    v6: bool,
    /// IP header bytes of the first fragment (IPv4 with all its options;
    /// IPv6 fixed header + Fragment header) and of the others (IPv4 with
    /// only the copied options).
    first_hdr: usize,
    later_hdr: usize,
    /// Fragmentable bytes in all, in the first fragment, and in each later
    /// one (the last takes what is left).
    payload: usize,
    first_chunk: usize,
    later_chunk: usize,
    count: usize,
}

impl Plan {
    /// Fragments in all, the original buffer (the first fragment) included.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Fresh buffers [`split`] needs: one per fragment after the first.
    pub fn extra(&self) -> usize {
        self.count.saturating_sub(1)
    }

    /// Payload offset and length of fragment `i` (1-based after the first).
    fn later_piece(&self, i: usize) -> (usize, usize) {
        let off = self.first_chunk + i.saturating_sub(1) * self.later_chunk;
        (off, self.later_chunk.min(self.payload.saturating_sub(off)))
    }
}

/// Plans the fragments of `frame` (Ethernet + an IPv4 packet without DF or
/// an IPv6 packet whose first extension header is the Fragment header that
/// `prepare` inserted) so that every fragment's IP packet is at most
/// `mtu` bytes and every fragment frame at most `room` bytes (what a fresh
/// buffer holds).
pub fn plan(frame: &[u8], mtu: u16, room: usize) -> Result<Plan, DropReason> {
    let limit = usize::from(mtu).min(room.saturating_sub(L2_LEN));
    let ip_bytes = frame.get(L2_LEN..).ok_or(DropReason::MtuExceeded)?;
    let (v6, first_hdr, later_hdr, payload, base) = match ethernet::ethertype_field(frame) {
        Some(ETHERTYPE_IPV4) => {
            let ip = Ipv4Packet::new_checked(ip_bytes).map_err(|_| DropReason::BadIpv4Header)?;
            if ip.dont_frag() {
                return Err(DropReason::MtuExceeded);
            }
            let later =
                ipv4::HEADER_LEN + copied_options(ip.options(), &mut [0; ipv4::MAX_OPTIONS_LEN])?;
            let base = usize::from(ip.frag_offset()) * 8;
            (false, ip.header_len(), later, ip.payload().len(), base)
        }
        Some(ETHERTYPE_IPV6) => {
            let ip = Ipv6Packet::new_checked(ip_bytes).map_err(|_| DropReason::BadIpv6Header)?;
            if ip.next_header() != IPV6_FRAGMENT {
                return Err(DropReason::MtuExceeded);
            }
            let payload = ip
                .payload()
                .len()
                .checked_sub(FRAGMENT_HEADER_LEN)
                .ok_or(DropReason::BadIpv6ExtensionHeader)?;
            (true, V6_HDR, V6_HDR, payload, 0)
        }
        _ => return Err(DropReason::MtuExceeded),
    };
    let first_chunk = limit.saturating_sub(first_hdr) & !7;
    let later_chunk = limit.saturating_sub(later_hdr) & !7;
    if first_chunk == 0 || later_chunk == 0 {
        return Err(DropReason::MtuExceeded);
    }
    let count = match payload.checked_sub(first_chunk) {
        None | Some(0) => 1,
        Some(rest) => 1 + rest.div_ceil(later_chunk),
    };
    if count > MAX_FRAGMENTS {
        return Err(DropReason::MtuExceeded);
    }
    // The last fragment's offset must fit the 13-bit field (an IPv4
    // fragment far into a datagram could overflow it when split again).
    let last_off = base + first_chunk + count.saturating_sub(2) * later_chunk;
    if count > 1 && last_off / 8 > IPV4_MAX_OFFSET {
        return Err(DropReason::BadIpv4Header);
    }
    Ok(Plan {
        v6,
        first_hdr,
        later_hdr,
        payload,
        first_chunk,
        later_chunk,
        count,
    })
}

/// The options of an IPv4 header that go into non-first fragments, padded
/// ([`ipv4::copied_options`]); a malformed option list is
/// `bad_ipv4_header`.
fn copied_options(opts: &[u8], out: &mut [u8; ipv4::MAX_OPTIONS_LEN]) -> Result<usize, DropReason> {
    ipv4::copied_options(opts, out).map_err(|_| DropReason::BadIpv4Header)
}

/// Splits the frame in `pkt` as `plan` (made by [`plan`] for this frame)
/// says: fragments 2..n are written into the buffers `extra` yields (their
/// contents replaced), in order, and `pkt` is cut down to fragment 1.
/// Fails, with `pkt` still whole, if `extra` runs out of buffers or one is
/// too small (`fragment_alloc_failed`).
pub fn split<'a, P: PacketBuf + 'a>(
    pkt: &mut P,
    plan: &Plan,
    extra: impl IntoIterator<Item = &'a mut P>,
) -> Result<(), DropReason> {
    let src = pkt.data();
    let (l2, rest) = src
        .split_first_chunk::<L2_LEN>()
        .ok_or(DropReason::MtuExceeded)?;
    let orig_hdr = rest.get(..plan.first_hdr).ok_or(DropReason::MtuExceeded)?;
    let payload = rest
        .get(plan.first_hdr..plan.first_hdr + plan.payload)
        .ok_or(DropReason::MtuExceeded)?;
    // The header of the later fragments, and the offset and MF of the
    // packet itself (non-zero for a fragment being fragmented again).
    let mut later = [0u8; ipv4::MAX_HEADER_LEN];
    let (base, more) = if plan.v6 {
        let h = orig_hdr
            .first_chunk::<V6_HDR>()
            .ok_or(DropReason::MtuExceeded)?;
        later[..V6_HDR].copy_from_slice(h);
        let f = Ipv6FragmentHeader::new_unchecked(&h[ipv6::HEADER_LEN..]);
        (usize::from(f.frag_offset()) * 8, f.more_frags())
    } else {
        let h = orig_hdr
            .first_chunk::<{ ipv4::HEADER_LEN }>()
            .ok_or(DropReason::MtuExceeded)?;
        let (fixed, opts) = later.split_at_mut(ipv4::HEADER_LEN);
        fixed.copy_from_slice(h);
        let mut copied = [0u8; ipv4::MAX_OPTIONS_LEN];
        let n = copied_options(orig_hdr.get(ipv4::HEADER_LEN..).unwrap_or(&[]), &mut copied)?;
        let (Some(to), Some(from)) = (opts.get_mut(..n), copied.get(..n)) else {
            return Err(DropReason::BadIpv4Header);
        };
        to.copy_from_slice(from);
        Ipv4Packet::new_unchecked(fixed).set_header_len(plan.later_hdr);
        let ip = Ipv4Packet::new_unchecked(h);
        (usize::from(ip.frag_offset()) * 8, ip.more_frags())
    };
    let later = later.get(..plan.later_hdr).ok_or(DropReason::MtuExceeded)?;

    let mut bufs = extra.into_iter();
    for i in 1..plan.count {
        let (off, len) = plan.later_piece(i);
        let buf = bufs.next().ok_or(DropReason::FragmentAllocFailed)?;
        buf.truncate(0);
        if !buf.append(L2_LEN + plan.later_hdr + len) {
            return Err(DropReason::FragmentAllocFailed);
        }
        let chunk = payload.get(off..off + len).ok_or(DropReason::MtuExceeded)?;
        let dst = buf.data_mut();
        let (d_l2, d_rest) = dst
            .split_first_chunk_mut::<L2_LEN>()
            .filter(|(_, r)| r.len() == plan.later_hdr + len)
            .ok_or(DropReason::FragmentAllocFailed)?;
        *d_l2 = *l2;
        // Exact lengths (checked above): neither copy can panic.
        let (d_hdr, d_payload) = d_rest.split_at_mut(plan.later_hdr);
        d_hdr.copy_from_slice(later);
        d_payload.copy_from_slice(chunk);
        let last = i + 1 == plan.count;
        set_fragment_fields(d_hdr, plan.v6, len, base + off, more || !last);
    }

    let first_len = plan.first_chunk.min(plan.payload);
    pkt.truncate(L2_LEN + plan.first_hdr + first_len);
    if let Some(h) = pkt.data_mut().get_mut(L2_LEN..L2_LEN + plan.first_hdr) {
        set_fragment_fields(h, plan.v6, first_len, base, more || plan.count > 1);
    }
    Ok(())
}

/// Writes length, offset and MF/M of one fragment's IP header `h` (IPv4
/// with its options, or IPv6 + Fragment header) carrying `len` payload
/// bytes at `offset`; IPv4's header checksum last.
fn set_fragment_fields(h: &mut [u8], v6: bool, len: usize, offset: usize, more: bool) {
    let units = (offset / 8) as u16;
    if v6 {
        let Some((ip, frag)) = h.split_first_chunk_mut::<{ ipv6::HEADER_LEN }>() else {
            return;
        };
        Ipv6Packet::new_unchecked(ip).set_payload_len((FRAGMENT_HEADER_LEN + len) as u16);
        let mut frag = Ipv6FragmentHeader::new_unchecked(frag);
        frag.set_frag_offset(units);
        frag.set_more_frags(more);
    } else {
        let total = (h.len() + len) as u16;
        let mut ip = Ipv4Packet::new_unchecked(h);
        ip.set_total_len(total);
        // Keep the reserved bit as it came; DF is clear (checked by plan).
        ip.set_dont_frag(false);
        ip.set_more_frags(more);
        ip.set_frag_offset(units);
        ip.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_start_apart_and_wrap() {
        let mut a = FragmentIds::for_worker(0);
        let mut b = FragmentIds::for_worker(1);
        assert_eq!((a.next_v4(), b.next_v4()), (0, 0x8000));
        assert_eq!((a.next_v6(), b.next_v6()), (0, 0x8000_0000));
        assert_eq!(FragmentIds::for_worker(3).next_v4(), 0xc000);
        let mut w = FragmentIds {
            v4: u16::MAX,
            v6: u32::MAX,
        };
        assert_eq!((w.next_v4(), w.next_v4()), (u16::MAX, 0));
        assert_eq!((w.next_v6(), w.next_v6()), (u32::MAX, 0));
    }

    /// RFC 791: only options with the copy flag go into later fragments;
    /// padded to 4 bytes; malformed lists are refused.
    #[test]
    fn copied_options_keep_the_flagged_ones() {
        let mut out = [0u8; 40];
        // NOP, Record Route (7, not copied, 7 bytes), Router Alert (148,
        // copied, 4 bytes), LSRR (131, copied, 7 bytes), EOL, padding.
        let opts = [
            1, 7, 7, 4, 0, 0, 0, 0, 148, 4, 0, 0, 131, 7, 4, 1, 2, 3, 4, 0, 0, 0, 0, 0,
        ];
        assert_eq!(copied_options(&opts, &mut out), Ok(12));
        assert_eq!(out[..12], [148, 4, 0, 0, 131, 7, 4, 1, 2, 3, 4, 0]);
        assert_eq!(copied_options(&[1, 1, 1, 1], &mut out), Ok(0));
        assert_eq!(copied_options(&[], &mut out), Ok(0));
        for bad in [&[7u8][..], &[7, 1, 0, 0], &[148, 9, 0, 0]] {
            assert_eq!(
                copied_options(bad, &mut out),
                Err(DropReason::BadIpv4Header),
                "{bad:?}"
            );
        }
    }
}
