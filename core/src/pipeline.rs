//! The per-packet decision: parse → classify → select → encapsulate.
//! Pure: a function of (bytes, snapshot, worker context). No allocation,
//! no locks, no panics.
//!
//! Stage 1 (the general path; the IPv4 fast path is `fast_path`) and
//! stage 2: connection tracking (SPEC §3) over the Maglev tables, zonal
//! affinity (§6), encapsulation and the MTU answers (AP-3). ICMP errors
//! are balanced like the flow they quote (HA-4, `icmp_error`).
//!
//! Which entry point:
//! - a worker's burst: [`crate::burst::BurstStages`], which runs this
//!   module's stages over the whole burst (stage 1 for every packet, then
//!   stage 2 with a lookahead into the conntrack shard);
//! - one packet, the whole decision: [`process`] (`explain`, tests, tools;
//!   the `burst` fuzz target and `tests/established.rs` check the burst
//!   path against it);
//! - stage 1 of one packet, nothing decided beyond it: [`classify`];
//! - stage 1 without the IPv4 fast path: [`classify_general`], what the
//!   property tests check the fast path against.

use std::net::{IpAddr, Ipv6Addr};

use crate::conntrack::session::quic_connection_stays;
use crate::conntrack::session::Selection;
use crate::conntrack::{self, Addrs, PacketMeta, Shard, Tracked};
use crate::drop_reason::DropReason;
use crate::encap;
use crate::established;
use crate::fast_path::LastRule;
use crate::flow::packet_hash_seeded;
use crate::fragment::{self, FragmentIds};
use crate::fragment_flows::{self, FragmentFlows, Placement};
use crate::icmp;
use crate::icmp_error;
use crate::packet::PacketBuf;
use crate::quic_lb::{Decision, Fallback, QuicLbCounts};
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::stage::{
    is_own_address, prefetch_table, rule_miss, Balance, Keyed, KeyedOut, QuicAt, StatelessPacket,
};
pub use crate::stage::{Stage, Verdict};
use crate::stats::RuleCounters;
use crate::time::Millis;
use crate::wire::ethernet::ETHERTYPE_IPV6;
use crate::wire::proto::{ICMPV6, TCP, UDP};
use crate::wire::{self, IpInfo, L3Layout, Parsed};

/// Worker-local state the pipeline may read and update.
#[derive(Debug)]
pub struct PipelineCtx {
    /// Coarse time, read once per burst.
    pub now: Millis,
    /// Rate limit of the ICMP errors this worker generates (AP-3).
    pub icmp_replies: icmp::TokenBucket,
    /// This worker's conntrack shard (SPEC §3, AP-1).
    pub conntrack: Shard,
    /// Identification of the fragmented outer headers this worker
    /// originates (AP-3); the worker sets it from its index.
    pub fragment_ids: FragmentIds,
    /// Set when a packet is forwarded (`Verdict::Forward`, `Fragment`)
    /// with a new conntrack entry: a new connection to its backend. Whoever
    /// counts new connections reads and clears it after such a verdict;
    /// no other verdict leaves it set.
    pub opened: bool,
    /// Packets of QUIC-LB services routed by connection ID or not.
    pub quic_lb: QuicLbCounts,
    /// The datagrams of `follow_flow` services whose first fragment this
    /// worker saw.
    pub fragments: FragmentFlows,
}

impl PipelineCtx {
    /// A context whose shard holds `conntrack_capacity` entries (reserved
    /// and touched now, never grown).
    pub fn new(conntrack_capacity: usize) -> Self {
        Self {
            now: Millis::default(),
            conntrack: Shard::with_capacity(conntrack_capacity),
            icmp_replies: Default::default(),
            fragment_ids: FragmentIds::default(),
            opened: false,
            quic_lb: QuicLbCounts::default(),
            fragments: FragmentFlows::new(),
        }
    }
}

impl Default for PipelineCtx {
    /// A small shard (4,096 entries): tests and tools.
    fn default() -> Self {
        Self::new(4096)
    }
}

