//! One flow, one shard, in software (SPEC §3, AP-1).
//!
//! A tracking key (CT-3) is owned by one worker, whose shard holds its
//! entry: a 5-tuple key (TCP, and UDP that is not fragmented, under
//! NONE / CLIENT_IP_PORT_PROTO affinity) by its whole 5-tuple, so that one
//! client address's connections spread over every worker; a 3- or 2-tuple
//! key (fragments, other protocols, the PER_SESSION affinities) by its
//! address pair, which every packet of such a key — every fragment of a
//! datagram included — carries. Who owns what is one function for the
//! process ([`Owners`]): a port's RSS on 5-tuples as sluice set it up
//! ([`crate::rss`]), whose choice is then computed, or else a fixed hash
//! ([`owner_of_key`]). Each port says which of its packets are already at
//! their owner ([`RxPlacement`]): all of them (one queue, RSS on
//! addresses), those of 5-tuple keys (RSS on 5-tuples), or none
//! (net_af_packet's fanout, net_pcap, a NIC without RSS); a worker hands
//! each of the others it does not own to its owner over a ring
//! (`dpdk::mbuf_ring`). Untracked packets are stateless and stay where
//! they arrived.

use crate::conntrack::TrackKey;
use crate::flow::TupleKind;
use crate::hash::{stable_hash_bytes, stable_hash_words};
use crate::rss::RssModel;
use crate::wire::ethernet::ETHERTYPE_IPV6;
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::Ipv6Packet;
use crate::wire::L3Layout;
use std::sync::Arc;

/// A fixed seed: the choice only has to agree between this process's
/// workers, but a fixed function keeps tests reproducible.
const SEED: u64 = 0x5ee1_1ce0_57ee_7175;

/// Slots of each steering ring from a sender to one peer, for `workers`
/// workers polling RX bursts of `burst_size`. A full ring loses nothing
/// (the sender holds its packets and pauses its RX, `worker::handover`),
/// so the size only sets how far a peer may fall behind before senders
/// pause: eight RX bursts from every worker that may feed it, as a peer
/// polls one burst per input in turn and so falls further behind the more
/// workers feed it. At least 1024 (a few bursts of slack on two workers),
/// at most 4096 (every slot may hold an mbuf: the pool is sized for full
/// rings, `workers × (workers − 1)` of them).
pub fn ring_slots(burst_size: usize, workers: usize) -> u32 {
    let slots = burst_size.max(1) * workers.max(1) * 8;
    (slots.next_power_of_two() as u32).clamp(1024, 4096)
}

/// Where the tracked packets a port receives already are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RxPlacement {
    /// Each tracking key's packets reach its owner's queue (one queue, or
    /// RSS on addresses only): nothing is steered.
    Kept,
    /// RSS on 5-tuples under a [`RssModel`]: a 5-tuple key's packets reach
    /// the queue the model names, so only the others (2/3-tuple keys,
    /// ICMP errors, fragments) are checked and steered.
    FiveTuplesKept,
    /// No placement the workers can rely on: every tracked packet is
    /// checked and steered to its owner.
    Software,
}

/// The function that names a tracking key's owner, one for the whole
/// process so that every port and the conntrack hand-off agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owners {
    /// A fixed hash ([`owner_of_key`]) onto `workers` workers: software
    /// steering's own choice.
    Hash { workers: usize },
    /// The NIC's choice, modelled: a port with RSS on 5-tuples puts a
    /// key's packets on the queue (= worker) this model computes.
    Rss(Arc<RssModel>),
}

impl Owners {
    /// How many workers own keys.
    pub fn workers(&self) -> usize {
        match self {
            Owners::Hash { workers } => *workers,
            Owners::Rss(model) => model.queues(),
        }
    }

    /// The owner of tracking key `key`.
    #[inline]
    pub fn of_key(&self, key: &TrackKey) -> usize {
        match self {
            Owners::Hash { workers } => owner_of_key(key, *workers),
            Owners::Rss(model) => model.queue_of_key(key),
        }
    }

