//! Connection tracking (SPEC §3): one [`Shard`] per worker, owned by it
//! (no locks, no shared writes, AP-1).
//!
//! - [`policy`]: the pure rules — which packets are tracked (CT-2, CT-4),
//!   their tracking key (CT-3 table), what a SYN does (CT-1), who persists on
//!   an unhealthy backend (CT-8).
//! - `session`: the per-packet decision against the shard and the
//!   snapshot (CT-1 … CT-11).
//! - `shard`: the fixed-capacity table.

pub mod policy;
pub(crate) mod session;
pub(crate) mod shard;

pub use session::select;
pub(crate) use session::tracking_key;
pub(crate) use shard::Home;
pub use shard::{Entry, Shard};

use crate::flow::TupleKind;
use crate::ids::ServiceId;
use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::{IpInfo, L3Layout, Ports};

/// What stage 2 needs of a packet besides its addresses: small and free of
/// `IpAddr` so it rides in the burst's stage array cheaply.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct PacketMeta {
    pub proto: u8,
    /// TCP flag byte; 0 for other protocols and non-first fragments.
    pub tcp_flags: u8,
    /// HA-2 (first fragment included).
    pub fragmented: bool,
    pub ports: Option<Ports>,
}

impl PacketMeta {
    #[inline]
    pub(crate) fn of(ip: &IpInfo) -> Self {
        Self {
            proto: ip.protocol,
            tcp_flags: ip.tcp_flags,
            fragmented: ip.fragment.is_fragmented(),
            ports: ip.ports,
        }
    }
}

/// Source and destination addresses as 128-bit values split in two words
/// (IPv4: `[0, addr]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Addrs {
    pub(crate) src: [u64; 2],
    pub(crate) dst: [u64; 2],
    pub(crate) v6: bool,
}

impl Addrs {
    pub fn new(src: std::net::IpAddr, dst: std::net::IpAddr) -> Self {
        let words = |a: std::net::IpAddr| match a {
            std::net::IpAddr::V4(a) => [0, u64::from(u32::from(a))],
            std::net::IpAddr::V6(a) => {
                let b = u128::from(a);
                [(b >> 64) as u64, b as u64]
            }
        };
        Self {
            src: words(src),
            dst: words(dst),
            v6: matches!(src, std::net::IpAddr::V6(_)),
        }
    }

    /// The source address (the client), e.g. for its zone (ZA-3).
    pub(crate) fn src_ip(&self) -> std::net::IpAddr {
        if self.v6 {
            let bits = (u128::from(self.src[0]) << 64) | u128::from(self.src[1]);
            std::net::IpAddr::V6(bits.into())
        } else {
            std::net::IpAddr::V4((self.src[1] as u32).into())
        }
    }

    /// The destination address (the VIP).
    pub(crate) fn dst_ip(&self) -> std::net::IpAddr {
        if self.v6 {
            let bits = (u128::from(self.dst[0]) << 64) | u128::from(self.dst[1]);
            std::net::IpAddr::V6(bits.into())
        } else {
            std::net::IpAddr::V4((self.dst[1] as u32).into())
        }
    }

    /// Reads the addresses back from the (already parsed, not yet
    /// rewritten) frame: cheaper than carrying two `IpAddr`s between the
    /// stages, and the IP header's line is in cache. None when the frame
    /// is too short for the fixed IP header (it cannot be, once parsed).
    #[inline]
    pub(crate) fn from_frame(frame: &[u8], layout: &L3Layout) -> Option<Self> {
        let ip = frame.get(layout.l3_offset..)?;
        match layout.ethertype {
            ETHERTYPE_IPV4 => {
                let h = Ipv4Packet::new_unchecked(ip.first_chunk::<{ ipv4::HEADER_LEN }>()?);
                Some(Self {
                    src: [0, u64::from(u32::from(h.src_addr()))],
                    dst: [0, u64::from(u32::from(h.dst_addr()))],
                    v6: false,
                })
            }
            ETHERTYPE_IPV6 => {
                let h = Ipv6Packet::new_unchecked(ip.first_chunk::<{ ipv6::HEADER_LEN }>()?);
                let words = |a: u128| [(a >> 64) as u64, a as u64];
                Some(Self {
                    src: words(u128::from(h.src_addr())),
                    dst: words(u128::from(h.dst_addr())),
                    v6: true,
                })
            }
            _ => None,
        }
    }
}

/// A packet's tracking key and its shard hash, computed once per packet
/// by the worker's stage 1 and handed to stage 2.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Tracked {
    pub(crate) key: TrackKey,
    pub(crate) hash: u64,
}

impl Tracked {
    /// `key` with `shard`'s hash of it and its home there.
    #[inline(always)]
    pub(crate) fn new(key: TrackKey, shard: &Shard) -> Self {
        Self {
            hash: shard.hash(&key),
            key,
        }
    }
}

/// A tracking key (CT-3): the fields its tuple kind uses, plus the service
/// (two services may share a VIP with different port ranges, and a 2-tuple
/// key must not mix them). 40 bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct TrackKey {
    pub src: [u64; 2],
    pub dst: [u64; 2],
    /// dst port (bits 0–15), src port (16–31), protocol (32–39), tuple kind
    /// (40–41), IPv6 (42), service (48–63); unused fields are 0.
    pub meta: u64,
}

impl TrackKey {
    /// The client's address (every tuple kind keeps it), e.g. for its zone
    /// (ZA-3).
    pub fn src_ip(&self) -> std::net::IpAddr {
        Addrs {
            src: self.src,
            dst: self.dst,
            v6: self.is_v6(),
        }
        .src_ip()
    }

    /// Whether its addresses are IPv6 (`meta` bit 42).
    #[inline(always)]
    pub fn is_v6(&self) -> bool {
        self.meta & (1 << 42) != 0
    }

    /// Its tuple kind (CT-3).
    pub fn kind(&self) -> TupleKind {
        match (self.meta >> 40) & 3 {
            0 => TupleKind::Two,
            1 => TupleKind::Three,
            _ => TupleKind::Five,
        }
    }

    /// Its protocol (0 in a 2-tuple key, which does not record it).
    pub fn proto(&self) -> u8 {
        (self.meta >> 32) as u8
    }

    /// The VIP's address (every tuple kind keeps it).
    pub fn dst_ip(&self) -> std::net::IpAddr {
        Addrs {
            src: self.dst,
            dst: self.src,
            v6: self.is_v6(),
        }
        .src_ip()
    }

    /// The service the key was built for.
    #[inline(always)]
    pub fn service(&self) -> ServiceId {
        ServiceId((self.meta >> 48) as u16)
    }

    pub fn new(kind: TupleKind, a: &Addrs, m: &PacketMeta, service: ServiceId) -> Self {
        let (kind_bits, proto, ports) = match (kind, m.ports) {
            (TupleKind::Two, _) => (0u64, 0u64, 0u64),
            (TupleKind::Five, Some(p)) => (
                2,
                u64::from(m.proto),
                (u64::from(p.src) << 16) | u64::from(p.dst),
            ),
            (TupleKind::Three | TupleKind::Five, _) => (1, u64::from(m.proto), 0),
        };
        Self {
            src: a.src,
            dst: a.dst,
            meta: ports
                | (proto << 32)
                | (kind_bits << 40)
                | (u64::from(a.v6) << 42)
                | (u64::from(service.0) << 48),
        }
    }
}