/// Decides what to do with one packet received on `rx_port` (config index;
/// a trunk port drops frames without its tag), rewriting it in place when
/// it is forwarded. The worker runs the two stages over a whole burst
/// instead ([`crate::burst::BurstStages`]), so that the cache misses of
/// different packets overlap; it decides every packet as this does.
pub fn process<P: PacketBuf>(
    pkt: &mut P,
    rx_port: u16,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    let vlan = state.ports.get(usize::from(rx_port)).and_then(|p| p.vlan);
    if vlan.is_some_and(|vid| !crate::vlan::accepts(pkt.data(), vid)) {
        return Verdict::Drop(DropReason::WrongVlan);
    }
    match classify(pkt.data(), state) {
        Stage::Done(v) => v,
        Stage::Balance(b) => deliver(pkt, &b, None, state, ctx),
    }
}

/// Stage 1 of one packet: parse, find the rule and service, hash the
/// flow; the IPv4 fast path first, the general path for what it declines.
/// Reads the frame only. Prefetches the Maglev slot the second stage will
/// read.
#[inline]
pub fn classify(frame: &[u8], state: &ForwardingState) -> Stage {
    let mut stage = Stage::default();
    if crate::fast_path::classify_ipv4_into(frame, state, &mut stage, None).is_none() {
        stage = classify_counted(frame, state, None);
    }
    stage
}

/// Stage 1 of a packet of a burst ([`crate::burst::BurstStages`]): the
/// `Stage` of [`classify`], written into `out` (the burst's stage slot, so
/// the fast path builds its `Balance` in place instead of in a
/// temporary) and counted under its rule in `rules` when given (where the
/// rule is at hand, so no stage carries it). It also leaves a tracked
/// packet's key and shard hash in `keyed.tracked`, its home entry
/// requested (the IPv4 fast path builds the key from the addresses it has
/// just read, the general path through [`prefetch_conntrack`]), and says
/// which records it wrote: a tracked non-SYN packet of the fast path
/// leaves `keyed.lane` instead of its `Stage` ([`Keyed::Lane`], for
/// `established::forward_lane`). `last`: the rule the previous packet of
/// the burst matched ([`LastRule`]).
#[inline(always)]
pub(crate) fn classify_keyed_into(
    frame: &[u8],
    state: &ForwardingState,
    out: &mut Stage,
    rules: Option<&RuleCounters>,
    ctx: &PipelineCtx,
    last: &mut LastRule,
    keyed: KeyedOut<'_>,
) -> Keyed {
    let KeyedOut { tracked, lane } = keyed;
    if let Some(keyed) = crate::fast_path::classify_ipv4_keyed(
        frame,
        state,
        out,
        rules,
        last,
        &ctx.conntrack,
        KeyedOut {
            tracked: &mut *tracked,
            lane,
        },
    ) {
        return keyed;
    }
    *out = classify_counted(frame, state, rules);
    match out {
        Stage::Balance(b) if prefetch_conntrack(frame, b, state, ctx, tracked) => {
            Keyed::StagedTracked
        }
        _ => Keyed::Staged,
    }
}

/// Stage 1 through the general parser only: every frame, every protocol.
/// The same `Stage` as [`classify`], which tries the IPv4 fast path
/// first. Public for the tests that check the fast path against it
/// (`core/tests/fast_path.rs`, `core/tests/quic_lb.rs`).
#[inline]
pub fn classify_general(frame: &[u8], state: &ForwardingState) -> Stage {
    classify_counted(frame, state, None)
}

/// [`classify_general`], counting the packet under its rule in `rules`.
#[inline]
fn classify_counted(frame: &[u8], state: &ForwardingState, rules: Option<&RuleCounters>) -> Stage {
    match classify_inner(frame, state, rules) {
        Ok(stage) => stage,
        Err(reason) => Stage::Done(Verdict::Drop(reason)),
    }
}

