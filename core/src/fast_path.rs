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
use crate::flow::{ipv4_ports_hash, TupleKind};
use crate::ids::ServiceId;
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::stage::{Balance, Keyed, KeyedOut, LanePacket, QuicAt, Stage, StatelessPacket, Verdict};
use crate::stats::RuleCounters;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_VLAN};
use crate::wire::ipv4::{self, Ipv4Packet, VERSION_IHL_NO_OPTIONS};
use crate::wire::ipv4::{FLAG_DF, FLAG_MF, FRAG_OFFSET_MASK};
use crate::wire::proto::{TCP, UDP};
use crate::wire::tcp::{self, TcpSegment};
use crate::wire::udp::{self, UdpDatagram};
use crate::wire::{field, get_u16, get_u32, get_u8, L3Layout, Ports};

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
// Public for core/tests/fast_path.rs and established.rs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LastRule {
    /// Destination (bits 24–55), protocol (16–23), port (0–15); `u64::MAX`
    /// (no packet has it): none yet.
    key: u64,
    found: Found,
    /// The last rule whose packets [`classify_lane`] can take.
    lane: LaneRule,
    /// The last rule whose packets [`classify_stateless`] can take.
    stateless: StatelessRule,
}

/// A rule [`classify_stateless`] takes packets of: one whose last packet
/// here was an untagged UDP packet its service does not track and does
/// not route by QUIC connection ID. Every later such packet with the same
/// destination and port matches the same rule and service, so gets the
/// same stage but for its own addresses, ports, length and DF.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct StatelessRule {
    /// As [`LastRule`]'s key; `u64::MAX`: none.
    key: u64,
    service: ServiceId,
    /// The rule's counter slot.
    counter: u16,
    /// Packets [`classify_stateless`] took under it, counted as the lane's.
    pending: u64,
}

impl StatelessRule {
    const NONE: StatelessRule = StatelessRule {
        key: u64::MAX,
        service: ServiceId(0),
        counter: 0,
        pending: 0,
    };
}

/// A rule [`classify_lane`] takes packets of: one whose last packet here
/// was an untagged TCP packet for the established lane with a 5-tuple key.
/// Every later untagged, option-less, unfragmented TCP packet with the
/// same destination and port (the rule search's whole input) matches the
/// same rule and service, so gets the same key kind: all its key needs
/// besides its own addresses and ports is known already.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct LaneRule {
    /// As [`LastRule`]'s key; `u64::MAX`: none.
    key: u64,
    /// The tracking key's `meta` above the ports (protocol, key kind,
    /// service), the same for every packet of the rule.
    meta_high: u64,
    /// The rule's counter slot.
    counter: u16,
    /// Packets [`classify_lane`] took under it since it was learnt: counted
    /// at once when another rule replaces it or the burst's stage 1 ends.
    pending: u64,
}

impl LaneRule {
    const NONE: LaneRule = LaneRule {
        key: u64::MAX,
        meta_high: 0,
        counter: 0,
        pending: 0,
    };
}

/// Counts `pending` packets under rule `counter` in `rules` (None: not
/// counted) and starts it again from 0.
#[inline(always)]
fn count_pending(rules: Option<&RuleCounters>, counter: u16, pending: &mut u64) {
    if *pending != 0 {
        if let Some(rules) = rules {
            rules.add_n(counter, *pending);
        }
        *pending = 0;
    }
}

/// The tracking key's port bits (`TrackKey::meta`'s low 32).
const META_PORTS: u64 = 0xffff_ffff;

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
        lane: LaneRule::NONE,
        stateless: StatelessRule::NONE,
    };

    /// Counts the packets [`classify_lane`] took under its rule in `rules`
    /// (None: nothing is counted, as for a steered burst). Called at the
    /// end of a burst's stage 1, so that every packet is counted before
    /// its burst is over.
    #[inline(always)]
    pub(crate) fn flush(&mut self, rules: Option<&RuleCounters>) {
        count_pending(rules, self.lane.counter, &mut self.lane.pending);
        count_pending(rules, self.stateless.counter, &mut self.stateless.pending);
    }

    /// Whether a packet took the established lane, so that
    /// [`classify_lane`] may take the next ones.
    #[inline(always)]
    pub(crate) fn lane_learnt(&self) -> bool {
        self.lane.key != LaneRule::NONE.key
    }

    /// Whether a packet taught [`classify_stateless`] a rule, so that it
    /// may take the next ones.
    #[inline(always)]
    pub(crate) fn stateless_learnt(&self) -> bool {
        self.stateless.key != StatelessRule::NONE.key
    }

    /// `key`'s rule becomes the lane's (a packet of it just took the lane).
    #[inline(always)]
    fn learn_lane(&mut self, key: u64, meta: u64, counter: u16, rules: Option<&RuleCounters>) {
        if self.lane.key != key {
            self.flush(rules);
            self.lane = LaneRule {
                key,
                meta_high: meta & !META_PORTS,
                counter,
                pending: 0,
            };
        }
    }
}

