//! Delivery to the backend (AP-3): layer-2 DSR, or a tunnel in an outer
//! IPv4 or IPv6 header (the backend's family; the inner family may differ,
//! FR-5). The inner IP packet is never modified (DSR: the backend sees the
//! client's source and the VIP as destination).
//!
//! **The registry.** Each tunnel is one file and one `Tunnel`
//! implementation: its configuration name and keys, the length and bytes
//! of its own header, and what the outer header's protocol field names
//! (`Carrier`: an IP protocol of its own, the inner packet's family, or
//! UDP to a port). Everything else is derived from those, alike for every
//! tunnel: the outer IP header, a UDP tunnel's UDP header (source port
//! from the flow hash, checksum), the MTU check, the overhead that ICMP
//! answers and fragmentation count ([`overhead`]), the prebuilt headers of
//! the fast path (`outer_header`) and the configuration rules (the control
//! plane's `config::service`). [`Encapsulation`] lists the tunnels and
//! `dispatch!` is the one `match` over it: each arm binds a different
//! tunnel type, so generic code is compiled once per tunnel and the packet
//! path has no dynamic dispatch.
//!
//! A backend whose family the egress port has no address for yields
//! `EncapUnsupported`. An outer packet larger than the egress MTU yields
//! `MtuExceeded` with the packet untouched; the pipeline then answers with
//! ICMP (DF or IPv6, `icmp`) or encapsulates again without the limit and
//! fragments (IPv4 without DF, `fragment`), both off the common path.

use std::net::IpAddr;

use crate::backend::BackendState;
use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::port::PortState;
use crate::wire::{ipv4, ipv6, L3Layout};

mod geneve;
mod gre;
mod gue;
mod ipip;
mod l2;
mod outer;
mod tunnel;
mod udp;
mod vxlan;

pub use geneve::Geneve;
pub use gre::Gre;
pub use gue::Gue;
pub use ipip::Ipip;
use l2::Egress;
pub use outer::flow_label;
pub use tunnel::{mac_value, KeyKind};
pub(crate) use tunnel::{Carrier, ConfigKey, Tunnel};
pub use udp::udp_src_port;
pub use vxlan::Vxlan;

/// The longest [`Encapsulation::tunnel_len`] (VXLAN: UDP, its header and
/// the inner Ethernet header).
#[cfg(test)]
const MAX_TUNNEL_LEN: usize = 30;

/// How a service's packets reach its backends (AP-3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Encapsulation {
    /// Layer-2 DSR: rewrite the Ethernet header, backend on the same segment.
    L2,
    Gre(Gre),
    Ipip(Ipip),
    Gue(Gue),
    Geneve(Geneve),
    Vxlan(Vxlan),
}

/// The one `match` over [`Encapsulation`]: evaluates `$tunnel` with `$t`
/// bound to the tunnel (a different type in each arm), or `$l2` for
/// layer-2 DSR. `map` rewraps what `$tunnel` gives in the same variant.
macro_rules! dispatch {
    ($encap:expr, |$t:ident| $tunnel:expr, l2 => $l2:expr $(,)?) => {
        match $encap {
            $crate::encap::Encapsulation::L2 => $l2,
            $crate::encap::Encapsulation::Gre($t) => $tunnel,
            $crate::encap::Encapsulation::Ipip($t) => $tunnel,
            $crate::encap::Encapsulation::Gue($t) => $tunnel,
            $crate::encap::Encapsulation::Geneve($t) => $tunnel,
            $crate::encap::Encapsulation::Vxlan($t) => $tunnel,
        }
    };
    (map $encap:expr, |$t:ident| $tunnel:expr) => {{
        use $crate::encap::Encapsulation as E;
        match $encap {
            E::L2 => E::L2,
            E::Gre($t) => E::Gre($tunnel),
            E::Ipip($t) => E::Ipip($tunnel),
            E::Gue($t) => E::Gue($tunnel),
            E::Geneve($t) => E::Geneve($tunnel),
            E::Vxlan($t) => E::Vxlan($tunnel),
        }
    }};
}

impl Encapsulation {
    /// Every encapsulation, tunnels with their keys' defaults: the
    /// configuration's choices, in the order the documentation lists them.
    pub const ALL: [Encapsulation; 6] = [
        Encapsulation::L2,
        Encapsulation::Gre(Gre::DEFAULT),
        Encapsulation::Ipip(Ipip::DEFAULT),
        Encapsulation::Gue(Gue::DEFAULT),
        Encapsulation::Geneve(Geneve::DEFAULT),
        Encapsulation::Vxlan(Vxlan::DEFAULT),
    ];

