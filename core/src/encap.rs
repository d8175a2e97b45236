//! Delivery to the backend (AP-3): layer-2 DSR, or GRE / IP-in-IP / GUE in
//! an outer IPv4 or IPv6 header (the backend's family; the inner family may
//! differ, FR-5). The inner IP packet is never modified (DSR: the backend
//! sees the client's source and the VIP as destination).
//!
//! A backend whose family the egress port has no address for yields
//! `EncapUnsupported`. An outer packet larger than the egress MTU yields
//! `MtuExceeded` with the packet untouched; the pipeline then answers with
//! ICMP (DF or IPv6, `icmp`) or encapsulates again without the limit and
//! fragments (IPv4 without DF, `fragment`), both off the common path.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::snapshot::{BackendState, Encapsulation, PortState};
use crate::wire::checksum;
use crate::wire::ethernet::{EthernetRepr, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::gre::{self, GreRepr};
use crate::wire::gue::{self, GueRepr};
use crate::wire::ipv4::{self, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Repr};
use crate::wire::proto::{GRE, IPV4_IN_IP, IPV6_IN_IP, UDP};
use crate::wire::udp::{self, UdpRepr};
use crate::wire::L3Layout;

/// TTL of outer headers: the tunnel spans at most a few routed hops.
pub const OUTER_TTL: u8 = 64;

/// Lowest GUE source port: the IANA dynamic range 49152–65535, whose 2^14
/// values are indexed by 14 bits of the flow hash.
pub const GUE_SRC_PORT_BASE: u16 = 49152;

/// The GUE source port of a flow: the flow hash's bits 32–45, so one flow
/// keeps one port (no reordering) while flows spread over receive queues.
pub fn gue_src_port(flow_hash: u64) -> u16 {
    GUE_SRC_PORT_BASE | (((flow_hash >> 32) as u16) & 0x3fff)
}

/// The tunnel header after the outer IPv4 header.
#[derive(Copy, Clone, Debug)]
enum Tunnel {
    Gre,
    Ipip,
    Gue { src_port: u16, dst_port: u16 },
}

impl Tunnel {
    fn header_len(self) -> usize {
        match self {
            Tunnel::Gre => gre::HEADER_LEN,
            Tunnel::Ipip => 0,
            Tunnel::Gue { .. } => udp::HEADER_LEN + gue::HEADER_LEN,
        }
    }

    fn outer_protocol(self, inner_v6: bool) -> u8 {
        match self {
            Tunnel::Gre => GRE,
            Tunnel::Gue { .. } => UDP,
            Tunnel::Ipip if inner_v6 => IPV6_IN_IP,
            Tunnel::Ipip => IPV4_IN_IP,
        }
    }
}

/// Rewrites the parsed frame `ip` in `pkt` for delivery to `backend` out of
/// `port` with `encap`. `flow_hash` feeds GUE's source port.
///
/// The packet is left untouched when an error is returned before any
/// header is written (all of them except, in theory, a buffer that shrank
/// between parse and encap).
pub fn encapsulate<P: PacketBuf>(
    pkt: &mut P,
    ip: impl Into<L3Layout>,
    encap: Encapsulation,
    backend: &BackendState,
    port: &PortState,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let limit = usize::from(port.mtu);
    let out = Egress {
        port,
        vlan: port.vlan,
        limit,
        to_fragment: false,
    };
    encapsulate_within(pkt, &ip.into(), encap, backend, out, flow_hash)
}

/// [`encapsulate`] with the IP length limit raised from the MTU to 65,535
/// bytes, for a packet about to be fragmented (AP-3: IPv4 without DF); a
/// packet beyond that is refused (`MtuExceeded`) before anything is
/// written, so every length field fits. The outer IPv4 header carries ID
/// 0 and DF clear (also around an IPv6 packet, which is only sent this way
/// when it is at most the IPv6 minimum MTU, RFC 4213 §3.2);
/// `fragment::prepare` sets the identification. The Ethernet header is
/// untagged whatever the port's VLAN: the fragments are cut behind a plain
/// header and the worker tags each one (`crate::vlan`).
pub(crate) fn encapsulate_oversize<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    encap: Encapsulation,
    backend: &BackendState,
    port: &PortState,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let out = Egress {
        port,
        vlan: None,
        limit: usize::from(u16::MAX),
        to_fragment: true,
    };
    encapsulate_within(pkt, ip, encap, backend, out, flow_hash)
}

/// How the encapsulated packet leaves: the port (MAC, addresses), the
/// 802.1Q tag of its Ethernet header, the longest IP packet allowed, and
/// whether it is about to be fragmented (then an outer IPv4 header gets DF
/// clear).
#[derive(Copy, Clone)]
struct Egress<'a> {
    port: &'a PortState,
    vlan: Option<u16>,
    limit: usize,
    to_fragment: bool,
}

