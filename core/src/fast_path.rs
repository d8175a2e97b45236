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

use crate::conntrack::{policy, Addrs, PacketMeta, Shard, TrackKey, Tracked};
use crate::flow::ipv4_ports_hash;
use crate::ids::ServiceId;
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::stage::{Balance, Keyed, KeyedOut, LanePacket, Stage, Verdict};
use crate::stats::RuleCounters;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_VLAN};
use crate::wire::ipv4::{self, Ipv4Packet, VERSION_IHL_NO_OPTIONS};
use crate::wire::ipv4::{FLAG_DF, FLAG_MF, FRAG_OFFSET_MASK};
use crate::wire::proto::{TCP, UDP};
use crate::wire::tcp::{self, TcpSegment};
use crate::wire::udp::{self, UdpDatagram};
use crate::wire::{field, get_u16, get_u8, L3Layout, Ports};

const ETH_LEN: usize = ethernet::HEADER_LEN;
const VLAN_ETH_LEN: usize = ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN;
const IPV4_LEN: usize = ipv4::HEADER_LEN;
/// The bytes read at once: an option-less IPv4 header and the first 8
/// bytes of its payload (a whole UDP header; TCP's ports).
const IP_UDP_LEN: usize = IPV4_LEN + udp::HEADER_LEN;

/// The rule the previous packet of a burst matched (or its miss), by
/// destination, protocol and port: the packets of one burst mostly go to a
/// few VIPs, so a match repeats the last one more often than not, and then
/// costs one compare instead of the rule search. Valid for one snapshot: a
/// burst starts with [`LastRule::NONE`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LastRule {
    /// Destination (bits 24–55), protocol (16–23), port (0–15); `u64::MAX`
    /// (no packet has it): none yet.
    key: u64,
    found: Found,
}

/// What the rule search found for a [`LastRule`] key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Found {
    /// A rule: its service and counter slot.
    Rule { service: ServiceId, counter: u16 },
    /// No rule (FR-1, AP-4): the verdict.
    Miss(Verdict),
}

impl LastRule {
    pub const NONE: LastRule = LastRule {
        key: u64::MAX,
        found: Found::Miss(Verdict::Drop(crate::drop_reason::DropReason::NoRule)),
    };
}

/// The stage of a frame this path understands, or None (general path).
#[inline(always)]
pub fn classify_ipv4(frame: &[u8], state: &ForwardingState) -> Option<Stage> {
    let mut stage = Stage::default();
    classify_ipv4_into(frame, state, &mut stage, None).map(|()| stage)
}

/// [`classify_ipv4`] written into `out` (built in place, not returned
/// through a temporary), and the packet counted under its rule in `rules`
/// when given; None, with `out` untouched and nothing counted, when the
/// general path must decide.
///
/// Every field is read through the wire layer's views over fixed-size
/// arrays: their offsets are constants and their bounds are proven at
/// compile time, so each read is one load.
#[inline(always)]
pub fn classify_ipv4_into(
    frame: &[u8],
    state: &ForwardingState,
    out: &mut Stage,
    rules: Option<&RuleCounters>,
) -> Option<()> {
    let mut last = LastRule::NONE;
    classify(frame, state, out, rules, &mut last, None).map(|_| ())
}

/// [`classify_ipv4_into`] that, for a tracked packet, also writes its
/// tracking key (CT-3) and `shard`'s hash of it into `keyed` and
/// requests the key's home entry, while the addresses are still in
/// registers. A tracked packet that is not a SYN leaves only `lane` and
/// the key ([`Keyed::Lane`]: no flow hash, `out` untouched); a SYN gets
/// its `Stage` too ([`Keyed::StagedTracked`]); any other packet its
/// `Stage` alone. None, with nothing written or counted, when the
/// general path must decide.
#[inline(always)]
pub fn classify_ipv4_keyed(
    frame: &[u8],
    state: &ForwardingState,
    out: &mut Stage,
    rules: Option<&RuleCounters>,
    last: &mut LastRule,
    shard: &Shard,
    keyed: KeyedOut<'_>,
) -> Option<Keyed> {
    classify(frame, state, out, rules, last, Some((shard, keyed)))
}

/// The flow hash of a frame this path accepts (the same as its `Balance`
/// would carry): for a packet the established lane forwards through a UDP
/// tunnel, whose source port is taken from it. The frame is one the fast
/// path keyed, unchanged; 0 if it is not (it cannot be).
#[inline]
pub fn flow_hash(
    frame: &[u8],
    l3_offset: usize,
    state: &ForwardingState,
    service: &ServiceState,
) -> u64 {
    let Some(ip_udp) = frame
        .get(l3_offset..)
        .and_then(|r| r.first_chunk::<IP_UDP_LEN>())
    else {
        return 0;
    };
    let ip = Ipv4Packet::new_unchecked(ip_udp);
    let l4 = UdpDatagram::new_unchecked(field::<IPV4_LEN, { udp::HEADER_LEN }, IP_UDP_LEN>(ip_udp));
    let ports = Ports {
        src: l4.src_port(),
        dst: l4.dst_port(),
    };
    ipv4_ports_hash(
        state.flow_seed,
        u32::from(ip.src_addr()),
        u32::from(ip.dst_addr()),
        ip.protocol(),
        ports,
        service.affinity,
    )
}