    /// Its `encapsulation` value in the configuration.
    pub fn name(self) -> &'static str {
        dispatch!(self, |t| t.name(), l2 => "l2")
    }

    /// Its configuration keys besides `encapsulation`.
    pub fn keys(self) -> &'static [ConfigKey] {
        dispatch!(self, |t| t.keys(), l2 => &[])
    }

    /// The same encapsulation with each of its [`keys`](Self::keys) set to
    /// `value(key)` (within the key's range).
    pub fn configure(self, mut value: impl FnMut(&ConfigKey) -> u64) -> Self {
        dispatch!(map self, |t| t.configure(&mut value))
    }

    /// Whether delivering to `backend` reads the packet's flow hash: a UDP
    /// tunnel's source port, an IPv6 outer header's flow label.
    #[inline]
    pub(crate) fn takes_flow_hash(self, backend: IpAddr) -> bool {
        self.is_tunnel()
            && (backend.is_ipv6() || matches!(self.carrier(), Some(Carrier::Udp { .. })))
    }

    /// Whether it is a tunnel: an outer IP header, sourced from an egress
    /// port address of the backend's family, rather than layer-2 DSR.
    pub fn is_tunnel(self) -> bool {
        !matches!(self, Encapsulation::L2)
    }

    /// What the outer IP header's protocol field names; None for layer 2.
    pub(crate) fn carrier(self) -> Option<Carrier> {
        dispatch!(self, |t| Some(t.carrier()), l2 => None)
    }

    /// Bytes between the outer IP header and the inner packet (a UDP
    /// tunnel's UDP header included); 0 for layer 2.
    pub(crate) fn tunnel_len(self) -> usize {
        dispatch!(self, |t| t.tunnel_len(), l2 => 0)
    }
}

/// Rewrites the parsed frame `ip` in `pkt` for delivery to `backend` out of
/// `port` with `encap`. `flow_hash` feeds a UDP tunnel's source port and
/// the outer IPv6 flow label.
///
/// The packet is left untouched when an error is returned before any
/// header is written (all of them except, in theory, a buffer that shrank
/// between parse and encap).
pub fn encapsulate<P: PacketBuf>(
    pkt: &mut P,
    ip: impl Into<L3Layout>,
    encap: Encapsulation,
    backend: &BackendState,
    port: &PortState,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let limit = usize::from(port.mtu);
    let out = Egress {
        port,
        vlan: port.vlan,
        limit,
        to_fragment: false,
    };
    encapsulate_within(pkt, &ip.into(), encap, backend, out, flow_hash)
}

/// [`encapsulate`] with the IP length limit raised from the MTU to 65,535
/// bytes, for a packet about to be fragmented (AP-3: IPv4 without DF); a
/// packet beyond that is refused (`MtuExceeded`) before anything is
/// written, so every length field fits. The outer IPv4 header carries ID
/// 0 and DF clear (also around an IPv6 packet, which is only sent this way
/// when it is at most the IPv6 minimum MTU, RFC 4213 §3.2);
/// `fragment::prepare` sets the identification. The Ethernet header is
/// untagged whatever the port's VLAN: the fragments are cut behind a plain
/// header and the worker tags each one (`crate::vlan`).
pub(crate) fn encapsulate_oversize<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    encap: Encapsulation,
    backend: &BackendState,
    port: &PortState,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let out = Egress {
        port,
        vlan: None,
        limit: usize::from(u16::MAX),
        to_fragment: true,
    };
    encapsulate_within(pkt, ip, encap, backend, out, flow_hash)
}

/// The encapsulation, refusing (untouched) an IP packet that would leave
/// longer than `out.limit` bytes. Always inlined: [`encapsulate`] compiles
/// to what it was before fragmentation existed, the check one comparison.
#[inline(always)]
fn encapsulate_within<P: PacketBuf>(
    pkt: &mut P,
    ip: &L3Layout,
    encap: Encapsulation,
    backend: &BackendState,
    out: Egress<'_>,
    flow_hash: u64,
) -> Result<(), DropReason> {
    let next_hop = backend
        .egress
        .next_hop_mac
        .ok_or(DropReason::NextHopUnresolved)?;
    dispatch!(
        encap,
        |t| outer::tunnel(pkt, ip, t, backend.address, next_hop, out, flow_hash),
        l2 => l2::deliver(pkt, ip, next_hop, out),
    )
}

/// Bytes the encapsulation adds in front of the inner IP packet, counted
/// against the egress MTU (Ethernet excluded): what the path MTU
/// advertised to clients is reduced by.
// Public for core/tests/encap.rs, fragment.rs and icmp_reply.rs.
pub fn overhead(encap: Encapsulation, backend: IpAddr) -> usize {
    if !encap.is_tunnel() {
        return 0;
    }
    let outer = match backend {
        IpAddr::V4(_) => ipv4::HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    };
    outer + encap.tunnel_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_unique_across_the_registry() {
        let mut names: Vec<_> = Encapsulation::ALL.iter().map(|e| e.name()).collect();
        let mut keys: Vec<_> = Encapsulation::ALL
            .iter()
            .flat_map(|e| e.keys().iter().map(|k| k.name))
            .collect();
        let (n, k) = (names.len(), keys.len());
        names.sort_unstable();
        names.dedup();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!((names.len(), keys.len()), (n, k));
        for e in Encapsulation::ALL {
            for key in e.keys() {
                if let KeyKind::Int { default, min, max } = key.kind {
                    assert!(min <= default && default <= max, "{key:?}");
                }
            }
            // The defaults are what `configure` gives from the defaults.
            assert_eq!(e.configure(|k| k.default_value()), e);
            assert!(e.tunnel_len() <= MAX_TUNNEL_LEN, "{}", e.name());
        }
    }

    #[test]
    fn overhead_is_outer_header_plus_tunnel() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        let want = [(0, 0), (24, 44), (20, 40), (32, 52), (36, 56), (50, 70)];
        for (e, (o4, o6)) in Encapsulation::ALL.into_iter().zip(want) {
            assert_eq!((overhead(e, v4), overhead(e, v6)), (o4, o6), "{}", e.name());
        }
    }
}