/// The encapsulation, refusing (untouched) an IP packet that would leave
/// longer than `out.limit` bytes. Always inlined: [`encapsulate`] compiles
/// to what it was before fragmentation existed, the check one comparison.
#[inline(always)]
fn encapsulate_within<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    encap: Encapsulation,
    backend: &BackendState,
    out: Egress<'_>,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let Egress {
        port,
        vlan,
        limit,
        to_fragment,
    } = out;
    let next_hop = backend
        .egress
        .next_hop_mac
        .ok_or(DropReason::NextHopUnresolved)?;
    let tunnel = match encap {
        Encapsulation::L2 => None,
        Encapsulation::Gre => Some(Tunnel::Gre),
        Encapsulation::Ipip => Some(Tunnel::Ipip),
        Encapsulation::Gue { port } => Some(Tunnel::Gue {
            src_port: gue_src_port(flow_hash),
            dst_port: port,
        }),
    };
    let Some(tunnel) = tunnel else {
        return l2_dsr(pkt, ip, next_hop, out);
    };
    // FR-5: the outer family is the backend's; the inner one is whatever
    // the client sent (IPv4-in-IPv6 and IPv6-in-IPv4 included).
    let outer = match (backend.address, port.ipv4, port.ipv6) {
        (IpAddr::V4(dst), Some(src), _) => Outer::V4 { src, dst },
        (IpAddr::V6(dst), _, Some(src)) => Outer::V6 { src, dst },
        _ => return Err(DropReason::EncapUnsupported),
    };
    let inner_v6 = ip.ethertype == ETHERTYPE_IPV6;
    let tunnel_len = tunnel.header_len();
    let outer_ip_len = outer.header_len() + tunnel_len + ip.ip_len;
    if outer_ip_len > limit {
        return Err(DropReason::MtuExceeded);
    }
    let eth = EthernetRepr {
        dst: next_hop,
        src: port.mac,
        vlan,
        ethertype: outer.ethertype(),
    };
    let headers = eth.header_len() + outer.header_len() + tunnel_len;
    replace_l2(pkt, ip, headers)?;
    let buf = pkt.data_mut();
    eth.emit(buf).map_err(|_| DropReason::NoHeadroom)?;
    let rest = buf
        .get_mut(eth.header_len()..)
        .ok_or(DropReason::NoHeadroom)?;
    let rest = match outer {
        Outer::V4 { src, dst } => {
            let (h, rest) = rest
                .split_first_chunk_mut::<{ ipv4::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            // Copying DF keeps path-MTU discovery working end to end; IPv6
            // is never fragmented in flight, so its tunnel is not either,
            // unless it is fragmented here (RFC 4213 §3.2).
            let dont_frag = !to_fragment && (ip.dont_fragment || inner_v6);
            emit_outer_ipv4(h, src, dst, tunnel, ip, inner_v6, dont_frag)?;
            rest
        }
        Outer::V6 { src, dst } => {
            let (h, rest) = rest
                .split_first_chunk_mut::<{ ipv6::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            Ipv6Repr {
                src,
                dst,
                next_header: tunnel.outer_protocol(inner_v6),
                hop_limit: OUTER_TTL,
                flow_label: flow_label(flow_hash),
                payload_len: tunnel_len + ip.ip_len,
            }
            .emit(h)
            .map_err(|_| DropReason::MtuExceeded)?;
            rest
        }
    };
    match tunnel {
        Tunnel::Gre => {
            let (h, _) = rest
                .split_first_chunk_mut::<{ gre::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            GreRepr {
                protocol_type: ip.ethertype,
            }
            .emit(h);
        }
        Tunnel::Ipip => {}
        Tunnel::Gue { src_port, dst_port } => {
            let (u, rest) = rest
                .split_first_chunk_mut::<{ udp::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            let udp_repr = UdpRepr {
                src_port,
                dst_port,
                payload_len: gue::HEADER_LEN + ip.ip_len,
                checksum: 0,
            };
            udp_repr.emit(u).map_err(|_| DropReason::MtuExceeded)?;
            let (g, _) = rest
                .split_first_chunk_mut::<{ gue::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            let protocol = if inner_v6 { IPV6_IN_IP } else { IPV4_IN_IP };
            GueRepr { protocol }.emit(g);
            // Over IPv4 the UDP checksum stays 0 ("none", RFC 768): the
            // inner packet carries its own. Over IPv6 a zero checksum is
            // only allowed on tunnels both ends configured for it (RFC
            // 6935/6936), which backends are not required to be, so it is
            // computed: one pass over the packet, GUE-over-IPv6 only.
            if let Outer::V6 { src, dst } = outer {
                let c = udp_v6_checksum(src, dst, u, rest);
                udp::UdpRepr {
                    checksum: c,
                    ..udp_repr
                }
                .emit(u)
                .map_err(|_| DropReason::MtuExceeded)?;
            }
        }
    }
    Ok(())
}

/// The outer IP header: the backend's address family.
#[derive(Copy, Clone, Debug)]
enum Outer {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl Outer {
    fn header_len(self) -> usize {
        match self {
            Outer::V4 { .. } => ipv4::HEADER_LEN,
            Outer::V6 { .. } => ipv6::HEADER_LEN,
        }
    }

    fn ethertype(self) -> u16 {
        match self {
            Outer::V4 { .. } => ETHERTYPE_IPV4,
            Outer::V6 { .. } => ETHERTYPE_IPV6,
        }
    }
}

/// Bytes the encapsulation adds in front of the inner IP packet, counted
/// against the egress MTU (Ethernet excluded): what the path MTU
/// advertised to clients is reduced by.
pub fn overhead(encap: Encapsulation, backend: IpAddr) -> usize {
    let outer = match backend {
        IpAddr::V4(_) => ipv4::HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    };
    match encap {
        Encapsulation::L2 => 0,
        Encapsulation::Gre => outer + gre::HEADER_LEN,
        Encapsulation::Ipip => outer,
        Encapsulation::Gue { .. } => outer + udp::HEADER_LEN + gue::HEADER_LEN,
    }
}

/// The outer IPv6 flow label of a flow: 20 bits of the flow hash (bits
/// 44–63, apart from Maglev's low 32), stable per flow (RFC 6438).
pub fn flow_label(flow_hash: u64) -> u32 {
    (flow_hash >> 44) as u32 & 0x000f_ffff
}

/// The UDP checksum over IPv6 (RFC 8200 §8.1): pseudo-header, the UDP
/// header `udp` (checksum field 0) and the payload `rest`. 0 is sent as
/// 0xffff, since 0 means "no checksum".
fn udp_v6_checksum(src: Ipv6Addr, dst: Ipv6Addr, udp: &[u8; udp::HEADER_LEN], rest: &[u8]) -> u16 {
    let len = (udp::HEADER_LEN + rest.len()) as u32;
    let mut sum: u32 = 0;
    for a in [src.octets(), dst.octets()] {
        sum += u32::from(checksum::ones_complement_sum(&a));
    }
    sum += (len >> 16) + (len & 0xffff) + u32::from(UDP);
    // The UDP header is 8 bytes, so `rest` starts on an even offset and
    // the two partial sums combine without byte swapping.
    sum += u32::from(checksum::ones_complement_sum(udp));
    sum += u32::from(checksum::ones_complement_sum(rest));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

fn emit_outer_ipv4(
    hdr: &mut [u8; ipv4::HEADER_LEN],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    tunnel: Tunnel,
    ip: &L3Layout,
    inner_v6: bool,
    dont_frag: bool,
) -> Result<(), DropReason> {
    Ipv4Repr {
        src,
        dst,
        protocol: tunnel.outer_protocol(inner_v6),
        ttl: OUTER_TTL,
        // ID 0 is allowed with DF (RFC 6864); without DF a packet this
        // size fits the MTU and is never fragmented by us, and an oversize
        // one gets a per-worker ID from `fragment::prepare` (AP-3).
        ident: 0,
        dont_frag,
        payload_len: tunnel.header_len() + ip.ip_len,
    }
    .emit(hdr)
    .map_err(|_| DropReason::MtuExceeded)
}

/// Layer-2 DSR: an Ethernet header to the backend's next hop (VLAN tags of
/// the client side removed, the egress port's own tag added), the IP
/// packet byte for byte.
fn l2_dsr<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    next_hop: MacAddr,
    out: Egress<'_>,
) -> Result<(), DropReason> {
    if ip.ip_len > out.limit {
        return Err(DropReason::MtuExceeded);
    }
    let eth = EthernetRepr {
        dst: next_hop,
        src: out.port.mac,
        vlan: out.vlan,
        ethertype: ip.ethertype,
    };
    replace_l2(pkt, ip, eth.header_len())?;
    eth.emit(pkt.data_mut()).map_err(|_| DropReason::NoHeadroom)
}

/// Cuts Ethernet padding after the IP packet (inside a tunnel it would
/// become garbage after the inner packet) and makes the bytes before the IP
/// header exactly `headers` long, in a single prepend or trim so that a
/// failure leaves the front of the packet as it was.
///
/// The front is adjusted before the padding is cut: a failed prepend then
/// leaves the packet exactly as it was (found by the pipeline fuzz target).
fn replace_l2<P: PacketBuf>(pkt: &mut P, ip: &L3Layout, headers: usize) -> Result<(), DropReason> {
    let ok = if headers >= ip.l3_offset {
        pkt.prepend(headers - ip.l3_offset)
    } else {
        pkt.trim_front(ip.l3_offset - headers)
    };
    if !ok {
        return Err(DropReason::NoHeadroom);
    }
    pkt.truncate(headers + ip.ip_len);
    Ok(())
}