#[inline(always)]
fn classify(
    frame: &[u8],
    state: &ForwardingState,
    out: &mut Stage,
    rules: Option<&RuleCounters>,
    last: &mut LastRule,
    keyed: Option<(&Shard, KeyedOut<'_>)>,
) -> Option<Keyed> {
    let eth: &[u8; ETH_LEN] = frame.first_chunk()?;
    let l3 = match get_u16::<{ ethernet::offset::ETHERTYPE }, ETH_LEN>(eth) {
        ETHERTYPE_IPV4 => ETH_LEN,
        ETHERTYPE_VLAN => {
            let tagged: &[u8; VLAN_ETH_LEN] = frame.first_chunk()?;
            let inner = get_u16::<{ ethernet::offset::VLAN_ETHERTYPE }, VLAN_ETH_LEN>(tagged);
            if inner != ETHERTYPE_IPV4 {
                return None;
            }
            VLAN_ETH_LEN
        }
        _ => return None,
    };
    let rest = frame.get(l3..)?;
    let ip_udp: &[u8; IP_UDP_LEN] = rest.first_chunk()?;
    // Version 4 with a 20-byte header: options take the general path.
    if get_u8::<{ ipv4::offset::VERSION_IHL }, IP_UDP_LEN>(ip_udp) != VERSION_IHL_NO_OPTIONS {
        return None;
    }
    let ip = Ipv4Packet::new_unchecked(ip_udp);
    let total = usize::from(ip.total_len());
    let frag = ip.flags_frag();
    if total > rest.len() || frag & (FLAG_MF | FRAG_OFFSET_MASK) != 0 {
        return None;
    }
    let proto = ip.protocol();
    let l4_len = total.checked_sub(IPV4_LEN)?;
    let tcp_flags = match proto {
        TCP => {
            let tcp: &[u8; tcp::HEADER_LEN] = rest.get(IPV4_LEN..)?.first_chunk()?;
            let tcp = TcpSegment::new_unchecked(tcp);
            let doff = tcp.header_len();
            if l4_len < tcp::HEADER_LEN || doff < tcp::HEADER_LEN || doff > l4_len {
                return None;
            }
            tcp.flags()
        }
        UDP if l4_len >= udp::HEADER_LEN => 0,
        _ => return None,
    };
    let src = u32::from(ip.src_addr());
    let dst = u32::from(ip.dst_addr());
    // TCP's ports sit where UDP's do.
    let l4 = UdpDatagram::new_unchecked(field::<IPV4_LEN, { udp::HEADER_LEN }, IP_UDP_LEN>(ip_udp));
    let ports = Ports {
        src: l4.src_port(),
        dst: l4.dst_port(),
    };
    let key = (u64::from(dst) << 24) | (u64::from(proto) << 16) | u64::from(ports.dst);
    if last.key != key {
        let found = match state.rules.lookup_v4_ports(dst, proto, ports.dst) {
            Ok(rule) => Found::Rule {
                service: rule.service,
                counter: rule.counter,
            },
            // Only TCP and UDP get here, so "for the appliance" is just its
            // own address (no neighbour discovery).
            Err(miss) => {
                let own = || crate::stage::is_own_address(state, dst.to_be_bytes().into());
                Found::Miss(crate::stage::rule_miss(miss, own))
            }
        };
        *last = LastRule { key, found };
    }
    let (service_id, counter) = match last.found {
        Found::Rule { service, counter } => (service, counter),
        Found::Miss(verdict) => {
            *out = Stage::Done(verdict);
            return Some(Keyed::Staged);
        }
    };
    let service = state.service(service_id)?;
    if let Some(rules) = rules {
        rules.add(counter);
    }
    let tracked = policy::trackable(proto, service.affinity);
    let meta = PacketMeta {
        proto,
        tcp_flags,
        fragmented: false,
        ports: Some(ports),
    };
    let dont_fragment = frag & FLAG_DF != 0;
    let mut keyed_as = Keyed::Staged;
    if tracked {
        if let Some((shard, KeyedOut { tracked: t, lane })) = keyed {
            let addrs = Addrs {
                src: [0, u64::from(src)],
                dst: [0, u64::from(dst)],
                v6: false,
            };
            let kind = policy::key_kind(service.tracking.mode, service.affinity, &meta);
            *t = Tracked::new(TrackKey::new(kind, &addrs, &meta, service_id), shard);
            // CT-1: a SYN most likely opens a key the shard does not hold
            // yet, and takes the general stage 2; any other packet the
            // established lane first, which needs no flow hash.
            if !policy::is_syn(&meta) {
                let home = shard.home_of(t.hash);
                shard.prefetch_home_at(home);
                *lane = LanePacket {
                    l3_offset: l3 as u8,
                    dont_fragment,
                    ip_len: total as u16,
                    home,
                };
                return Some(Keyed::Lane);
            }
            shard.prefetch_home(t.hash, true);
            keyed_as = Keyed::StagedTracked;
        }
    }
    let hash = ipv4_ports_hash(state.flow_seed, src, dst, proto, ports, service.affinity);
    if !tracked {
        crate::stage::prefetch_table(service, hash);
    }
    *out = Stage::Balance(Balance {
        layout: L3Layout {
            ethertype: ETHERTYPE_IPV4,
            l3_offset: l3,
            ip_len: total,
            dont_fragment,
        },
        service: service_id,
        hash,
        meta,
        tracked,
        icmp_error: false,
    });
    Some(keyed_as)
}
