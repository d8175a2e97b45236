//! Layer 2: the Ethernet header to the backend's next hop (VLAN tags of
//! the client side removed, the egress port's own tag added) in front of
//! what is sent. Alone it is layer-2 DSR ([`deliver`]): the IP packet byte
//! for byte, no outer IP header, the backend on a segment of an egress port
//! holding the VIP itself. A tunnel (`outer.rs`) puts its outer headers
//! between the two.

use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::port::PortState;
use crate::wire::ethernet::{EthernetRepr, MacAddr};
use crate::wire::L3Layout;

/// How the encapsulated packet leaves: the port (MAC, addresses), the
/// 802.1Q tag of its Ethernet header, the longest IP packet allowed, and
/// whether it is about to be fragmented (then an outer IPv4 header gets DF
/// clear).
#[derive(Copy, Clone)]
pub(super) struct Egress<'a> {
    pub(super) port: &'a PortState,
    pub(super) vlan: Option<u16>,
    pub(super) limit: usize,
    pub(super) to_fragment: bool,
}

/// Layer-2 DSR: the new Ethernet header in front of the client's IP packet.
pub(super) fn deliver<P: PacketBuf>(
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
pub(super) fn replace_l2<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    headers: usize,
) -> Result<(), DropReason> {
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
