//! What the two stages of the pipeline hand on: stage 1's outcome for a
//! packet ([`Stage`], with the [`Balance`] stage 2 consumes) and the
//! pipeline's answer ([`Verdict`]), and the pieces of stage 1 that its two
//! implementations — the general path (`pipeline`) and the IPv4 fast path
//! (`fast_path`) — share. Both sit above this module, so neither depends
//! on the other's module, and the cold paths stage 2 calls (`icmp`) do not
//! depend on the pipeline either.

use std::net::IpAddr;

use crate::conntrack::{Home, PacketMeta, Tracked};
use crate::drop_reason::DropReason;
use crate::ids::{BackendId, ServiceId};
use crate::rules::RuleMiss;
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::wire::L3Layout;

/// What the worker does with a packet after `pipeline::process`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) packet on `port`; it went to `backend`.
    Forward { port: u16, backend: BackendId },
    /// Like `Forward`, but the rewritten packet exceeds `port`'s MTU and
    /// may be fragmented (AP-3: IPv4 without DF): the worker splits it with
    /// `fragment::plan` / `fragment::split` to that port's MTU (in the
    /// snapshot's `PortState`) and transmits every fragment.
    Fragment { port: u16, backend: BackendId },
    /// Addressed to the appliance itself: hand to the exception path (AP-4).
    Punt,
    /// The packet was rewritten into an answer to its sender (ICMP
    /// fragmentation-needed / packet-too-big, AP-3): transmit it on the
    /// port it was received on.
    Reply,
    /// Drop and count under the reason.
    Drop(DropReason),
    /// `fragments = "follow_flow"`: a later fragment whose datagram's
    /// first fragment this worker has not seen yet. The worker keeps it
    /// (at most `fragment_flows::HELD`) and decides it again once a first
    /// fragment is learnt, or drops it after `fragment_flows::HOLD_MS`.
    Hold,
}

/// The first stage's outcome for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Decided already (punt or drop).
    Done(Verdict),
    /// To be load-balanced: the second stage picks the backend and
    /// encapsulates.
    Balance(Balance),
}

impl Stage {
    /// A slot before stage 1 has run on it: delivered as it is, it is
    /// counted as an `internal` drop, never forwarded.
    pub(crate) const UNSTAGED: Stage = Stage::Done(Verdict::Drop(DropReason::Internal));
}

impl Default for Stage {
    fn default() -> Self {
        Stage::UNSTAGED
    }
}

/// A packet for a VIP: where its IP packet is, its service and flow hash.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Balance {
    pub(crate) layout: L3Layout,
    pub(crate) service: ServiceId,
    pub(crate) hash: u64,
    /// Protocol, TCP flags, fragment status, ports: what conntrack needs
    /// besides the addresses (which stage 2 reads back from the frame).
    pub(crate) meta: PacketMeta,
    /// Whether the service tracks this packet's protocol (CT-2, CT-4).
    pub(crate) tracked: bool,
    /// HA-4: an ICMP error steered by the flow it quotes; stage 2 looks the
    /// quoted flow up in the shard (without recording anything).
    pub(crate) icmp_error: bool,
    /// A UDP packet of a QUIC-LB service, routed by its connection ID in
    /// stage 2 (`quic_lb`), or [`QuicAt::NONE`].
    pub(crate) quic: QuicAt,
}

impl Balance {
    /// Whether stage 1 builds its tracking key and requests its entry:
    /// a tracked packet balanced by its flow. (A QUIC-LB packet that
    /// falls back builds its key in stage 2: few packets of a connection
    /// do.) A tracked QUIC-LB packet is still steered to its flow's owner,
    /// where a fallback's entry belongs.
    #[inline(always)]
    pub(crate) fn keyed_in_stage_one(&self) -> bool {
        self.tracked && self.quic == QuicAt::NONE
    }
}

/// Where a QUIC-LB packet's UDP payload starts in its frame: one byte, so
/// that the mark costs the packets of other services nothing (a
/// `Balance` stays 48 bytes; the decision itself carried in it measured
/// +29 instructions per packet on UDP, +24 on SYNs).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct QuicAt(pub(crate) u8);

impl QuicAt {
    /// Not a packet of a QUIC-LB service.
    pub(crate) const NONE: QuicAt = QuicAt(0);
    /// A payload from byte 255 on (behind a chain of IPv6 extension
    /// headers no QUIC client sends): stage 2 takes it as too short.
    pub(crate) const TOO_DEEP: QuicAt = QuicAt(u8::MAX);

    /// The mark of a payload at `offset`.
    #[inline(always)]
    pub(crate) fn at(offset: usize) -> Self {
        QuicAt(offset.min(usize::from(u8::MAX)) as u8)
    }

    /// The UDP payload of `frame`, whose IP packet is laid out as `layout`
    /// says; empty when too deep or cut.
    #[inline]
    pub(crate) fn payload<'f>(self, frame: &'f [u8], layout: &L3Layout) -> &'f [u8] {
        if self == Self::TOO_DEEP {
            return &[];
        }
        frame
            .get(usize::from(self.0)..layout.l3_offset + layout.ip_len)
            .unwrap_or_default()
    }
}

