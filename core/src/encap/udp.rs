//! The UDP header of every UDP tunnel (`Carrier::Udp`: GUE, GENEVE): the
//! source port carries the flow's entropy, the checksum is 0 over IPv4 and
//! computed over IPv6.

use std::net::Ipv6Addr;

use crate::drop_reason::DropReason;
use crate::wire::udp::{self, UdpDatagram, UdpRepr};

/// Lowest UDP tunnel source port: the IANA dynamic range 49152–65535,
/// whose 2^14 values are indexed by 14 bits of the flow hash.
pub(crate) const UDP_SRC_PORT_BASE: u16 = 49152;

/// The UDP tunnel source port of a flow: the flow hash's bits 32–45, so
/// one flow keeps one port (no reordering) while flows spread over the
/// paths and receive queues that hash the outer 5-tuple (RFC 8926 §3.3).
// Public for core/tests/encap.rs.
#[inline(always)]
pub fn udp_src_port(flow_hash: u64) -> u16 {
    UDP_SRC_PORT_BASE | (((flow_hash >> 32) as u16) & 0x3fff)
}

/// Writes the UDP header to `dst_port` at the front of `datagram`: the
/// header, the tunnel's own header (written already) and the inner packet,
/// nothing after. `over_v6` holds the outer IPv6 source and destination,
/// None under an outer IPv4 header.
pub(super) fn emit(
    datagram: &mut [u8],
    dst_port: u16,
    flow_hash: u64,
    over_v6: Option<(Ipv6Addr, Ipv6Addr)>,
) -> Result<(), DropReason> {
    let (h, payload) = datagram
        .split_first_chunk_mut::<{ udp::HEADER_LEN }>()
        .ok_or(DropReason::NoHeadroom)?;
    UdpRepr {
        src_port: udp_src_port(flow_hash),
        dst_port,
        payload_len: payload.len(),
        checksum: 0,
    }
    .emit(h)
    .map_err(|_| DropReason::MtuExceeded)?;
    // Over IPv4 the checksum stays 0 ("none", RFC 768; allowed for GENEVE
    // by RFC 8926 §3.3): the inner packet carries its own. Over IPv6 a zero
    // checksum is only allowed on tunnels both ends configured for it (RFC
    // 6935/6936), which backends are not required to be, so it is computed:
    // one pass over the packet, UDP tunnels over IPv6 only.
    if let Some((src, dst)) = over_v6 {
        UdpDatagram::new_unchecked(datagram).fill_checksum_v6(&src, &dst);
    }
    Ok(())
}