/// Stage 1 of a packet of the lane's rule (see [`LaneRule`]) that is not a
/// SYN: its tracking key and shard hash into `keyed.tracked`, its
/// [`LanePacket`] into `keyed.lane` and its home entry requested — what
/// [`classify_ipv4_keyed`] writes for it, without the rule search or the
/// service's policy, which the lane rule answered already. The packet is
/// counted under its rule by `LastRule::flush`. False, with nothing
/// written, for any other frame: [`classify_ipv4_keyed`] decides it.
// Public for core/tests/fast_path.rs.
#[inline(always)]
pub fn classify_lane(
    frame: &[u8],
    last: &mut LastRule,
    shard: &Shard,
    keyed: KeyedOut<'_>,
) -> bool {
    const IP: usize = ETH_LEN;
    const L4: usize = ETH_LEN + IPV4_LEN;
    const LEN: usize = L4 + tcp::HEADER_LEN;
    let Some(h) = frame.first_chunk::<LEN>() else {
        return false;
    };
    let total = get_u16::<{ IP + ipv4::offset::TOTAL_LEN }, LEN>(h);
    let frag = get_u16::<{ IP + ipv4::offset::FLAGS_FRAG }, LEN>(h);
    let doff = usize::from(get_u8::<{ L4 + tcp::offset::DATA_OFFSET }, LEN>(h) >> 4) * 4;
    // The general path's length checks (`classify`: the TCP header's
    // 20 bytes within the payload, its data offset at least 20 and
    // within it) come down to these two: a data offset of at least 20
    // that the IPv4 packet holds behind its header, which also makes
    // the payload at least 20 bytes long.
    if get_u16::<{ ethernet::offset::ETHERTYPE }, LEN>(h) != ETHERTYPE_IPV4
        || get_u8::<{ IP + ipv4::offset::VERSION_IHL }, LEN>(h) != VERSION_IHL_NO_OPTIONS
        || get_u8::<{ IP + ipv4::offset::PROTOCOL }, LEN>(h) != TCP
        || frag & (FLAG_MF | FRAG_OFFSET_MASK) != 0
        || usize::from(total) > frame.len() - ETH_LEN
        || doff < tcp::HEADER_LEN
        || IPV4_LEN + doff > usize::from(total)
    {
        return false;
    }
    let src = get_u32::<{ IP + ipv4::offset::SRC_ADDR }, LEN>(h);
    let dst = get_u32::<{ IP + ipv4::offset::DST_ADDR }, LEN>(h);
    let src_port = get_u16::<{ L4 + tcp::offset::SRC_PORT }, LEN>(h);
    let dst_port = get_u16::<{ L4 + tcp::offset::DST_PORT }, LEN>(h);
    let key = (u64::from(dst) << 24) | (u64::from(TCP) << 16) | u64::from(dst_port);
    let flags = get_u8::<{ L4 + tcp::offset::FLAGS }, LEN>(h);
    // CT-1: a SYN takes the general stage 2 (policy::is_syn).
    if key != last.lane.key || flags & (tcp::FLAG_SYN | tcp::FLAG_ACK) == tcp::FLAG_SYN {
        return false;
    }
    let KeyedOut { tracked, lane } = keyed;
    let track_key = TrackKey {
        src: [0, u64::from(src)],
        dst: [0, u64::from(dst)],
        meta: last.lane.meta_high | (u64::from(src_port) << 16) | u64::from(dst_port),
    };
    *tracked = Tracked::new(track_key, shard);
    let home = shard.home_of(tracked.hash);
    shard.prefetch_home_at(home);
    *lane = LanePacket {
        l3_offset: ETH_LEN as u8,
        dont_fragment: frag & FLAG_DF != 0,
        ip_len: total,
        home,
    };
    last.lane.pending += 1;
    true
}