const _: () = assert!(std::mem::size_of::<Balance>() <= 48);

/// Where the IP packet of a tracked, non-SYN IPv4 packet is, as the fast
/// path leaves it for the established lane (`established`): its tracking
/// key and shard hash travel beside it, and nothing else does — no flow
/// hash (a hit never consults a table) and no [`Balance`]. A packet the
/// lane declines is classified again from its unchanged frame.
// Public for core/tests/fast_path.rs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LanePacket {
    /// The IPv4 header's offset in the frame: 14, or 18 behind a tag.
    pub(crate) l3_offset: u8,
    pub(crate) dont_fragment: bool,
    /// IPv4 total length.
    pub(crate) ip_len: u16,
    /// Where its key's lookup starts (derived once, in stage 1).
    pub(crate) home: Home,
}

impl LanePacket {
    /// The packet's layout as the encapsulation reads it.
    #[inline(always)]
    pub(crate) fn layout(&self) -> L3Layout {
        L3Layout::ipv4(
            usize::from(self.l3_offset),
            usize::from(self.ip_len),
            self.dont_fragment,
        )
    }
}

/// An untracked UDP packet of the rule `fast_path::classify_stateless`
/// took (an untagged, option-less, unfragmented IPv4 packet, CT-2, CT-4),
/// as it leaves it for the stateless lane (`stateless`): what stage 2
/// reads to pick its backend and prepend its outer header, and nothing
/// else — not the 48-byte [`Balance`], whose other fields are the same
/// for every such packet or read back from the frame
/// (`fast_path::stateless_stage`) when the lane declines it.
// Public for core/tests/fast_path.rs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StatelessPacket {
    /// The flow hash (the Maglev table's, and a UDP tunnel's source port).
    pub(crate) hash: u64,
    pub(crate) service: ServiceId,
    /// IPv4 total length.
    pub(crate) ip_len: u16,
    pub(crate) dont_fragment: bool,
}

const _: () = assert!(std::mem::size_of::<StatelessPacket>() <= 16);

impl StatelessPacket {
    /// The packet's layout as the encapsulation reads it: untagged IPv4.
    #[inline(always)]
    pub(crate) fn layout(&self) -> L3Layout {
        L3Layout::ipv4(
            crate::wire::ethernet::HEADER_LEN,
            usize::from(self.ip_len),
            self.dont_fragment,
        )
    }
}

/// Where stage 1 writes a tracked packet's records: its key and shard
/// hash, and for the established lane where its IP packet is.
// Public for core/tests/fast_path.rs.
#[derive(Debug)]
pub struct KeyedOut<'a> {
    pub tracked: &'a mut Tracked,
    pub lane: &'a mut LanePacket,
}

/// What stage 1 left for one packet of a burst: which of its records
/// stage 2 reads.
// Public for core/tests/fast_path.rs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Keyed {
    /// Its [`Stage`] only: decided already, or untracked.
    #[default]
    Staged,
    /// Its [`Stage`] (a [`Balance`]) and its tracking key.
    StagedTracked,
    /// A [`LanePacket`] and its tracking key; no `Stage` was written.
    Lane,
    /// A [`StatelessPacket`] only; no `Stage` was written.
    Stateless,
    /// Handed to another worker (its slot's `steer_to`), whatever stage 1
    /// wrote: set by the steering pass after stage 1, so that stage 2's
    /// one test of `Keyed` also tells a steered packet from the lanes'.
    Steered,
}

/// Starts loading the Maglev slot stage 2 will read for `hash`: at once
/// for an untracked packet; for a tracked one only when the conntrack
/// lookahead finds that it will need the table (a new key, or one away
/// from its home slot), since a hit never reads it.
#[inline(always)]
pub(crate) fn prefetch_table(service: &ServiceState, hash: u64) {
    if let Some(table) = service.table_for(None) {
        table.prefetch(hash);
    }
}

/// One of the appliance's own port addresses.
pub(crate) fn is_own_address(state: &ForwardingState, addr: IpAddr) -> bool {
    state.ports.iter().any(|p| match addr {
        IpAddr::V4(a) => p.ipv4 == Some(a),
        IpAddr::V6(a) => p.ipv6 == Some(a),
    })
}

/// FR-1, AP-4: the verdict for a packet no rule takes — the exception path
/// when it is for the appliance (`for_appliance`, asked only for a
/// destination that is no VIP), else a counted drop. The general path and
/// the IPv4 fast path both decide misses here.
#[cold]
pub(crate) fn rule_miss(miss: RuleMiss, for_appliance: impl FnOnce() -> bool) -> Verdict {
    match miss {
        RuleMiss::NoRule => Verdict::Drop(DropReason::NoRule),
        RuleMiss::NotVip if for_appliance() => Verdict::Punt,
        RuleMiss::NotVip => Verdict::Drop(DropReason::NotForUs),
    }
}
