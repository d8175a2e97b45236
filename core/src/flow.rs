//! Flow keys and the flow hash (SPEC §2).
//!
//! The hash input depends on the service's session affinity and on the
//! packet's fragment status:
//!
//! | affinity | TCP, unfragmented UDP | fragments (HA-2), other protocols |
//! |---|---|---|
//! | `None`, `ClientIpPortProto` (HA-1) | 5-tuple | 3-tuple |
//! | `ClientIpProto` | 3-tuple | 3-tuple |
//! | `ClientIp` | 2-tuple | 2-tuple |
//!
//! The hash must agree across appliances (MG-2, AP-6), so its encoding is
//! fixed and documented on [`flow_hash`].

use std::net::IpAddr;

use crate::affinity::SessionAffinity;
use crate::hash::{stable_hash_bytes, stable_hash_pair, stable_hash_words};
use crate::wire::proto::{TCP, UDP};
use crate::wire::{IpInfo, Ports};

/// The seed of the flow hash: ASCII "sluiceFH". Part of the wire contract
/// between appliances; never change it silently.
// Public for core/tests/flow.rs.
pub const FLOW_HASH_SEED: u64 = 0x736c_7569_6365_4648;

/// The seed the flow hash runs under: [`FLOW_HASH_SEED`] by default, or
/// one derived from an operator's fleet key (`dataplane.flow_hash_key`),
/// so that appliances sharing the key agree on every flow's backend
/// (MG-2) while outsiders, who do not know it, cannot compute which
/// backend a crafted flow reaches. Carried in the snapshot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowSeed(u64);

impl Default for FlowSeed {
    /// No key: exactly the unkeyed flow hash (pinned by tests).
    fn default() -> Self {
        FlowSeed(FLOW_HASH_SEED)
    }
}

impl FlowSeed {
    /// The seed for a fleet key: the stable hash of its bytes under
    /// [`FLOW_HASH_SEED`], the same on every appliance and build.
    pub fn keyed(key: &[u8]) -> Self {
        FlowSeed(stable_hash_bytes(FLOW_HASH_SEED, key))
    }

    // Public for core/tests/flow.rs.
    #[inline(always)]
    pub fn get(self) -> u64 {
        self.0
    }
}

/// How many fields feed the hash.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TupleKind {
    /// src IP, dst IP.
    Two,
    /// src IP, dst IP, protocol.
    Three,
    /// src IP, src port, protocol, dst IP, dst port.
    Five,
}

/// A flow key reduced to the fields its tuple kind uses: `proto` is None for
/// a 2-tuple, `ports` None for 2- and 3-tuples. The constructors keep that
/// invariant; conntrack can use the same type as its tracking key.
// Public, with its constructors, for core/tests/flow.rs, icmp.rs and pipeline.rs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub(crate) proto: Option<u8>,
    pub(crate) ports: Option<Ports>,
}

/// Which tuple a packet hashes under `affinity` (SPEC §2).
///
/// `has_ports` means the packet is TCP or UDP and carries its ports;
/// `fragmented` is HA-2's definition (first fragment included).
// Public for core/tests/flow.rs.
pub fn tuple_kind(
    affinity: SessionAffinity,
    proto: u8,
    has_ports: bool,
    fragmented: bool,
) -> TupleKind {
    match affinity {
        SessionAffinity::ClientIp => TupleKind::Two,
        SessionAffinity::ClientIpProto => TupleKind::Three,
        // HA-1: NONE hashes exactly like CLIENT_IP_PORT_PROTO.
        SessionAffinity::None | SessionAffinity::ClientIpPortProto => {
            if has_ports && !fragmented && (proto == TCP || proto == UDP) {
                TupleKind::Five
            } else {
                TupleKind::Three
            }
        }
    }
}

impl FlowKey {
    pub fn two_tuple(src: IpAddr, dst: IpAddr) -> Self {
        Self {
            src,
            dst,
            proto: None,
            ports: None,
        }
    }

    pub fn three_tuple(src: IpAddr, dst: IpAddr, proto: u8) -> Self {
        Self {
            src,
            dst,
            proto: Some(proto),
            ports: None,
        }
    }

    pub fn five_tuple(src: IpAddr, dst: IpAddr, proto: u8, ports: Ports) -> Self {
        Self {
            src,
            dst,
            proto: Some(proto),
            ports: Some(ports),
        }
    }

    /// The key of `kind` for the packet's fields; a 5-tuple request without
    /// ports degrades to the 3-tuple.
    pub fn of_kind(
        kind: TupleKind,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        ports: Option<Ports>,
    ) -> Self {
        match (kind, ports) {
            (TupleKind::Two, _) => Self::two_tuple(src, dst),
            (TupleKind::Five, Some(p)) => Self::five_tuple(src, dst, proto, p),
            (TupleKind::Three | TupleKind::Five, _) => Self::three_tuple(src, dst, proto),
        }
    }

    /// The hash key of a parsed packet under `affinity` (SPEC §2, HA-1…3).
    pub fn for_packet(ip: &IpInfo, affinity: SessionAffinity) -> Self {
        let kind = tuple_kind(
            affinity,
            ip.protocol,
            ip.ports.is_some(),
            ip.fragment.is_fragmented(),
        );
        Self::of_kind(kind, ip.src, ip.dst, ip.protocol, ip.ports)
    }

    pub fn kind(&self) -> TupleKind {
        match (self.proto, self.ports) {
            (None, _) => TupleKind::Two,
            (Some(_), None) => TupleKind::Three,
            (Some(_), Some(_)) => TupleKind::Five,
        }
    }
}