    /// The owner of every packet between the addresses of `frame` whose
    /// key is not a 5-tuple.
    #[inline]
    pub fn of_address_pair(&self, frame: &[u8], layout: &L3Layout) -> usize {
        match self {
            Owners::Hash { workers } => owner(frame, layout, *workers),
            Owners::Rss(model) => {
                with_address_bytes(frame, layout, |bytes| model.queue_of_addresses(bytes))
            }
        }
    }
}

/// Slots of each steering ring when every port's RSS places 5-tuple keys
/// ([`RxPlacement::FiveTuplesKept`]): the rings then carry only what the
/// NIC leaves (other protocols, fragments, ICMP errors, per-session
/// affinities), and a full one pauses its sender's RX as above, so about
/// eight RX bursts into each worker, shared by its peers, will do: 128
/// slots at 2–8 workers, 32 from 16 workers on. The pool holds them all
/// (at 64 workers 130,000 mbufs; full-size rings would be 16 million).
pub fn rare_ring_slots(burst_size: usize, workers: usize) -> u32 {
    let per_peer = burst_size.max(1) * 8 / workers.saturating_sub(1).max(1);
    (per_peer.next_power_of_two() as u32).clamp(32, 128)
}

/// The bits of a key's `meta` that are its 5-tuple's ports and protocol.
const PORTS_AND_PROTOCOL: u64 = (1 << 40) - 1;

/// The worker (0..workers) that owns tracking key `key`: a 5-tuple key by
/// its 5-tuple, any other by its address pair ([`owner_of`]).
#[inline]
pub fn owner_of_key(key: &TrackKey, workers: usize) -> usize {
    if key.kind() == TupleKind::Five {
        let words = [
            key.src[0],
            key.src[1],
            key.dst[0],
            key.dst[1],
            key.meta & PORTS_AND_PROTOCOL,
        ];
        scale(stable_hash_words(SEED, &words), workers)
    } else {
        owner_of(key.src_ip(), key.dst_ip(), workers)
    }
}

/// [`owner_of_key`] of the 5-tuple key of a TCP or unfragmented UDP flow
/// (the key under NONE or CLIENT_IP_PORT_PROTO affinity), from its parts:
/// for tools that split traffic as the workers own it.
pub fn owner_of_five_tuple(
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    protocol: u8,
    ports: crate::wire::Ports,
    workers: usize,
) -> usize {
    owner_of_key(&five_tuple_key(src, dst, protocol, ports), workers)
}

/// The 5-tuple key by which packets between `src` and `dst` with
/// `protocol` and `ports` are owned (its service takes no part in the
/// owner, so it is the default).
// Public for owner_of_five_tuple's callers outside the packet path
// (tests, the benches' packet generator) that also need the key itself.
pub fn five_tuple_key(
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    protocol: u8,
    ports: crate::wire::Ports,
) -> TrackKey {
    let meta = crate::conntrack::PacketMeta {
        proto: protocol,
        tcp_flags: 0,
        fragmented: false,
        ports: Some(ports),
    };
    let addrs = crate::conntrack::Addrs::new(src, dst);
    TrackKey::new(TupleKind::Five, &addrs, &meta, crate::ids::ServiceId(0))
}

/// The worker (0..workers) that owns every packet between these addresses
/// whose key is not a 5-tuple.
// Public for core/tests/icmp.rs and controlplane/tests.
#[inline]
pub fn owner(frame: &[u8], layout: &L3Layout, workers: usize) -> usize {
    with_address_bytes(frame, layout, |bytes| pick(bytes, workers))
}

/// `f` of the source then destination address of `frame`'s IP header,
/// as the header holds them. The parser checked the header is in the
/// frame; a short one (cannot happen) reads as zeros, which still gives a
/// valid owner.
#[inline]
fn with_address_bytes<R>(frame: &[u8], layout: &L3Layout, f: impl FnOnce(&[u8]) -> R) -> R {
    let ip = frame.get(layout.l3_offset..).unwrap_or(&[]);
    if layout.ethertype == ETHERTYPE_IPV6 {
        f(&Ipv6Packet::new_unchecked(ip).address_bytes())
    } else {
        f(&Ipv4Packet::new_unchecked(ip).address_bytes())
    }
}

/// The owner of an address pair given as bytes (source then destination).
#[inline]
fn pick(addr_bytes: &[u8], workers: usize) -> usize {
    scale(stable_hash_bytes(SEED, addr_bytes), workers)
}

