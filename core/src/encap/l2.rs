//! Layer-2 DSR: an Ethernet header to the backend's next hop (VLAN tags of
//! the client side removed, the egress port's own tag added), the IP
//! packet byte for byte. No outer IP header: the backend is on a segment
//! of an egress port and holds the VIP itself.

use super::{replace_l2, Egress};
use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::wire::ethernet::{EthernetRepr, MacAddr};
use crate::wire::L3Layout;

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
