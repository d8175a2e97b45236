//! ICMP error generation (AP-3): when encapsulation would push a packet
//! over the egress MTU and the packet may not be fragmented (IPv4 with DF,
//! or IPv6 larger than 1280 bytes or without a tunnel), the client is
//! answered with ICMP fragmentation-needed / ICMPv6 packet-too-big carrying
//! the MTU it must use, so path-MTU discovery shrinks its packets by the
//! tunnel overhead — for IPv6 never below 1280, which hosts would ignore
//! (RFC 2473 §7.1 (b)).
//!
//! The reply is written over the offending packet in place (no second
//! buffer): its own Ethernet header with the MACs swapped (VLAN tags kept,
//! so it leaves on the client's segment and VLAN), a new IP header from the
//! VIP to the client (the address the client's flow state knows), the ICMP
//! header and the start of the offending packet as the quote. The worker
//! sends it back out the receive port ([`Verdict::Reply`]).
//!
//! This is the cold path: it re-reads the packet instead of widening what
//! stage 1 carries for every packet. Replies are rate-limited per worker
//! ([`TokenBucket`]) so a flood of oversize packets cannot turn the
//! appliance into an ICMP amplifier.

use std::net::{IpAddr, Ipv6Addr};

use crate::drop_reason::DropReason;
use crate::encap::{self, Encapsulation};
use crate::fragment;
use crate::ids::BackendId;
use crate::packet::PacketBuf;
use crate::snapshot::ForwardingState;
use crate::stage::{Balance, Verdict};
use crate::time::Millis;
use crate::wire::ethernet::{self, ETHERTYPE_IPV6};
use crate::wire::icmp::{self as icmp_wire, IcmpPacket};
use crate::wire::icmp::{V4_CODE_FRAG_NEEDED, V4_DEST_UNREACHABLE, V4_PARAMETER_PROBLEM};
use crate::wire::icmp::{V4_REDIRECT, V6_FIRST_INFORMATIONAL, V6_PACKET_TOO_BIG};
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::wire::proto::{ICMP, ICMPV6};
use crate::wire::L3Layout;

/// Replies per second a worker may send, and the burst it may send at once.
pub(crate) const REPLIES_PER_SEC: u64 = 1000;
pub(crate) const REPLY_BURST: u64 = 100;

/// Largest reply: RFC 1812 §4.3.2.3 (IPv4, 576 bytes) and RFC 4443 §2.4
/// (IPv6, the minimum MTU of 1280).
const V4_REPLY_MAX: usize = 576;
const V6_REPLY_MAX: usize = 1280;
/// Longest L2 header the pipeline accepts: Ethernet + two VLAN tags.
const MAX_L2: usize = ethernet::HEADER_LEN + ethernet::MAX_VLAN_TAGS * ethernet::VLAN_TAG_LEN;
const TTL: u8 = 64;

/// A per-worker token bucket (single owner, no atomics).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    tokens: u64,
    last: Millis,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self {
            tokens: REPLY_BURST,
            last: Millis(0),
        }
    }
}

