//! A NIC's receive-side scaling, computed in software (AP-1).
//!
//! A port whose RSS hashes TCP and unfragmented UDP on their 5-tuple
//! delivers every packet of such a flow to one RX queue, chosen by the
//! Toeplitz hash of (source address, destination address, source port,
//! destination port) under the port's key and looked up in its
//! redirection table (RETA). sluice sets both (its own [`KEY`] and a
//! round-robin RETA) and reads the table back, so it can compute that
//! choice for packets the NIC does not place by their flow: an ICMP error
//! goes to the queue of the flow it quotes, a 2- or 3-tuple key (fragments,
//! other protocols, the PER_SESSION affinities) to the queue of its
//! address pair, which is what the NIC itself picks for a fragment; and
//! the conntrack hand-off places each entry in the shard the NIC will
//! send its packets to.

use crate::conntrack::TrackKey;
use crate::flow::TupleKind;

/// The RSS key sluice sets on every port whose RSS it configures: the
/// key Microsoft's RSS specification publishes (and most PMDs default
/// to), whose spread is well studied. Longer device keys are this key
/// followed by zeros; the hash of an input of at most 36 bytes (an IPv6
/// 4-tuple) reads only the first 40.
pub const KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The longest RSS input: an IPv6 4-tuple.
const MAX_INPUT: usize = 36;

/// A port's RSS as the NIC computes it: the Toeplitz hash under [`KEY`],
/// precomputed per input byte, and the redirection table read back from
/// the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RssModel {
    /// `by_byte[i][b]`: the hash of an input whose byte `i` is `b` and
    /// every other byte zero (Toeplitz is linear in its input).
    by_byte: Box<[[u32; 256]; MAX_INPUT]>,
    /// Queue per RETA entry; its length is a power of two.
    reta: Box<[u16]>,
    /// The port's RX queues (every RETA entry names one of them).
    queues: u16,
}

/// Why a device's RSS cannot be modelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RssModelError {
    #[error("the redirection table has {0} entries, not a power of two")]
    RetaSize(usize),
    #[error("the redirection table names queue {queue}, the port has {queues}")]
    RetaQueue { queue: u16, queues: u16 },
}

impl RssModel {
    /// The model of a port hashing under [`KEY`] with redirection table
    /// `reta` over `queues` RX queues.
    pub fn new(reta: &[u16], queues: u16) -> Result<Self, RssModelError> {
        if reta.is_empty() || !reta.len().is_power_of_two() {
            return Err(RssModelError::RetaSize(reta.len()));
        }
        if let Some(&queue) = reta.iter().find(|&&q| q >= queues) {
            return Err(RssModelError::RetaQueue { queue, queues });
        }
        let mut by_byte = Box::new([[0u32; 256]; MAX_INPUT]);
        for (i, table) in by_byte.iter_mut().enumerate() {
            for (b, h) in table.iter_mut().enumerate() {
                *h = toeplitz_bits(i, b as u8);
            }
        }
        Ok(Self {
            by_byte,
            reta: reta.into(),
            queues,
        })
    }

    /// The RX queues the table spreads over.
    pub fn queues(&self) -> usize {
        usize::from(self.queues)
    }

    /// A round-robin redirection table of `entries` entries over `queues`
    /// queues: what sluice asks of every port it models.
    pub fn round_robin(entries: usize, queues: u16) -> Vec<u16> {
        (0..entries)
            .map(|i| (i % usize::from(queues.max(1))) as u16)
            .collect()
    }

