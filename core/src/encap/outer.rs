//! What every tunnel shares: the Ethernet header to the next hop, the
//! outer IPv4 or IPv6 header and, for a UDP carrier, the UDP header,
//! around the tunnel's own header ([`Tunnel::emit`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::l2::{replace_l2, Egress};
use super::tunnel::{Carrier, Tunnel};
use super::udp;
use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::wire::ethernet::{EthernetRepr, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ipv4::{self, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Repr};
use crate::wire::L3Layout;

/// TTL of outer headers: the tunnel spans at most a few routed hops.
pub(crate) const OUTER_TTL: u8 = 64;

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

/// Encapsulates the IP packet `ip` in tunnel `t` to `backend` (compiled
/// once per tunnel type). Never inlined: four copies in the stage-2 loop
/// would crowd the prebuilt-header path's registers (callgrind: +11
/// instructions per packet on it), and a call is small next to building
/// the headers.
#[inline(never)]
pub(super) fn tunnel<P: PacketBuf, T: Tunnel>(
    pkt: &mut P,
    ip: &L3Layout,
    t: T,
    backend: IpAddr,
    next_hop: MacAddr,
    out: Egress<'_>,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let Egress {
        port,
        vlan,
        limit,
        to_fragment,
    } = out;
    // FR-5: the outer family is the backend's; the inner one is whatever
    // the client sent (IPv4-in-IPv6 and IPv6-in-IPv4 included).
    let outer = match (backend, port.ipv4, port.ipv6) {
        (IpAddr::V4(dst), Some(src), _) => Outer::V4 { src, dst },
        (IpAddr::V6(dst), _, Some(src)) => Outer::V6 { src, dst },
        _ => return Err(DropReason::EncapUnsupported),
    };
    let inner_v6 = ip.ethertype == ETHERTYPE_IPV6;
    let carrier = t.carrier();
    let tunnel_len = t.tunnel_len();
    if outer.header_len() + tunnel_len + ip.ip_len > limit {
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
    let protocol = carrier.protocol(inner_v6);
    let payload_len = tunnel_len + ip.ip_len;
    let rest = match outer {
        Outer::V4 { src, dst } => {
            let (h, rest) = rest
                .split_first_chunk_mut::<{ ipv4::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            // Copying DF keeps path-MTU discovery working end to end; IPv6
            // is never fragmented in flight, so its tunnel is not either,
            // unless it is fragmented here (RFC 4213 §3.2).
            let dont_frag = !to_fragment && (ip.dont_fragment || inner_v6);
            Ipv4Repr {
                src,
                dst,
                protocol,
                ttl: OUTER_TTL,
                // ID 0 is allowed with DF (RFC 6864); without DF a packet
                // this size fits the MTU and is never fragmented by us, and
                // an oversize one gets a per-worker ID from
                // `fragment::prepare` (AP-3).
                ident: 0,
                dont_frag,
                payload_len,
            }
            .emit(h)
            .map_err(|_| DropReason::MtuExceeded)?;
            rest
        }
        Outer::V6 { src, dst } => {
            let (h, rest) = rest
                .split_first_chunk_mut::<{ ipv6::HEADER_LEN }>()
                .ok_or(DropReason::NoHeadroom)?;
            Ipv6Repr {
                src,
                dst,
                next_header: protocol,
                hop_limit: OUTER_TTL,
                flow_label: flow_label(flow_hash),
                payload_len,
            }
            .emit(h)
            .map_err(|_| DropReason::MtuExceeded)?;
            rest
        }
    };
    // `rest` is the tunnel's headers and the inner packet, nothing after:
    // for a UDP carrier, its whole datagram. The tunnel's own header goes
    // first, since the UDP checksum covers it.
    let hdr = rest
        .get_mut(carrier.header_len()..tunnel_len)
        .ok_or(DropReason::NoHeadroom)?;
    t.emit(hdr, ip.ethertype, port.mac)?;
    if let Carrier::Udp { port } = carrier {
        let over_v6 = match outer {
            Outer::V4 { .. } => None,
            Outer::V6 { src, dst } => Some((src, dst)),
        };
        udp::emit(rest, port, flow_hash, over_v6)?;
    }
    Ok(())
}

/// The outer IPv6 flow label of a flow: 20 bits of the flow hash (bits
/// 44–63, apart from Maglev's low 32), stable per flow (RFC 6438).
// Public for core/tests/encap.rs.
pub fn flow_label(flow_hash: u64) -> u32 {
    (flow_hash >> 44) as u32 & 0x000f_ffff
}
