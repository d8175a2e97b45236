//! Health probes through the data path. A data-path probe is an ordinary
//! kernel socket on the appliance, from a port's own address to a VIP; its
//! packets reach the workers through the port's TAP like any packet the
//! kernel sends, and leave the way a client's packet to that VIP does —
//! encapsulated by the service's encapsulation — to the one backend the
//! probe is for. The backend answers as it answers a client: from the VIP,
//! by its own route, to the appliance's address, where the exception path
//! hands the answer to the kernel's socket. A probe thus passes only when
//! the whole path a client's connection takes works.
//!
//! [`ProbeTable`] is what the control plane and the workers share: the
//! control plane registers each probe socket's local port with the backend
//! it probes before the socket sends anything, and reads back what the
//! workers saw of it ([`Seen`]); the workers read it where the kernel's
//! packets leave ([`steer_outbound`]) and mark in it the answers they hand
//! to the kernel ([`note_inbound`]). One atomic word per protocol and local
//! port: no lock, a fixed 1 MiB, whatever the number of probes.
//!
//! Nothing here is on the path of client packets: only the kernel's
//! packets and the appliance's own are looked at.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};

use crate::drop_reason::DropReason;
use crate::encap;
use crate::ids::BackendId;
use crate::packet::PacketBuf;
use crate::snapshot::ForwardingState;
use crate::wire::proto::{TCP, UDP};
use crate::wire::{IpInfo, L3Layout};

/// The transport of a probe socket (a port space of its own).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProbeProto {
    Tcp,
    Udp,
}

impl ProbeProto {
    /// The probe protocol of an IP protocol number.
    pub fn of(protocol: u8) -> Option<Self> {
        match protocol {
            TCP => Some(ProbeProto::Tcp),
            UDP => Some(ProbeProto::Udp),
            _ => None,
        }
    }

    const fn base(self) -> usize {
        match self {
            ProbeProto::Tcp => 0,
            ProbeProto::Udp => PORTS,
        }
    }
}

/// Local ports per protocol.
const PORTS: usize = 1 << 16;

/// A word: the backend id + 1 in the low 32 bits (0: the port is not a
/// probe's), what the workers saw in the flag bits above, and the
/// registration's tag in the top 16 bits.
const BACKEND_MASK: u64 = 0xffff_ffff;
const TAG_SHIFT: u32 = 48;
/// At least one of the probe's packets left, encapsulated.
const SENT: u64 = 1 << 32;
/// One of its packets could not be sent (next hop unresolved, the backend
/// gone from the snapshot, beyond the MTU…): counted under its drop reason.
const NOT_SENT: u64 = 1 << 33;
/// An answer came from a VIP: the address a client's answer comes from.
const FROM_VIP: u64 = 1 << 34;
/// An answer came from the backend's own address, not the VIP.
const FROM_BACKEND: u64 = 1 << 35;
/// An answer came from any other address.
const FROM_OTHER: u64 = 1 << 36;
/// One of its packets was refused as beyond the egress MTU.
const TOO_BIG: u64 = 1 << 37;

/// What the workers saw of one probe socket since it was registered.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// At least one of its packets left, encapsulated to the backend.
    pub sent: bool,
    /// One of its packets could not be sent.
    pub not_sent: bool,
    /// One of its packets was beyond the egress MTU.
    pub too_big: bool,
    /// An answer came from a VIP.
    pub answer_from_vip: bool,
    /// An answer came from the backend's own address (it answers from the
    /// wrong address: the VIP is not where its server listens, or its
    /// route sends the answer from another one).
    pub answer_from_backend: bool,
    /// An answer came from another address.
    pub answer_from_other: bool,
}

/// Which backend each probe socket is for, and what the workers saw of it.
pub struct ProbeTable {
    words: Box<[AtomicU64]>,
    /// Ports registered: while none is, the workers look at nothing.
    active: AtomicUsize,
    /// The next registration's tag.
    tags: AtomicU16,
}

/// One registration of a local port: what releases it, and only it (the
/// kernel may give the port to another probe socket meanwhile).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub proto: ProbeProto,
    pub port: u16,
    tag: u16,
}

impl std::fmt::Debug for ProbeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeTable")
    }
}