    /// The Toeplitz hash of `input` (at most 36 bytes; later ones are not
    /// hashed) under [`KEY`].
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.by_byte.iter())
            .fold(0, |h, (&b, table)| h ^ table[usize::from(b)])
    }

    /// The RX queue of a packet whose RSS hash is `hash`: the RETA entry
    /// its low bits index.
    #[inline]
    pub fn queue_of_hash(&self, hash: u32) -> usize {
        let i = hash as usize & (self.reta.len() - 1);
        self.reta.get(i).copied().map_or(0, usize::from)
    }

    /// The queue the NIC sends tracking key `key`'s packets to: its
    /// 5-tuple's for a 5-tuple key, its address pair's for any other.
    pub fn queue_of_key(&self, key: &TrackKey) -> usize {
        let mut input = [0u8; MAX_INPUT];
        let v6 = key.is_v6();
        let mut n = 0;
        for words in [key.src, key.dst] {
            if v6 {
                input[n..n + 8].copy_from_slice(&words[0].to_be_bytes());
                input[n + 8..n + 16].copy_from_slice(&words[1].to_be_bytes());
                n += 16;
            } else {
                input[n..n + 4].copy_from_slice(&(words[1] as u32).to_be_bytes());
                n += 4;
            }
        }
        if key.kind() == TupleKind::Five {
            // meta: destination port in bits 0–15, source port in 16–31;
            // the NIC hashes the source port first.
            input[n..n + 2].copy_from_slice(&((key.meta >> 16) as u16).to_be_bytes());
            input[n + 2..n + 4].copy_from_slice(&(key.meta as u16).to_be_bytes());
            n += 4;
        }
        self.queue_of_hash(self.hash(&input[..n]))
    }

    /// The queue of the address pair given as bytes (source then
    /// destination, as an IP header holds them).
    #[inline]
    pub fn queue_of_addresses(&self, addr_bytes: &[u8]) -> usize {
        self.queue_of_hash(self.hash(addr_bytes))
    }
}

