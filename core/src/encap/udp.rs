//! The UDP header of every UDP tunnel ([`super::Carrier::Udp`]: GUE,
//! GENEVE): the source port carries the flow's entropy, the checksum is 0
//! over IPv4 and computed over IPv6.

use std::net::Ipv6Addr;

use super::outer::Outer;
use crate::drop_reason::DropReason;
use crate::wire::checksum;
use crate::wire::proto::UDP;
use crate::wire::udp::{self, UdpRepr};

/// Lowest UDP tunnel source port: the IANA dynamic range 49152–65535,
/// whose 2^14 values are indexed by 14 bits of the flow hash.
pub const UDP_SRC_PORT_BASE: u16 = 49152;

/// The UDP tunnel source port of a flow: the flow hash's bits 32–45, so
/// one flow keeps one port (no reordering) while flows spread over the
/// paths and receive queues that hash the outer 5-tuple (RFC 8926 §3.3).
#[inline(always)]
pub fn udp_src_port(flow_hash: u64) -> u16 {
    UDP_SRC_PORT_BASE | (((flow_hash >> 32) as u16) & 0x3fff)
}

/// Writes the UDP header `hdr` to `dst_port` in front of `payload` (the
/// tunnel's own header and the inner packet) inside `outer`.
pub(super) fn emit(
    hdr: &mut [u8],
    dst_port: u16,
    flow_hash: u64,
    outer: Outer,
    payload: &[u8],
) -> Result<(), DropReason> {
    let h = hdr
        .first_chunk_mut::<{ udp::HEADER_LEN }>()
        .ok_or(DropReason::NoHeadroom)?;
    let mut repr = UdpRepr {
        src_port: udp_src_port(flow_hash),
        dst_port,
        payload_len: payload.len(),
        checksum: 0,
    };
    repr.emit(h).map_err(|_| DropReason::MtuExceeded)?;
    // Over IPv4 the checksum stays 0 ("none", RFC 768; allowed for GENEVE
    // by RFC 8926 §3.3): the inner packet carries its own. Over IPv6 a zero
    // checksum is only allowed on tunnels both ends configured for it (RFC
    // 6935/6936), which backends are not required to be, so it is computed:
    // one pass over the packet, UDP tunnels over IPv6 only.
    if let Outer::V6 { src, dst } = outer {
        repr.checksum = v6_checksum(src, dst, h, payload);
        repr.emit(h).map_err(|_| DropReason::MtuExceeded)?;
    }
    Ok(())
}

/// The UDP checksum over IPv6 (RFC 8200 §8.1): pseudo-header, the UDP
/// header `hdr` (checksum field 0) and the payload `rest`. 0 is sent as
/// 0xffff, since 0 means "no checksum".
fn v6_checksum(src: Ipv6Addr, dst: Ipv6Addr, hdr: &[u8; udp::HEADER_LEN], rest: &[u8]) -> u16 {
    let len = (udp::HEADER_LEN + rest.len()) as u32;
    let mut sum: u32 = 0;
    for a in [src.octets(), dst.octets()] {
        sum += u32::from(checksum::ones_complement_sum(&a));
    }
    sum += (len >> 16) + (len & 0xffff) + u32::from(UDP);
    // The UDP header is 8 bytes, so `rest` starts on an even offset and
    // the two partial sums combine without byte swapping.
    sum += u32::from(checksum::ones_complement_sum(hdr));
    sum += u32::from(checksum::ones_complement_sum(rest));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}
