//! `fragments = "follow_flow"` (beyond the cloud's HA-2, which hashes
//! every fragment on its 3-tuple): a TCP or UDP datagram's fragments go
//! where its 5-tuple hashes — where its unfragmented packets go. Only the
//! first fragment carries the ports; this table, one per worker, learns
//! them from it, keyed by what every fragment of the datagram carries
//! (addresses, protocol, IP identification / IPv6 Fragment header
//! identification), so that the later fragments find them.
//!
//! Bounded and never grown: [`SLOTS`] entries in sets of [`WAYS`], each
//! kept [`LIFETIME_MS`]. A set full of live entries gives up the one
//! nearest its end (counted): a flood of identifications can make other
//! datagrams' later fragments unplaceable (each counted where it is
//! dropped), never touch a connection's entry or take memory. The set is
//! chosen by a hash keyed at random per table, so a sender cannot aim at
//! another datagram's set. A first fragment seen again with other ports
//! is an overlap (the datagram's start rewritten): it is refused.

use crate::affinity::SessionAffinity;
use crate::conntrack::Addrs;
use crate::drop_reason::DropReason;
use crate::flow::{packet_hash_seeded, FlowSeed};
use crate::hash::fold_mul;
use crate::stage::Balance;
use crate::time::Millis;
use crate::wire::{self, Fragment, IpInfo, Ports};

/// Entries per table.
pub const SLOTS: usize = 4096;
/// Entries a datagram's key may occupy (a set).
pub const WAYS: usize = 4;
/// How long a datagram's ports are kept after its first fragment.
pub const LIFETIME_MS: u64 = 5_000;
/// Later fragments a worker holds at most for their first fragment.
pub const HELD: usize = 64;
/// How long a held fragment waits for its first fragment.
pub const HOLD_MS: u64 = 1_000;

/// What every fragment of one datagram carries.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DatagramKey {
    pub addrs: [u64; 4],
    pub ident: u32,
    pub protocol: u8,
    pub v6: bool,
}

impl DatagramKey {
    pub fn new(addrs: &Addrs, protocol: u8, ident: u32) -> Self {
        Self {
            addrs: [addrs.src[0], addrs.src[1], addrs.dst[0], addrs.dst[1]],
            ident,
            protocol,
            v6: addrs.v6,
        }
    }
}

#[derive(Copy, Clone, Debug, Default)]
struct Slot {
    key: DatagramKey,
    ports: Option<Ports>,
    expires: Millis,
}

/// What learning a first fragment found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Learnt {
    /// A new datagram.
    New,
    /// Its first fragment again, with the same ports (a retransmission).
    Again,
    /// Its first fragment again with other ports: refused.
    Conflict,
}

/// Counts of the table's own events (the fragments it places or refuses
/// are counted by the pipeline's verdicts).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FragmentCounters {
    /// Live entries given up to make room.
    pub evicted: u64,
}

/// The datagrams whose first fragment this worker saw.
pub struct FragmentFlows {
    slots: Box<[Slot]>,
    keys: [u64; 3],
    /// Bumped at every new datagram: fragments held for their first one
    /// are worth trying again only after it moved.
    generation: u64,
    pub counters: FragmentCounters,
}

impl Default for FragmentFlows {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FragmentFlows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragmentFlows")
            .field("generation", &self.generation)
            .field("counters", &self.counters)
            .finish()
    }
}

impl FragmentFlows {
    /// An empty table (its memory taken now, at start).
    pub fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let mut keys = [0u64; 3];
        for (i, k) in keys.iter_mut().enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            *k = h.finish();
        }
        Self {
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
            keys,
            generation: 0,
            counters: FragmentCounters::default(),
        }
    }

    /// Changes at every new datagram learnt.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn set(&self, key: &DatagramKey) -> usize {
        let [a, b, c, d] = key.addrs;
        let meta = u64::from(key.ident) | u64::from(key.protocol) << 32 | u64::from(key.v6) << 40;
        let h = fold_mul(a ^ self.keys[0], b ^ self.keys[1]);
        let h = fold_mul(h ^ c, d ^ self.keys[2]);
        let h = fold_mul(h ^ meta, 0x9e37_79b9_7f4a_7c15);
        (h as usize % (SLOTS / WAYS)) * WAYS
    }

    fn live(slot: &Slot, now: Millis) -> bool {
        slot.ports.is_some() && now < slot.expires
    }

    /// The first fragment of `key` carries `ports`.
    pub fn learn(&mut self, key: DatagramKey, ports: Ports, now: Millis) -> Learnt {
        let base = self.set(&key);
        let Some(set) = self.slots.get_mut(base..base + WAYS) else {
            return Learnt::Conflict;
        };
        if let Some(slot) = set.iter_mut().find(|s| Self::live(s, now) && s.key == key) {
            return if slot.ports == Some(ports) {
                slot.expires = Millis(now.0 + LIFETIME_MS);
                Learnt::Again
            } else {
                Learnt::Conflict
            };
        }
        let free = set.iter().position(|s| !Self::live(s, now));
        let at = match free {
            Some(i) => i,
            None => {
                self.counters.evicted += 1;
                set.iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.expires)
                    .map_or(0, |(i, _)| i)
            }
        };
        if let Some(slot) = set.get_mut(at) {
            *slot = Slot {
                key,
                ports: Some(ports),
                expires: Millis(now.0 + LIFETIME_MS),
            };
        }
        self.generation = self.generation.wrapping_add(1);
        Learnt::New
    }

    /// The ports of `key`'s datagram, if its first fragment was seen.
    pub fn ports(&self, key: &DatagramKey, now: Millis) -> Option<Ports> {
        let base = self.set(key);
        self.slots
            .get(base..base + WAYS)?
            .iter()
            .find(|s| Self::live(s, now) && s.key == *key)
            .and_then(|s| s.ports)
    }
}