// Always inlined: with the ICMP branch (HA-4) the compiler stopped
// inlining it, which measured +5 ns/packet on TCP.
#[inline(always)]
fn classify_inner(
    frame: &[u8],
    state: &ForwardingState,
    rules: Option<&RuleCounters>,
) -> Result<Stage, DropReason> {
    let ip = match wire::parse(frame)? {
        Parsed::Arp => return Ok(Stage::Done(Verdict::Punt)),
        Parsed::Ip(ip) => ip,
    };
    // HA-4: an ICMP error quoting a packet of a VIP flow goes to that
    // flow's backend. Only ICMP carries `icmp_type`, so TCP/UDP pay one
    // branch here.
    if let Some(icmp_type) = ip.icmp_type {
        // Scalars only, so `ip` need not be materialised in memory for the
        // out-of-line call.
        let end = ip.l3_offset + ip.ip_len;
        let v6 = ip.ethertype == ETHERTYPE_IPV6;
        let error = (ip.protocol, icmp_type, v6, ip.l4_offset, end, ip.dst);
        if let Some((service, rule, hash)) = icmp_error::steer(frame, error, state) {
            if let Some(rules) = rules {
                rules.add(rule);
            }
            return Ok(Stage::Balance(Balance {
                layout: L3Layout::from(&ip),
                service,
                hash,
                meta: PacketMeta::of(&ip),
                // ICMP is never tracked (CT-4); the quoted flow may be.
                tracked: false,
                icmp_error: true,
                quic: QuicAt::NONE,
            }));
        }
    }
    // FR-4: a non-first fragment has no ports (the parser leaves them out).
    let dst_port = ip.ports.map(|p| p.dst);
    // VIPs first: they carry nearly all the traffic, and a VIP is never one
    // of the appliance's own addresses (the config validator refuses it), so
    // the order does not change any verdict.
    let rule = match state.rules.lookup(ip.dst, ip.protocol, dst_port) {
        Ok(rule) => rule,
        Err(miss) => {
            return Ok(Stage::Done(rule_miss(miss, || {
                is_for_appliance(&ip, state)
            })))
        }
    };
    if let Some(rules) = rules {
        rules.add(rule.counter);
    }
    // A rule naming a missing service is a broken snapshot; there is then
    // no backend to send to, which is what the counter says.
    let service = state.service(rule.service).ok_or(DropReason::NoBackend)?;
    let hash = packet_hash_seeded(state.flow_seed, &ip, service.affinity);
    // A `follow_flow` service's fragments are placed by their flow's hash
    // in stage 2 (`fragment_flows`), not tracked as a 3-tuple.
    let tracked = conntrack::policy::trackable(ip.protocol, service.affinity)
        && !(ip.fragment.is_fragmented() && follows_flow(service, &PacketMeta::of(&ip)));
    let quic = ip.protocol == UDP && !ip.fragment.is_fragmented() && service.quic_lb.is_some();
    let quic = if quic {
        QuicAt::at(ip.l4_offset + wire::udp::HEADER_LEN)
    } else {
        QuicAt::NONE
    };
    if !tracked {
        prefetch_table(service, hash);
    }
    Ok(Stage::Balance(Balance {
        layout: L3Layout::from(&ip),
        service: rule.service,
        hash,
        meta: PacketMeta::of(&ip),
        tracked,
        icmp_error: false,
        quic,
    }))
}

/// A `follow_flow` fragment: placed by its datagram's flow
/// (`fragment_flows::place`), then delivered as a packet of that flow;
/// held, or dropped under the reason, when it cannot be placed. Out of
/// line: every other packet pays one branch.
#[cold]
#[inline(never)]
fn deliver_following<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    service: &ServiceState,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Result<Verdict, DropReason> {
    let placed = fragment_flows::place(
        pkt.data(),
        b,
        service.affinity,
        state.flow_seed,
        &mut ctx.fragments,
        ctx.now,
    );
    match placed {
        Placement::Hash(hash) => {
            let placed = Balance { hash, ..*b };
            deliver_inner::<false, P>(pkt, &placed, None, state, ctx)
        }
        Placement::Hold => Ok(Verdict::Hold),
        Placement::Refused(reason) => Err(reason),
    }
}