const META_PROTO_PRESENT: u64 = 1 << 40;
const META_PORTS_PRESENT: u64 = 1 << 41;
const META_IPV6: u64 = 1 << 42;

fn v4_word(a: std::net::Ipv4Addr) -> u64 {
    u64::from(u32::from(a))
}

fn v6_words(a: std::net::Ipv6Addr) -> (u64, u64) {
    let bits = u128::from(a);
    ((bits >> 64) as u64, bits as u64)
}

/// The flow hash: [`stable_hash_words`] with seed [`FLOW_HASH_SEED`] (or
/// a fleet key's, [`flow_hash_seeded`]) over
///
/// - IPv4: [`stable_hash_pair`]`(seed, src << 32 | dst, meta)`, each
///   address as its 32-bit big-endian (network order) value — two
///   multiplies per packet;
/// - IPv6: [`stable_hash_words`] over
///   `[src_hi, src_lo, dst_hi, dst_lo, meta]`, each address as its
///   128-bit big-endian value split into the high and the low 64 bits
///   (a key mixing families, which parsing never produces, hashes both
///   addresses as IPv4-mapped IPv6);
///
/// where `meta` packs, from bit 0: dst port (bits 0–15), src port
/// (16–31), IP protocol (32–39), flag "protocol present" (bit 40), flag
/// "ports present" (bit 41), flag "IPv6" (bit 42); absent fields are 0.
///
/// Maglev takes the low 32 bits (scaled to the table); GUE takes bits 32–45 for its source
/// port, so the two users draw on different bits.
// Public for core/tests/flow.rs, icmp.rs, outer_header.rs and pipeline.rs.
pub fn flow_hash(key: &FlowKey) -> u64 {
    flow_hash_seeded(FlowSeed::default(), key)
}

/// [`flow_hash`] under `seed` (a fleet key's, see [`FlowSeed`]).
// Public for core/tests/flow.rs.
pub fn flow_hash_seeded(seed: FlowSeed, key: &FlowKey) -> u64 {
    hash_fields(seed, key.src, key.dst, key.proto, key.ports)
}

/// The flow hash of a parsed packet under `affinity`: exactly
/// `flow_hash(&FlowKey::for_packet(ip, affinity))`, without building the
/// key (the per-packet path needs only the hash).
// Public for core/tests/flow.rs and fragment.rs.
#[inline]
pub fn packet_hash(ip: &IpInfo, affinity: SessionAffinity) -> u64 {
    packet_hash_seeded(FlowSeed::default(), ip, affinity)
}

/// [`packet_hash`] under `seed` (the snapshot's, see [`FlowSeed`]).
#[inline]
pub(crate) fn packet_hash_seeded(seed: FlowSeed, ip: &IpInfo, affinity: SessionAffinity) -> u64 {
    let kind = tuple_kind(
        affinity,
        ip.protocol,
        ip.ports.is_some(),
        ip.fragment.is_fragmented(),
    );
    let (proto, ports) = match (kind, ip.ports) {
        (TupleKind::Two, _) => (None, None),
        (TupleKind::Five, Some(p)) => (Some(ip.protocol), Some(p)),
        (TupleKind::Three | TupleKind::Five, _) => (Some(ip.protocol), None),
    };
    hash_fields(seed, ip.src, ip.dst, proto, ports)
}

/// The flow hash of an unfragmented IPv4 TCP or UDP packet (addresses as
/// their big-endian values) under `affinity`: exactly what
/// [`packet_hash_seeded`] gives for it, computed from plain integers for
/// the worker's IPv4 fast path.
#[inline(always)]
pub(crate) fn ipv4_ports_hash(
    seed: FlowSeed,
    src: u32,
    dst: u32,
    proto: u8,
    ports: Ports,
    affinity: SessionAffinity,
) -> u64 {
    let (proto, ports) = match affinity {
        SessionAffinity::ClientIp => (None, None),
        SessionAffinity::ClientIpProto => (Some(proto), None),
        SessionAffinity::None | SessionAffinity::ClientIpPortProto => (Some(proto), Some(ports)),
    };
    let pair = (u64::from(src) << 32) | u64::from(dst);
    stable_hash_pair(seed.get(), pair, meta_word(proto, ports))
}

#[inline(always)]
fn meta_word(proto: Option<u8>, ports: Option<Ports>) -> u64 {
    let mut meta = 0u64;
    if let Some(p) = proto {
        meta |= META_PROTO_PRESENT | (u64::from(p) << 32);
    }
    if let Some(p) = ports {
        meta |= META_PORTS_PRESENT | (u64::from(p.src) << 16) | u64::from(p.dst);
    }
    meta
}

#[inline(always)]
fn hash_fields(
    seed: FlowSeed,
    src: IpAddr,
    dst: IpAddr,
    proto: Option<u8>,
    ports: Option<Ports>,
) -> u64 {
    let meta = meta_word(proto, ports);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            stable_hash_pair(seed.get(), (v4_word(s) << 32) | v4_word(d), meta)
        }
        (s, d) => {
            let to_v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let (sh, sl) = v6_words(to_v6(s));
            let (dh, dl) = v6_words(to_v6(d));
            stable_hash_words(seed.get(), &[sh, sl, dh, dl, meta | META_IPV6])
        }
    }
}

// Tests for every cell of the SPEC §2 table and HA-1…HA-3, and the pinned
// encoding, live in `tests/flow.rs` (they use only the public API).