/// Where a fragment of a `follow_flow` service goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Its flow's hash: the 5-tuple's, as for the unfragmented packets.
    Hash(u64),
    /// A later fragment before its first: to be held.
    Hold,
    Refused(DropReason),
}

/// The placement of fragment `b` (of `frame`): a first fragment teaches
/// its datagram's ports and goes where its 5-tuple hashes; a later one
/// goes there too once its first fragment was seen, else waits.
#[cold]
#[inline(never)]
pub(crate) fn place(
    frame: &[u8],
    b: &Balance,
    affinity: SessionAffinity,
    seed: FlowSeed,
    flows: &mut FragmentFlows,
    now: Millis,
) -> Placement {
    let (Some(addrs), Some(ident)) = (
        Addrs::from_frame(frame, &b.layout),
        wire::datagram_ident(frame, &b.layout),
    ) else {
        return Placement::Refused(DropReason::Internal);
    };
    let key = DatagramKey::new(&addrs, b.meta.proto, ident);
    let ports = match b.meta.ports {
        Some(ports) => match flows.learn(key, ports, now) {
            Learnt::Conflict => return Placement::Refused(DropReason::FragmentOverlap),
            Learnt::New | Learnt::Again => ports,
        },
        None => match flows.ports(&key, now) {
            Some(ports) => ports,
            None => return Placement::Hold,
        },
    };
    let flow = IpInfo {
        ethertype: b.layout.ethertype,
        l3_offset: 0,
        ip_len: 0,
        src: addrs.src_ip(),
        dst: addrs.dst_ip(),
        protocol: b.meta.proto,
        l4_offset: 0,
        fragment: Fragment::No,
        dont_fragment: false,
        ports: Some(ports),
        tcp_flags: 0,
        icmp_type: None,
    };
    Placement::Hash(packet_hash_seeded(seed, &flow, affinity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ident: u32) -> DatagramKey {
        let addrs = Addrs::new(
            "198.51.100.7".parse().unwrap(),
            "203.0.113.10".parse().unwrap(),
        );
        DatagramKey::new(&addrs, 17, ident)
    }
    const P: Ports = Ports {
        src: 40000,
        dst: 53,
    };

    /// A datagram's ports are found by its later fragments until they
    /// expire; its first fragment again is a retransmission, or with other
    /// ports an overlap that is refused.
    #[test]
    fn a_first_fragment_teaches_its_datagram_s_ports() {
        let mut t = FragmentFlows::new();
        let now = Millis(1000);
        assert_eq!(t.ports(&key(7), now), None);
        let g = t.generation();
        assert_eq!(t.learn(key(7), P, now), Learnt::New);
        assert_ne!(t.generation(), g);
        assert_eq!(t.ports(&key(7), now), Some(P));
        assert_eq!(t.ports(&key(8), now), None);
        assert_eq!(t.learn(key(7), P, now), Learnt::Again);
        let other = Ports { src: 1, dst: 53 };
        assert_eq!(t.learn(key(7), other, now), Learnt::Conflict);
        assert_eq!(t.ports(&key(7), now), Some(P));
        assert_eq!(t.ports(&key(7), Millis(1000 + LIFETIME_MS)), None);
    }

    /// A flood of identifications stays within the table: it evicts (and
    /// counts), and the latest datagrams are found.
    #[test]
    fn a_flood_of_identifications_is_bounded() {
        let mut t = FragmentFlows::new();
        let now = Millis(1);
        for id in 0..100_000u32 {
            t.learn(key(id), P, now);
        }
        assert!(t.counters.evicted >= 100_000 - SLOTS as u64);
        assert_eq!(t.slots.len(), SLOTS);
        assert_eq!(t.ports(&key(99_999), now), Some(P));
    }
}