/// Whether a packet of `service` is a fragment placed by its flow
/// (`fragments = "follow_flow"`, TCP and UDP).
#[inline(always)]
pub(crate) fn follows_flow(service: &ServiceState, meta: &PacketMeta) -> bool {
    // The packet's own flag first: every other packet stops there, without
    // reading the service.
    meta.fragmented && service.follow_fragments && (meta.proto == TCP || meta.proto == UDP)
}

/// Stage 1 of a tracked packet the general path classified: the conntrack
/// shard is far larger than the caches, so each tracked packet's key is
/// built and hashed and its home entry requested before any packet of the
/// burst is delivered, and the misses overlap instead of queueing up one
/// packet at a time. Writes the key and hash into `out` and says whether
/// it did (not when untracked); stage 2 takes them back through
/// [`deliver_tracked`], and the burst's lookahead checks the home entry a
/// few packets before.
#[inline]
fn prefetch_conntrack(
    frame: &[u8],
    b: &Balance,
    state: &ForwardingState,
    ctx: &PipelineCtx,
    out: &mut Tracked,
) -> bool {
    // CT-2/CT-4: untracked packets (UDP under NONE, ICMP, …) skip this
    // before touching the snapshot or the frame.
    if !b.keyed_in_stage_one() {
        return false;
    }
    let Some(service) = state.service(b.service) else {
        return false;
    };
    let Some(addrs) = Addrs::from_frame(frame, &b.layout) else {
        return false;
    };
    let Some(key) = conntrack::tracking_key(&b.meta, &addrs, b.service, service) else {
        return false;
    };
    *out = Tracked::new(key, &ctx.conntrack);
    // CT-1: a SYN most likely opens a key the shard does not hold yet.
    ctx.conntrack
        .prefetch_home(out.hash, conntrack::policy::is_syn(&b.meta));
    true
}

/// [`deliver`] for a tracked packet whose key and shard hash stage 1
/// left ([`classify_keyed_into`]): an established flow's packet on its
/// recorded backend through [`established::forward`], any other through
/// the general stage 2.
#[inline(always)]
pub(crate) fn deliver_tracked<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    t: &Tracked,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    match established::forward(pkt, b, t, state, &mut ctx.conntrack, ctx.now) {
        Some(v) => v,
        None => deliver_tracked_general(pkt, b, t, state, ctx),
    }
}

/// The general stage 2 for a packet the established lane declined: its
/// frame is unchanged, so the fast path classifies it as stage 1 did
/// (without counting it under its rule again), and its `Balance` — flow
/// hash included, which the lane did without — goes where a SYN's goes.
#[inline(never)]
pub(crate) fn deliver_lane_declined<P: PacketBuf>(
    pkt: &mut P,
    t: &Tracked,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    let mut stage = Stage::UNSTAGED;
    if crate::fast_path::classify_ipv4_into(pkt.data(), state, &mut stage, None).is_none() {
        return Verdict::Drop(DropReason::Internal);
    }
    match stage {
        Stage::Balance(b) => deliver(pkt, &b, Some(t), state, ctx),
        Stage::Done(v) => v,
    }
}

/// The general stage 2 for a packet the stateless lane declined
/// (`stateless`: zonal tables, no backend, a packet the prebuilt header
/// does not fit): its frame is unchanged, so its `Balance` is made again
/// from the lane's record and the frame's ports.
#[inline(never)]
pub(crate) fn deliver_stateless_declined<P: PacketBuf>(
    pkt: &mut P,
    s: &StatelessPacket,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    match crate::fast_path::stateless_stage(pkt.data(), s) {
        Stage::Balance(b) => deliver(pkt, &b, None, state, ctx),
        Stage::Done(v) => v,
    }
}

