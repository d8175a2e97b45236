//! Stage 1 for the common case, without the general parser: an IPv4 frame
//! (untagged or with one 802.1Q tag, no IP options, not fragmented)
//! carrying TCP or UDP to a VIP whose rule matches.
//!
//! The general parser handles every protocol, IPv6 extension headers,
//! fragments and ICMP errors, and builds an `IpInfo` of `IpAddr`s that the
//! flow hash then matches on again; for the frames this path accepts, it
//! reads each field once, at a fixed offset, as a plain integer. Rule
//! misses are decided here too (a flood of traffic for addresses or ports
//! sluice does not serve costs no second parse). Anything else returns
//! None, and the caller runs the general path, which decides the same
//! `Stage` for every frame this one accepts (property-tested in
//! `tests/fast_path.rs` over random and mutated frames).

use crate::conntrack::{policy, PacketMeta};
use crate::flow::ipv4_ports_hash;
use crate::pipeline::{Balance, Stage};
use crate::snapshot::ForwardingState;
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_VLAN};
use crate::wire::proto::{TCP, UDP};
use crate::wire::{L3Layout, Ports};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const TCP_LEN: usize = 20;
const UDP_LEN: usize = 8;
/// IPv4 flags/fragment-offset word: MF and the 13-bit offset.
const MF_OR_OFFSET: u16 = 0x3fff;
const DF: u16 = 0x4000;

/// The stage of a frame this path understands, or None (general path).
#[inline(always)]
pub fn classify_ipv4(frame: &[u8], state: &ForwardingState) -> Option<Stage> {
    let mut stage = Stage::default();
    classify_ipv4_into(frame, state, &mut stage).map(|()| stage)
}

/// [`classify_ipv4`] written into `out` (built in place, not returned
/// through a temporary); None, with `out` untouched, when the general path
/// must decide.
#[inline(always)]
pub fn classify_ipv4_into(frame: &[u8], state: &ForwardingState, out: &mut Stage) -> Option<()> {
    let eth: &[u8; ETH_LEN] = frame.first_chunk()?;
    let l3 = match u16::from_be_bytes([eth[12], eth[13]]) {
        ETHERTYPE_IPV4 => ETH_LEN,
        ETHERTYPE_VLAN => {
            let inner = frame.get(ETH_LEN + 2..ETH_LEN + 4)?;
            if u16::from_be_bytes([inner[0], inner[1]]) != ETHERTYPE_IPV4 {
                return None;
            }
            ETH_LEN + 4
        }
        _ => return None,
    };
    let rest = frame.get(l3..)?;
    let ip: &[u8; IPV4_LEN + UDP_LEN] = rest.first_chunk()?;
    // Version 4 with a 20-byte header: options take the general path.
    if ip[0] != 0x45 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    if total > rest.len() || frag & MF_OR_OFFSET != 0 {
        return None;
    }
    let proto = ip[9];
    let l4_len = total.checked_sub(IPV4_LEN)?;
    let tcp_flags = match proto {
        TCP => {
            let tcp: &[u8; TCP_LEN] = rest.get(IPV4_LEN..)?.first_chunk()?;
            let doff = usize::from(tcp[12] >> 4) * 4;
            if l4_len < TCP_LEN || doff < TCP_LEN || doff > l4_len {
                return None;
            }
            tcp[13]
        }
        UDP if l4_len >= UDP_LEN => 0,
        _ => return None,
    };
    let src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
    let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    let ports = Ports {
        src: u16::from_be_bytes([ip[20], ip[21]]),
        dst: u16::from_be_bytes([ip[22], ip[23]]),
    };
    let rule = match state.rules.lookup_v4_ports(dst, proto, ports.dst) {
        Ok(rule) => rule,
        // Only TCP and UDP get here, so "for the appliance" is just its
        // own address (no neighbour discovery).
        Err(miss) => {
            let own = || crate::pipeline::is_own_address(state, dst.to_be_bytes().into());
            *out = Stage::Done(crate::pipeline::rule_miss(miss, own));
            return Some(());
        }
    };
    let service = state.service(rule.service)?;
    let hash = ipv4_ports_hash(state.flow_seed, src, dst, proto, ports, service.affinity);
    let tracked = policy::trackable(proto, service.affinity);
    if !tracked {
        crate::pipeline::prefetch_table(service, hash);
    }
    *out = Stage::Balance(Balance {
        layout: L3Layout {
            ethertype: ETHERTYPE_IPV4,
            l3_offset: l3,
            ip_len: total,
            dont_fragment: frag & DF != 0,
        },
        service: rule.service,
        hash,
        meta: PacketMeta {
            proto,
            tcp_flags,
            fragmented: false,
            ports: Some(ports),
        },
        tracked,
        icmp_error: false,
    });
    Some(())
}