impl Default for ProbeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeTable {
    /// An empty table (1 MiB: a word per TCP and UDP port).
    pub fn new() -> Self {
        Self {
            words: (0..2 * PORTS).map(|_| AtomicU64::new(0)).collect(),
            active: AtomicUsize::new(0),
            tags: AtomicU16::new(0),
        }
    }

    #[inline]
    fn word(&self, proto: ProbeProto, port: u16) -> Option<&AtomicU64> {
        self.words.get(proto.base() + usize::from(port))
    }

    /// The socket on local `port` probes `backend`; what was seen of an
    /// earlier socket on the port is forgotten. Call before it sends.
    pub fn register(&self, proto: ProbeProto, port: u16, backend: BackendId) -> Ticket {
        let tag = self.tags.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = self.word(proto, port) {
            let word = u64::from(tag) << TAG_SHIFT | (u64::from(backend.0) + 1);
            let was = w.swap(word, Ordering::AcqRel);
            if was & BACKEND_MASK == 0 {
                self.active.fetch_add(1, Ordering::Release);
            }
        }
        Ticket { proto, port, tag }
    }

    /// The registration is over: the port's packets are the kernel's
    /// again — unless another registration of the port came since, which
    /// stays.
    pub fn release(&self, ticket: Ticket) {
        let Some(w) = self.word(ticket.proto, ticket.port) else {
            return;
        };
        let mine = |v: u64| v & BACKEND_MASK != 0 && (v >> TAG_SHIFT) as u16 == ticket.tag;
        let released = w
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                mine(v).then_some(0)
            })
            .is_ok();
        if released {
            self.active.fetch_sub(1, Ordering::Release);
        }
    }

    /// Whether any probe socket is registered: the workers' one check on
    /// the kernel's packets and the appliance's answers while none is.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed) != 0
    }

    /// What the workers saw of the socket on local `port`.
    pub fn seen(&self, proto: ProbeProto, port: u16) -> Seen {
        let w = self
            .word(proto, port)
            .map_or(0, |w| w.load(Ordering::Acquire));
        Seen {
            sent: w & SENT != 0,
            not_sent: w & NOT_SENT != 0,
            too_big: w & TOO_BIG != 0,
            answer_from_vip: w & FROM_VIP != 0,
            answer_from_backend: w & FROM_BACKEND != 0,
            answer_from_other: w & FROM_OTHER != 0,
        }
    }

    /// The backend the socket on local `port` probes, if it is a probe's.
    #[inline]
    pub fn backend(&self, proto: ProbeProto, port: u16) -> Option<BackendId> {
        let w = self.word(proto, port)?.load(Ordering::Acquire);
        let id = (w & BACKEND_MASK).checked_sub(1)?;
        u32::try_from(id).ok().map(BackendId)
    }

    /// Adds `flag` to the word of a registered port (not to a free one:
    /// a flag raced by a release must not survive into the next socket).
    fn mark(&self, proto: ProbeProto, port: u16, flag: u64) {
        if let Some(w) = self.word(proto, port) {
            let _ = w.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v & BACKEND_MASK != 0).then_some(v | flag)
            });
        }
    }
}

/// What becomes of a packet the kernel sent on a port's TAP.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outbound {
    /// Not a probe's: sent on the port as it is.
    NotProbe,
    /// A probe's, now encapsulated to its backend: sent on `port` (the
    /// backend's egress port, by config index).
    Deliver { port: u16 },
    /// A probe's that cannot be sent, counted under the reason.
    Drop(DropReason),
}

/// Where the kernel's packets leave (`info` parsed from `pkt`): a probe
/// socket's packet is encapsulated to its backend by the service's
/// encapsulation (the code that delivers a client's packet), and the
/// table notes it was sent, or why it was not.
pub fn steer_outbound<P: PacketBuf>(
    pkt: &mut P,
    info: &IpInfo,
    state: &ForwardingState,
    table: &ProbeTable,
) -> Outbound {
    let (Some(proto), Some(ports)) = (ProbeProto::of(info.protocol), info.ports) else {
        return Outbound::NotProbe;
    };
    let Some(id) = table.backend(proto, ports.src) else {
        return Outbound::NotProbe;
    };
    match encapsulate(pkt, info, state, id) {
        Ok(port) => {
            table.mark(proto, ports.src, SENT);
            Outbound::Deliver { port }
        }
        Err(reason) => {
            let flag = if reason == DropReason::MtuExceeded {
                TOO_BIG
            } else {
                NOT_SENT
            };
            table.mark(proto, ports.src, flag);
            Outbound::Drop(reason)
        }
    }
}