/// The general stage 2 for a tracked packet the established lane declined
/// (new, re-selected or odd ones): out of line, so that the untracked
/// traffic's [`deliver`] stays inlined where the burst delivers it.
#[inline(never)]
fn deliver_tracked_general<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    t: &Tracked,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    deliver(pkt, b, Some(t), state, ctx)
}

/// Stage 2: pick the backend (connection tracking, SPEC §3, over the
/// Maglev table) and encapsulate. Oversize packets are answered with ICMP
/// (DF, IPv6) or left whole for the worker to fragment (IPv4 without DF,
/// [`Verdict::Fragment`]), AP-3. `tracked`: the packet's tracking key and
/// shard hash when stage 1 built them; None: built here if the packet is
/// tracked. Always inlined: for untracked traffic it is the whole of stage
/// 2 (the tracked fallback is a function of its own).
#[inline(always)]
pub(crate) fn deliver<P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    tracked: Option<&Tracked>,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    match deliver_inner::<true, P>(pkt, b, tracked, state, ctx) {
        Ok(v) => v,
        Err(reason) => {
            ctx.opened = false;
            Verdict::Drop(reason)
        }
    }
}

/// Stage 2 of a balanced packet; `FOLLOW`: a `follow_flow` fragment is
/// placed by its flow first ([`deliver_following`], which delivers the
/// placed packet with `FOLLOW` false).
#[inline(always)]
fn deliver_inner<const FOLLOW: bool, P: PacketBuf>(
    pkt: &mut P,
    b: &Balance,
    tracked: Option<&Tracked>,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Result<Verdict, DropReason> {
    let service = state.service(b.service).ok_or(DropReason::NoBackend)?;
    if FOLLOW && follows_flow(service, &b.meta) {
        return deliver_following(pkt, b, service, state, ctx);
    }
    // CT-2: an untracked packet of a service without zonal tables is hashed
    // onto its one table: no addresses to read back, no shard to consult.
    let selected = if b.icmp_error {
        icmp_error::backend(pkt.data(), b, service, state, &mut ctx.conntrack, ctx.now)
            .map(Selection::stateless)
    } else if b.quic != QuicAt::NONE {
        select_quic(pkt.data(), b, service, state, ctx)
    } else if !b.tracked && service.tables.len() <= 1 {
        service
            .tables
            .first()
            .and_then(|t| t.lookup(b.hash))
            .map(Selection::stateless)
    } else {
        select_backend(pkt.data(), b, tracked, service, state, ctx)
    }
    .ok_or(DropReason::NoBackend)?;
    let id = selected.backend;
    // Left set only when the packet is forwarded (cleared on the paths that
    // drop or answer it): a new connection to `id`.
    if selected.opened {
        ctx.opened = true;
    }
    // The common case: a prebuilt outer header for an inner IPv4 packet
    // within the MTU (everything else falls through, packet untouched).
    if let Some(h) = state.lane_backends.header(id) {
        if h.apply(pkt, &b.layout, b.hash) {
            return Ok(Verdict::Forward {
                port: h.port,
                backend: id,
            });
        }
    }
    let backend = state.backend(id).ok_or(DropReason::NoBackend)?;
    let port = state
        .ports
        .get(usize::from(backend.egress.port))
        .ok_or(DropReason::NextHopUnresolved)?;
    let encap = service.encapsulation;
    if let Err(e) = encap::encapsulate(pkt, b.layout, encap, backend, port, b.hash) {
        if e != DropReason::MtuExceeded {
            return Err(e);
        }
        // AP-3, cold paths reached only after the MTU comparison failed:
        // an oversize IPv4 packet without DF, or an IPv6 packet of at most
        // 1280 bytes in a tunnel, is fragmented; the client of any other is
        // answered with the MTU of the path to this backend.
        if !fragment::fragmentable(&b.layout, encap) {
            ctx.opened = false;
            let replies = &mut ctx.icmp_replies;
            return Ok(icmp::answer_mtu_exceeded(
                pkt, b, id, state, replies, ctx.now,
            ));
        }
        let ids = &mut ctx.fragment_ids;
        fragment::prepare(pkt, &b.layout, encap, backend, port, b.hash, ids)?;
        return Ok(Verdict::Fragment {
            port: backend.egress.port,
            backend: id,
        });
    }
    Ok(Verdict::Forward {
        port: backend.egress.port,
        backend: id,
    })
}

/// The backend of a UDP packet of a QUIC-LB service: the one its
/// connection ID names (`QuicLbRouting::route`) while its connection stays
/// there (`quic_connection_stays`), else the ordinary path's — the
/// tracking key built here, since stage 1 left none. Counted either way.
#[inline(never)]
fn select_quic(
    frame: &[u8],
    b: &Balance,
    service: &ServiceState,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Option<Selection> {
    let decision = match service.quic_lb.as_deref() {
        Some(routing) => routing.route(b.quic.payload(frame, &b.layout)),
        None => Decision::Fallback(Fallback::TooShort),
    };
    let reason = match decision {
        Decision::Routed(server) => match quic_connection_stays(server, service, state, ctx.now) {
            Ok(id) => {
                ctx.quic_lb.routed += 1;
                return Some(Selection::stateless(id));
            }
            Err(reason) => reason,
        },
        Decision::Fallback(reason) => reason,
    };
    ctx.quic_lb.count_fallback(reason);
    select_backend(frame, b, None, service, state, ctx)
}

/// The backend of a packet through connection tracking (SPEC §3) and the
/// client's zone table (ZA-3), and whether it opened a conntrack entry.
#[inline]
fn select_backend(
    frame: &[u8],
    b: &Balance,
    tracked: Option<&Tracked>,
    service: &ServiceState,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Option<Selection> {
    if let Some(t) = tracked {
        return conntrack::session::select_tracked(
            &mut ctx.conntrack,
            &b.meta,
            &t.key,
            t.hash,
            service,
            || service.table_for_client(&state.zones, t.key.src_ip()),
            state,
            b.hash,
            ctx.now,
        );
    }
    // Unreachable for a parsed frame; stateless Maglev then.
    let Some(addrs) = Addrs::from_frame(frame, &b.layout) else {
        return service
            .table_for(None)
            .and_then(|t| t.lookup(b.hash))
            .map(Selection::stateless);
    };
    // ZA-3: the client's zone table (the zone lookup only runs for
    // services that have zonal tables).
    let table = || service.table_for_client(&state.zones, addrs.src_ip());
    // CT-2, CT-4: hash every packet, record nothing.
    let Some(key) = conntrack::tracking_key(&b.meta, &addrs, b.service, service) else {
        return table()
            .and_then(|t| t.lookup(b.hash))
            .map(Selection::stateless);
    };
    let h = ctx.conntrack.hash(&key);
    conntrack::session::select_tracked(
        &mut ctx.conntrack,
        &b.meta,
        &key,
        h,
        service,
        table,
        state,
        b.hash,
        ctx.now,
    )
}

/// AP-4: packets to one of the ports' own addresses, and IPv6 neighbour
/// discovery sent to multicast (solicitations, router advertisements) or to
/// link-local unicast (neighbour unreachability probes to the kernel's
/// link-local address), go to the kernel.
fn is_for_appliance(ip: &IpInfo, state: &ForwardingState) -> bool {
    is_own_address(state, ip.dst) || is_neighbour_discovery(ip)
}

fn is_neighbour_discovery(ip: &IpInfo) -> bool {
    // Router solicitation 133 … redirect 137 (RFC 4861 §4).
    let nd_type = matches!(ip.icmp_type, Some(133..=137));
    let to_link = match ip.dst {
        IpAddr::V6(a) => a.is_multicast() || is_unicast_link_local(a),
        IpAddr::V4(_) => false,
    };
    ip.protocol == ICMPV6 && nd_type && to_link
}

fn is_unicast_link_local(a: Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}