impl TokenBucket {
    /// Takes one token if there is one, refilling at [`REPLIES_PER_SEC`].
    pub(crate) fn take(&mut self, now: Millis) -> bool {
        let elapsed = now.0.saturating_sub(self.last.0);
        let refill = elapsed.saturating_mul(REPLIES_PER_SEC) / 1000;
        if refill > 0 {
            self.tokens = self.tokens.saturating_add(refill).min(REPLY_BURST);
            self.last = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// Called by stage 2 when the packet is too big for the path to
/// `backend`, the backend it was delivered to, and may not be fragmented:
/// answers the client with that path's MTU ([`path_mtu`]), within the
/// worker's reply budget `bucket`.
#[cold]
#[inline(never)]
pub(crate) fn answer_mtu_exceeded<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    backend: BackendId,
    state: &ForwardingState,
    bucket: &mut TokenBucket,
    now: Millis,
) -> Verdict {
    let mtu = state.backend(backend).and_then(|backend| {
        let service = state.service(b.service)?;
        let port = state.ports.get(usize::from(backend.egress.port))?;
        let inner_v6 = b.layout.ethertype == ETHERTYPE_IPV6;
        Some(path_mtu(
            port.mtu,
            service.encapsulation,
            backend.address,
            inner_v6,
        ))
    });
    match mtu {
        Some(mtu) => too_big(pkt, &b.layout, mtu, bucket, now),
        None => Verdict::Drop(DropReason::MtuExceeded),
    }
}

/// AP-3: the MTU a client is told for the path to a backend at `backend`
/// out of a port of `port_mtu` with `encap`: the port's MTU less the
/// encapsulation's overhead, and for an IPv6 client never below the IPv6
/// minimum, which it would ignore (RFC 2473 §7.1 (b); packets up to it
/// are fragmented in the tunnel instead).
fn path_mtu(port_mtu: u16, encap: Encapsulation, backend: IpAddr, inner_v6: bool) -> u16 {
    let mtu = port_mtu.saturating_sub(encap::overhead(encap, backend) as u16);
    if inner_v6 {
        mtu.max(fragment::IPV6_MIN_MTU as u16)
    } else {
        mtu
    }
}

/// Rewrites `pkt` (whose IP packet `l` is too big for a path of `mtu`
/// bytes) into the ICMP error for its sender, or names why not.
pub(crate) fn too_big<P: PacketBuf>(
    pkt: &mut P,
    l: &L3Layout,
    mtu: u16,
    bucket: &mut TokenBucket,
    now: Millis,
) -> Verdict {
    match rewrite(pkt, l, mtu, bucket, now) {
        Ok(()) => Verdict::Reply,
        Err(r) => Verdict::Drop(r),
    }
}

/// Source and destination of the packet, when an error may be sent about
/// it.
fn addresses(ip: &[u8], v6: bool) -> Option<(IpAddr, IpAddr)> {
    if v6 {
        let h = Ipv6Packet::new_unchecked(ip.first_chunk::<{ ipv6::HEADER_LEN }>()?);
        let src = h.src_addr();
        // RFC 4443 §2.4 (e): never about ICMPv6 errors (types < 128).
        // Only a header-less ICMPv6 is recognised; that is the usual case.
        let icmp_error = h.next_header() == ICMPV6
            && ip
                .get(ipv6::HEADER_LEN)
                .is_some_and(|t| *t < V6_FIRST_INFORMATIONAL);
        let bad_src = src.is_unspecified() || src.is_multicast();
        (!icmp_error && !bad_src).then_some((IpAddr::V6(src), IpAddr::V6(h.dst_addr())))
    } else {
        let h = Ipv4Packet::new_unchecked(ip.first_chunk::<{ ipv4::HEADER_LEN }>()?);
        let src = h.src_addr();
        // RFC 1122 §3.2.2: not about ICMP errors, non-first fragments,
        // broadcast, multicast or unspecified sources.
        let icmp_error = h.protocol() == ICMP
            && ip.get(h.header_len()).is_some_and(|t| {
                icmp_wire::is_steered_error(ICMP, *t)
                    || *t == V4_PARAMETER_PROBLEM
                    || *t == V4_REDIRECT
            });
        let later_fragment = h.frag_offset() != 0;
        let bad_src = src.is_unspecified() || src.is_multicast() || src.is_broadcast();
        (!icmp_error && !later_fragment && !bad_src)
            .then_some((IpAddr::V4(src), IpAddr::V4(h.dst_addr())))
    }
}

fn rewrite<P: PacketBuf>(
    pkt: &mut P,
    l: &L3Layout,
    mtu: u16,
    bucket: &mut TokenBucket,
    now: Millis,
) -> Result<(), DropReason> {
    let v6 = l.ethertype == ETHERTYPE_IPV6;
    if !v6 && !l.dont_fragment {
        // IPv4 without DF is fragmented instead (`fragment`); stage 2 never
        // sends it here. Kept so that no caller can answer it with ICMP.
        return Err(DropReason::MtuExceeded);
    }
    let data = pkt.data();
    let ip = data
        .get(l.l3_offset..l.l3_offset + l.ip_len)
        .ok_or(DropReason::MtuExceeded)?;
    let (client, vip) = addresses(ip, v6).ok_or(DropReason::IcmpNotAllowed)?;
    if l.l3_offset > MAX_L2 || l.l3_offset < ethernet::HEADER_LEN {
        return Err(DropReason::IcmpNotAllowed);
    }
    if !bucket.take(now) {
        return Err(DropReason::IcmpRateLimited);
    }
    let mut l2 = [0u8; MAX_L2];
    l2[..l.l3_offset].copy_from_slice(&data[..l.l3_offset]);
    // Back to the sender: its MAC becomes the destination, ours the source.
    ethernet::swap_addresses(&mut l2);

    let (ip_hdr, max) = if v6 {
        (ipv6::HEADER_LEN, V6_REPLY_MAX)
    } else {
        (ipv4::HEADER_LEN, V4_REPLY_MAX)
    };
    let added = ip_hdr + icmp_wire::HEADER_LEN;
    let quote = l.ip_len.min(max - added);
    // Prepend first: if it fails the packet is still untouched.
    if !pkt.prepend(added) {
        return Err(DropReason::NoHeadroom);
    }
    pkt.truncate(added + l.l3_offset + quote);
    let buf = pkt.data_mut();
    let (front, rest) = buf.split_at_mut(l.l3_offset.min(buf.len()));
    front.copy_from_slice(&l2[..front.len()]);
    let icmp_len = icmp_wire::HEADER_LEN + quote;
    match (client, vip) {
        (IpAddr::V4(c), IpAddr::V4(v)) => {
            let (h, msg) = rest
                .split_first_chunk_mut::<{ ipv4::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            Ipv4Repr {
                src: v,
                dst: c,
                protocol: ICMP,
                ttl: TTL,
                ident: 0,
                dont_frag: false,
                payload_len: icmp_len,
            }
            .emit(h)
            .map_err(|_| DropReason::MtuExceeded)?;
            write_frag_needed(msg, mtu)
        }
        (IpAddr::V6(c), IpAddr::V6(v)) => {
            let (h, msg) = rest
                .split_first_chunk_mut::<{ ipv6::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            Ipv6Repr {
                src: v,
                dst: c,
                next_header: ICMPV6,
                hop_limit: TTL,
                flow_label: 0,
                payload_len: icmp_len,
            }
            .emit(h)
            .map_err(|_| DropReason::MtuExceeded)?;
            write_packet_too_big(msg, mtu, &v, &c)
        }
        _ => Err(DropReason::IcmpNotAllowed),
    }
}

/// The ICMP header of fragmentation-needed (RFC 1191 §4) in front of the
/// quote already in `msg`, and its checksum.
fn write_frag_needed(msg: &mut [u8], mtu: u16) -> Result<(), DropReason> {
    let mut icmp = IcmpPacket::new_checked(msg).map_err(|_| DropReason::NoHeadroom)?;
    icmp.set_msg_type(V4_DEST_UNREACHABLE);
    icmp.set_code(V4_CODE_FRAG_NEEDED);
    icmp.set_rest_of_header(0);
    icmp.set_next_hop_mtu(mtu);
    icmp.fill_checksum_v4();
    Ok(())
}

/// The ICMPv6 header of packet-too-big (RFC 4443 §3.2) in front of the
/// quote already in `msg`, and its checksum from `vip` to `client`.
fn write_packet_too_big(
    msg: &mut [u8],
    mtu: u16,
    vip: &Ipv6Addr,
    client: &Ipv6Addr,
) -> Result<(), DropReason> {
    let mut icmp = IcmpPacket::new_checked(msg).map_err(|_| DropReason::NoHeadroom)?;
    icmp.set_msg_type(V6_PACKET_TOO_BIG);
    icmp.set_code(0);
    icmp.set_mtu(u32::from(mtu));
    icmp.fill_checksum_v6(vip, client);
    Ok(())
}