/// The probe packet in `pkt`, encapsulated to backend `id`; its egress
/// port.
fn encapsulate<P: PacketBuf>(
    pkt: &mut P,
    info: &IpInfo,
    state: &ForwardingState,
    id: BackendId,
) -> Result<u16, DropReason> {
    let backend = state.backend(id).ok_or(DropReason::NoBackend)?;
    let service = state
        .service(backend.service)
        .ok_or(DropReason::NoBackend)?;
    let port = state
        .ports
        .get(usize::from(backend.egress.port))
        .ok_or(DropReason::NextHopUnresolved)?;
    let layout = L3Layout::from(info);
    // The probe's ports stand for a flow hash: a UDP tunnel's source port
    // and the outer flow label stay the same for the socket's packets.
    let hash = info
        .ports
        .map_or(0, |p| u64::from(p.src) << 16 | u64::from(p.dst))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    encap::encapsulate(pkt, layout, service.encapsulation, backend, port, hash)?;
    Ok(backend.egress.port)
}

/// Where packets for the appliance go to the kernel (`info` parsed from
/// the frame): an answer to a probe socket is noted with where it came
/// from — a VIP, as a client's answer does, the backend's own address, or
/// elsewhere.
pub fn note_inbound(info: &IpInfo, state: &ForwardingState, table: &ProbeTable) {
    let (Some(proto), Some(ports)) = (ProbeProto::of(info.protocol), info.ports) else {
        return;
    };
    let Some(id) = table.backend(proto, ports.dst) else {
        return;
    };
    let flag = if state.rules.is_vip(info.src) {
        FROM_VIP
    } else if state.backend(id).is_some_and(|b| b.address == info.src) {
        FROM_BACKEND
    } else {
        FROM_OTHER
    };
    table.mark(proto, ports.dst, flag);
}

/// Whether `addr` is one of the snapshot's port addresses: a probe's
/// source (a kernel packet from elsewhere is not a probe's, whatever its
/// port).
pub fn is_port_address(state: &ForwardingState, addr: IpAddr) -> bool {
    state.ports.iter().any(|p| match addr {
        IpAddr::V4(a) => p.ipv4 == Some(a),
        IpAddr::V6(a) => p.ipv6 == Some(a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_port_names_its_backend_until_released() {
        let t = ProbeTable::new();
        assert_eq!(t.backend(ProbeProto::Tcp, 40000), None);
        assert!(!t.is_active());
        let first = t.register(ProbeProto::Tcp, 40000, BackendId(0));
        let ticket = t.register(ProbeProto::Tcp, 40000, BackendId(0));
        assert!(t.is_active());
        // A later registration of the port outlives the earlier's release.
        t.release(first);
        assert_eq!(t.backend(ProbeProto::Tcp, 40000), Some(BackendId(0)));
        assert_eq!(t.backend(ProbeProto::Tcp, 40000), Some(BackendId(0)));
        assert_eq!(t.backend(ProbeProto::Udp, 40000), None, "port spaces apart");
        t.mark(ProbeProto::Tcp, 40000, SENT | FROM_VIP);
        let seen = t.seen(ProbeProto::Tcp, 40000);
        assert!(seen.sent && seen.answer_from_vip && !seen.answer_from_backend);
        t.release(ticket);
        t.release(ticket);
        assert!(!t.is_active(), "counted once per port");
        assert_eq!(t.backend(ProbeProto::Tcp, 40000), None);
        // A flag after the release is lost, not kept for the next socket.
        t.mark(ProbeProto::Tcp, 40000, FROM_OTHER);
        t.register(ProbeProto::Tcp, 40000, BackendId(7));
        assert_eq!(t.seen(ProbeProto::Tcp, 40000), Seen::default());
        assert_eq!(t.backend(ProbeProto::Tcp, 40000), Some(BackendId(7)));
        t.register(ProbeProto::Udp, u16::MAX, BackendId(u32::MAX - 1));
        assert_eq!(
            t.backend(ProbeProto::Udp, u16::MAX),
            Some(BackendId(u32::MAX - 1))
        );
    }
}