/// Stage 1 of an untagged, option-less, unfragmented UDP packet of the
/// stateless rule (see [`StatelessRule`]): its [`StatelessPacket`] into
/// `out` and its Maglev slot requested — all the stateless lane needs of
/// the `Stage::Balance` that [`classify_ipv4_keyed`] writes for it
/// ([`stateless_stage`] makes that stage from it), without the rule
/// search or the service's policy, which the rule answered already. The
/// packet is counted under its rule by `LastRule::flush`. False, with
/// nothing written, for any other frame.
// Public for core/tests/fast_path.rs.
#[inline(always)]
pub fn classify_stateless(
    frame: &[u8],
    last: &mut LastRule,
    state: &ForwardingState,
    out: &mut StatelessPacket,
) -> bool {
    const IP: usize = ETH_LEN;
    const L4: usize = ETH_LEN + IPV4_LEN;
    const LEN: usize = L4 + udp::HEADER_LEN;
    // No stateless rule learnt (TCP traffic, SYNs): one compare.
    if last.stateless.key == StatelessRule::NONE.key {
        return false;
    }
    let Some(h) = frame.first_chunk::<LEN>() else {
        return false;
    };
    let total = get_u16::<{ IP + ipv4::offset::TOTAL_LEN }, LEN>(h);
    let frag = get_u16::<{ IP + ipv4::offset::FLAGS_FRAG }, LEN>(h);
    if get_u16::<{ ethernet::offset::ETHERTYPE }, LEN>(h) != ETHERTYPE_IPV4
        || get_u8::<{ IP + ipv4::offset::VERSION_IHL }, LEN>(h) != VERSION_IHL_NO_OPTIONS
        || get_u8::<{ IP + ipv4::offset::PROTOCOL }, LEN>(h) != UDP
        || frag & (FLAG_MF | FRAG_OFFSET_MASK) != 0
        || usize::from(total) > frame.len() - ETH_LEN
        || usize::from(total) < IPV4_LEN + udp::HEADER_LEN
    {
        return false;
    }
    let src = get_u32::<{ IP + ipv4::offset::SRC_ADDR }, LEN>(h);
    let dst = get_u32::<{ IP + ipv4::offset::DST_ADDR }, LEN>(h);
    let ports = Ports {
        src: get_u16::<{ L4 + udp::offset::SRC_PORT }, LEN>(h),
        dst: get_u16::<{ L4 + udp::offset::DST_PORT }, LEN>(h),
    };
    let key = (u64::from(dst) << 24) | (u64::from(UDP) << 16) | u64::from(ports.dst);
    if key != last.stateless.key {
        return false;
    }
    let Some(service) = state.service(last.stateless.service) else {
        return false;
    };
    let hash = ipv4_ports_hash(state.flow_seed, src, dst, UDP, ports, service.affinity);
    crate::stage::prefetch_table(service, hash);
    *out = StatelessPacket {
        hash,
        service: last.stateless.service,
        ip_len: total,
        dont_fragment: frag & FLAG_DF != 0,
    };
    last.stateless.pending += 1;
    true
}

/// The `Stage::Balance` [`classify_ipv4_keyed`] writes for a packet that
/// [`classify_stateless`] took as `packet`, from its unchanged frame (the
/// ports are read back from it): what the general stage 2 needs when the
/// stateless lane declines the packet. `internal` drop for a frame
/// classify_stateless cannot have taken.
// Public for core/tests/fast_path.rs.
pub fn stateless_stage(frame: &[u8], packet: &StatelessPacket) -> Stage {
    const L4: usize = ETH_LEN + IPV4_LEN;
    const LEN: usize = L4 + udp::HEADER_LEN;
    let Some(h) = frame.first_chunk::<LEN>() else {
        return Stage::UNSTAGED;
    };
    Stage::Balance(Balance {
        layout: packet.layout(),
        service: packet.service,
        hash: packet.hash,
        meta: PacketMeta {
            proto: UDP,
            tcp_flags: 0,
            fragmented: false,
            ports: Some(Ports {
                src: get_u16::<{ L4 + udp::offset::SRC_PORT }, LEN>(h),
                dst: get_u16::<{ L4 + udp::offset::DST_PORT }, LEN>(h),
            }),
        },
        tracked: false,
        icmp_error: false,
        quic: QuicAt::NONE,
    })
}

/// The stage of a frame this path understands, or None (general path).
// Public for core/tests/fast_path.rs and quic_lb.rs.
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
// Public for core/tests/established.rs.
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
// Public for core/tests/fast_path.rs.
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
pub(crate) fn flow_hash(
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
        last.key = key;
        last.found = found;
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
    let quic = if proto == UDP && service.quic_lb.is_some() {
        QuicAt::at(l3 + IP_UDP_LEN)
    } else {
        QuicAt::NONE
    };
    let meta = PacketMeta {
        proto,
        tcp_flags,
        fragmented: false,
        ports: Some(ports),
    };
    let dont_fragment = frag & FLAG_DF != 0;
    let mut keyed_as = Keyed::Staged;
    if tracked && quic == QuicAt::NONE {
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
                if l3 == ETH_LEN && proto == TCP && kind == TupleKind::Five {
                    last.learn_lane(key, t.key.meta, counter, rules);
                }
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
        // Later packets of this rule may take `classify_stateless`.
        if proto == UDP && quic == QuicAt::NONE && l3 == ETH_LEN && last.stateless.key != key {
            last.flush(rules);
            last.stateless = StatelessRule {
                key,
                service: service_id,
                counter,
                pending: 0,
            };
        }
    }
    *out = Stage::Balance(Balance {
        layout: L3Layout::ipv4(l3, total, dont_fragment),
        service: service_id,
        hash,
        meta,
        tracked,
        icmp_error: false,
        quic,
    });
    Some(keyed_as)
}
