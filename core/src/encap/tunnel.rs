//! What a tunnel is, to the rest of the encapsulation: the [`Tunnel`]
//! trait each tunnel's file implements, the [`Carrier`] its outer header's
//! protocol field names, and its integer [`ConfigKey`]s.

use crate::drop_reason::DropReason;
use crate::wire::ethernet::MacAddr;
use crate::wire::proto::{IPV4_IN_IP, IPV6_IN_IP, UDP};
use crate::wire::udp;

/// One tunnel: what sluice derives its handling from (`encap`'s module
/// docs: the registry).
pub(crate) trait Tunnel: Copy {
    /// Its `encapsulation` value in the configuration.
    const NAME: &'static str;
    /// Its configuration keys besides `encapsulation`; a service of any
    /// other encapsulation may not set them.
    const KEYS: &'static [ConfigKey] = &[];
    /// The tunnel with every key at its default.
    const DEFAULT: Self;
    /// Bytes of its own header, after the carrier's UDP header if any and
    /// before the inner IP packet.
    const HEADER_LEN: usize;

    /// What the outer IP header's protocol field names.
    fn carrier(self) -> Carrier;

    /// Writes its header into `hdr` (`HEADER_LEN` bytes) in front of an
    /// inner packet of `inner_ethertype` (IPv4 or IPv6), sent from a port
    /// whose MAC is `port_mac` (what a tunnel carrying Ethernet frames
    /// names as their source).
    fn emit(
        self,
        hdr: &mut [u8],
        inner_ethertype: u16,
        port_mac: MacAddr,
    ) -> Result<(), DropReason>;

    /// The tunnel with each of [`Self::KEYS`] set to `value(key)`, which
    /// the caller has checked against the key's kind and range.
    fn configure(self, value: &mut impl FnMut(&ConfigKey) -> u64) -> Self {
        let _ = value;
        self
    }

    /// [`Self::NAME`], from a value (as `dispatch!` holds one).
    fn name(self) -> &'static str {
        Self::NAME
    }

    /// [`Self::KEYS`], from a value.
    fn keys(self) -> &'static [ConfigKey] {
        Self::KEYS
    }

    /// Bytes between the outer IP header and the inner packet.
    #[inline(always)]
    fn tunnel_len(self) -> usize {
        self.carrier().header_len() + Self::HEADER_LEN
    }
}

/// What follows the outer IP header, as its protocol field names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Carrier {
    /// An IP protocol of the tunnel's own (GRE: 47).
    Protocol(u8),
    /// The inner packet's family: IPv4-in-IP (4) or IPv6-in-IP (41).
    InnerFamily,
    /// UDP (17) to `port`. The UDP header is written here for every UDP
    /// tunnel: source port from the flow hash (`udp_src_port`), checksum
    /// 0 over IPv4 and computed over IPv6.
    Udp { port: u16 },
}

impl Carrier {
    /// The outer IP protocol / next header for an inner packet of the
    /// given family.
    #[inline(always)]
    pub(crate) const fn protocol(self, inner_v6: bool) -> u8 {
        match self {
            Carrier::Protocol(p) => p,
            Carrier::InnerFamily if inner_v6 => IPV6_IN_IP,
            Carrier::InnerFamily => IPV4_IN_IP,
            Carrier::Udp { .. } => UDP,
        }
    }

    /// Bytes of the carrier's own header (the UDP header).
    #[inline(always)]
    pub(crate) const fn header_len(self) -> usize {
        match self {
            Carrier::Udp { .. } => udp::HEADER_LEN,
            _ => 0,
        }
    }
}

/// A configuration key of a tunnel (`gue_port`, `geneve_vni`,
/// `vxlan_mac`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConfigKey {
    pub name: &'static str,
    pub kind: KeyKind,
}

/// What a [`ConfigKey`] holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// An integer in `min..=max`, `default` when not set.
    Int { default: u32, min: u32, max: u32 },
    /// A MAC address, passed to [`Tunnel::configure`] as the low 48 bits
    /// of the value (first byte most significant). It has no default:
    /// the configuration must set it.
    Mac,
}

impl ConfigKey {
    /// An integer key.
    pub const fn int(name: &'static str, default: u32, min: u32, max: u32) -> Self {
        ConfigKey {
            name,
            kind: KeyKind::Int { default, min, max },
        }
    }

    /// A MAC address key.
    pub const fn mac(name: &'static str) -> Self {
        ConfigKey {
            name,
            kind: KeyKind::Mac,
        }
    }

    /// The value [`Tunnel::DEFAULT`] holds for it (0 for a MAC: unset).
    pub const fn default_value(&self) -> u64 {
        match self.kind {
            KeyKind::Int { default, .. } => default as u64,
            KeyKind::Mac => 0,
        }
    }
}

/// A MAC address as a [`KeyKind::Mac`] value carries it.
pub const fn mac_value(mac: MacAddr) -> u64 {
    let [a, b, c, d, e, f] = mac;
    u64::from_be_bytes([0, 0, a, b, c, d, e, f])
}

/// The MAC address in a [`KeyKind::Mac`] value.
pub(super) const fn value_mac(value: u64) -> MacAddr {
    let [_, _, a, b, c, d, e, f] = value.to_be_bytes();
    [a, b, c, d, e, f]
}