/// A hash onto 0..workers by multiply-shift: no division on the packet
/// path.
#[inline]
fn scale(h: u64, workers: usize) -> usize {
    (((h >> 32) * workers as u64) >> 32) as usize
}

/// [`owner`] for addresses at hand rather than in a frame (ICMP errors,
/// owned by the flow they quote): the same hash of the same bytes.
pub fn owner_of(src: std::net::IpAddr, dst: std::net::IpAddr, workers: usize) -> usize {
    use std::net::IpAddr::{V4, V6};
    let mut bytes = [0u8; 32];
    let n = match (src, dst) {
        (V4(s), V4(d)) => {
            bytes[..4].copy_from_slice(&s.octets());
            bytes[4..8].copy_from_slice(&d.octets());
            8
        }
        (V6(s), V6(d)) => {
            bytes[..16].copy_from_slice(&s.octets());
            bytes[16..].copy_from_slice(&d.octets());
            32
        }
        // Mixed families cannot be one flow; any owner will do.
        _ => 0,
    };
    pick(&bytes[..n], workers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet::{self, EthernetRepr, ETHERTYPE_IPV4};
    use crate::wire::ipv4::{self, Ipv4Repr};
    use crate::wire::parse::{parse, Parsed};
    use crate::wire::proto::UDP;
    use crate::wire::udp::{self, UdpRepr};

    /// Ethernet, IPv4 (fragment offset `frag_offset`, in 8-byte units) and
    /// an empty UDP datagram from `sport` to 5000.
    fn frame(src: [u8; 4], dst: [u8; 4], sport: u16, frag_offset: u16) -> Vec<u8> {
        const ETH: usize = ethernet::HEADER_LEN;
        const IP: usize = ipv4::HEADER_LEN;
        let mut f = [0u8; ETH + IP + udp::HEADER_LEN];
        let (eth, rest) = f.split_at_mut(ETH);
        EthernetRepr {
            dst: [0; 6],
            src: [0; 6],
            vlan: None,
            ethertype: ETHERTYPE_IPV4,
        }
        .emit(eth)
        .unwrap();
        let (ip, l4) = rest.split_first_chunk_mut::<IP>().unwrap();
        Ipv4Repr {
            src: src.into(),
            dst: dst.into(),
            protocol: UDP,
            ttl: 64,
            ident: 0,
            dont_frag: false,
            payload_len: udp::HEADER_LEN,
        }
        .emit(ip)
        .unwrap();
        let mut ip = Ipv4Packet::new_unchecked(ip);
        ip.set_frag_offset(frag_offset);
        ip.fill_checksum();
        UdpRepr {
            src_port: sport,
            dst_port: 5000,
            payload_len: 0,
            checksum: 0,
        }
        .emit(l4.first_chunk_mut().unwrap())
        .unwrap();
        f.to_vec()
    }

    fn layout(f: &[u8]) -> L3Layout {
        match parse(f).unwrap() {
            Parsed::Ip(ip) => L3Layout::from(&ip),
            Parsed::Arp => unreachable!(),
        }
    }

    /// CT-3 / HA-2: packets of one address pair — any ports, fragments
    /// included — have one owner.
    #[test]
    fn ct_3_one_address_pair_one_owner_whatever_the_ports() {
        for workers in 1..=8 {
            let first = frame([10, 0, 0, 1], [10, 99, 1, 10], 1000, 0);
            let o = owner(&first, &layout(&first), workers);
            assert!(o < workers);
            for sport in [1001, 40000, 65535] {
                let f = frame([10, 0, 0, 1], [10, 99, 1, 10], sport, 0);
                assert_eq!(owner(&f, &layout(&f), workers), o);
            }
            let later_fragment = frame([10, 0, 0, 1], [10, 99, 1, 10], 0, 185);
            assert_eq!(owner(&later_fragment, &layout(&later_fragment), workers), o);
        }
    }

    #[test]
    fn owner_of_addresses_matches_owner_of_frame() {
        let f = frame([10, 0, 0, 1], [10, 99, 1, 10], 1000, 0);
        for workers in 1..=8 {
            assert_eq!(
                owner_of(
                    "10.0.0.1".parse().unwrap(),
                    "10.99.1.10".parse().unwrap(),
                    workers
                ),
                owner(&f, &layout(&f), workers)
            );
        }
    }

    /// AP-1: rings grow with the burst size and the worker count, within
    /// bounds, always a power of two (rte_ring's requirement).
    #[test]
    fn ring_slots_follow_burst_and_workers() {
        assert_eq!(ring_slots(32, 2), 1024);
        assert_eq!(ring_slots(64, 4), 2048);
        assert_eq!(ring_slots(64, 8), 4096);
        assert_eq!(ring_slots(64, 64), 4096);
        assert_eq!(ring_slots(1, 2), 1024);
        for (b, w) in [(32, 3), (48, 5), (64, 6)] {
            let s = ring_slots(b, w);
            assert!(
                s.is_power_of_two() && s as usize >= (b * w * 8).min(4096),
                "{b} {w} {s}"
            );
        }
    }

    fn key(sport: u16, kind: TupleKind) -> TrackKey {
        let addrs = crate::conntrack::Addrs::new(
            "10.0.0.1".parse().unwrap(),
            "10.99.1.10".parse().unwrap(),
        );
        let meta = crate::conntrack::PacketMeta {
            proto: crate::wire::proto::TCP,
            tcp_flags: 0,
            fragmented: false,
            ports: Some(crate::wire::Ports {
                src: sport,
                dst: 80,
            }),
        };
        TrackKey::new(kind, &addrs, &meta, crate::ids::ServiceId(0))
    }

    /// CT-3 / AP-1: one client address's 5-tuple keys spread over every
    /// worker (within ±15 % of an even share over 4,000 ports); its 3- and
    /// 2-tuple keys all stay with the address pair's owner, the one its
    /// fragments (HA-2) have.
    #[test]
    fn ct_3_five_tuple_keys_spread_and_the_rest_follow_the_address_pair() {
        for workers in [2usize, 4, 8] {
            let mut counts = vec![0usize; workers];
            for sport in 1024..5024u16 {
                counts[owner_of_key(&key(sport, TupleKind::Five), workers)] += 1;
            }
            let even = 4000 / workers;
            for &c in &counts {
                assert!(c.abs_diff(even) * 100 <= even * 15, "{workers}: {counts:?}");
            }
            let pair = owner_of(
                "10.0.0.1".parse().unwrap(),
                "10.99.1.10".parse().unwrap(),
                workers,
            );
            for sport in [1024, 40000] {
                for kind in [TupleKind::Three, TupleKind::Two] {
                    assert_eq!(owner_of_key(&key(sport, kind), workers), pair);
                }
            }
            let f = frame([10, 0, 0, 1], [10, 99, 1, 10], 0, 185);
            assert_eq!(owner(&f, &layout(&f), workers), pair);
        }
    }

    /// AP-1: an IPv6 key that is not a 5-tuple is owned as its address
    /// pair is (the key's address bytes are the header's), for many pairs.
    #[test]
    fn ap_1_ipv6_keys_follow_their_address_pair() {
        for i in 0..200u16 {
            let src: std::net::IpAddr = format!("2001:db8::{i:x}").parse().unwrap();
            let dst: std::net::IpAddr = format!("2001:db8:1::{:x}", i * 7 + 1).parse().unwrap();
            let meta = crate::conntrack::PacketMeta {
                proto: crate::wire::proto::UDP,
                tcp_flags: 0,
                fragmented: true,
                ports: None,
            };
            let addrs = crate::conntrack::Addrs::new(src, dst);
            let k = TrackKey::new(TupleKind::Three, &addrs, &meta, crate::ids::ServiceId(0));
            for workers in [2usize, 3, 8] {
                assert_eq!(
                    owner_of_key(&k, workers),
                    owner_of(src, dst, workers),
                    "{src} {dst}"
                );
            }
        }
    }

    #[test]
    fn owners_spread_over_workers() {
        let workers = 4;
        let mut counts = [0usize; 4];
        for i in 0..4000u32 {
            let src = (0x0a00_0000 + i).to_be_bytes();
            let f = frame(src, [10, 99, 1, 10], 1000, 0);
            counts[owner(&f, &layout(&f), workers)] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    }
}