/// The Toeplitz hash under [`KEY`] of an input that is `byte` at offset
/// `at` and zero elsewhere: each set bit XORs in the key's 32-bit window
/// that starts at that bit.
fn toeplitz_bits(at: usize, byte: u8) -> u32 {
    let key_bit = |i: usize| -> u32 {
        KEY.get(i / 8)
            .map_or(0, |k| u32::from(k >> (7 - (i % 8)) & 1))
    };
    let window = |start: usize| (0..32).fold(0u32, |w, j| (w << 1) | key_bit(start + j));
    (0..8)
        .filter(|bit| byte & (0x80 >> bit) != 0)
        .fold(0, |h, bit| h ^ window(at * 8 + bit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::{Addrs, PacketMeta};
    use crate::ids::ServiceId;
    use crate::wire::Ports;
    use std::net::IpAddr;

    fn model() -> RssModel {
        RssModel::new(&RssModel::round_robin(128, 4), 4).unwrap()
    }

    fn input(src: &str, dst: &str, ports: Option<(u16, u16)>) -> Vec<u8> {
        let bytes = |a: &str| match a.parse::<IpAddr>().unwrap() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mut v = bytes(src);
        v.extend(bytes(dst));
        if let Some((s, d)) = ports {
            v.extend(s.to_be_bytes());
            v.extend(d.to_be_bytes());
        }
        v
    }

    /// The verification values of Microsoft's RSS specification ("Verifying
    /// the RSS hash calculation"), which NICs are tested against.
    #[test]
    fn ap_1_hash_matches_the_published_verification_suite() {
        let m = model();
        let cases = [
            (
                "66.9.149.187",
                "161.142.100.80",
                2794,
                1766,
                0x323e_8fc2,
                0x51cc_c178,
            ),
            (
                "199.92.111.2",
                "65.69.140.83",
                14230,
                4739,
                0xd718_262a,
                0xc626_b0ea,
            ),
            (
                "24.19.198.95",
                "12.22.207.184",
                12898,
                38024,
                0xd2d0_a5de,
                0x5c2b_394a,
            ),
            (
                "38.27.205.30",
                "209.142.163.6",
                48228,
                2217,
                0x8298_9176,
                0xafc7_327f,
            ),
            (
                "153.39.163.191",
                "202.188.127.2",
                44251,
                1303,
                0x5d18_09c5,
                0x10e8_28a2,
            ),
            (
                "3ffe:2501:200:1fff::7",
                "3ffe:2501:200:3::1",
                2794,
                1766,
                0x2cc1_8cd5,
                0x4020_7d3d,
            ),
            (
                "3ffe:501:8::260:97ff:fe40:efab",
                "ff02::1",
                14230,
                4739,
                0x0f0c_461c,
                0xdde5_1bbf,
            ),
            (
                "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
                "fe80::200:f8ff:fe21:67cf",
                44251,
                38024,
                0x4b61_e985,
                0x02d1_feef,
            ),
        ];
        for (src, dst, sport, dport, addresses, four_tuple) in cases {
            assert_eq!(m.hash(&input(src, dst, None)), addresses, "{src} {dst}");
            assert_eq!(
                m.hash(&input(src, dst, Some((sport, dport)))),
                four_tuple,
                "{src}:{sport} {dst}:{dport}"
            );
        }
    }

    fn key(
        src: &str,
        dst: &str,
        proto: u8,
        ports: Option<(u16, u16)>,
        kind: TupleKind,
    ) -> TrackKey {
        let meta = PacketMeta {
            proto,
            tcp_flags: 0,
            fragmented: false,
            ports: ports.map(|(src, dst)| Ports { src, dst }),
        };
        let addrs = Addrs::new(src.parse().unwrap(), dst.parse().unwrap());
        TrackKey::new(kind, &addrs, &meta, ServiceId(7))
    }

    /// AP-1: a key's queue is the NIC's choice for its packets: the
    /// 4-tuple's hash for a 5-tuple key, the address pair's otherwise
    /// (what the NIC hashes for a fragment), through the RETA.
    #[test]
    fn ap_1_a_keys_queue_is_the_nics_choice_for_its_packets() {
        const RETA: [u16; 8] = [3, 1, 0, 2, 2, 0, 1, 3];
        let m = RssModel::new(&RETA, 4).unwrap();
        for (src, dst) in [
            ("198.51.100.7", "203.0.113.10"),
            ("2001:db8::7", "2001:db8:1::10"),
        ] {
            for sport in [1000u16, 40_000, 65_535] {
                let five = key(src, dst, 6, Some((sport, 443)), TupleKind::Five);
                let h = m.hash(&input(src, dst, Some((sport, 443))));
                assert_eq!(m.queue_of_key(&five), usize::from(RETA[h as usize & 7]));
                let three = key(src, dst, 17, Some((sport, 443)), TupleKind::Three);
                let a = m.hash(&input(src, dst, None));
                assert_eq!(m.queue_of_key(&three), usize::from(RETA[a as usize & 7]));
                assert_eq!(
                    m.queue_of_addresses(&input(src, dst, None)),
                    m.queue_of_key(&three)
                );
            }
        }
    }

    #[test]
    fn a_table_that_cannot_be_a_nics_is_refused() {
        assert_eq!(
            RssModel::new(&[0, 1, 0], 2),
            Err(RssModelError::RetaSize(3))
        );
        assert_eq!(RssModel::new(&[], 2), Err(RssModelError::RetaSize(0)));
        assert_eq!(
            RssModel::new(&[0, 2], 2),
            Err(RssModelError::RetaQueue {
                queue: 2,
                queues: 2
            })
        );
        assert_eq!(RssModel::round_robin(8, 3), [0, 1, 2, 0, 1, 2, 0, 1]);
    }

    /// One client address's 5-tuples spread over every queue.
    #[test]
    fn ap_1_one_client_addresses_flows_spread_over_the_queues() {
        let m = model();
        let mut per_queue = [0usize; 4];
        for sport in 1024..5024u16 {
            per_queue[m.queue_of_key(&key(
                "198.51.100.7",
                "203.0.113.10",
                6,
                Some((sport, 80)),
                TupleKind::Five,
            ))] += 1;
        }
        assert!(
            per_queue.iter().all(|&n| (850..1150).contains(&n)),
            "{per_queue:?}"
        );
    }
}
