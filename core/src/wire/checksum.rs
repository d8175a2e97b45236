//! The Internet checksum (RFC 1071) in one place: sums, folding,
//! combining partial sums, the IPv4 and IPv6 pseudo-headers of upper-layer
//! checksums, and incremental update (RFC 1624).
//!
//! A "sum" here is a ones'-complement sum folded to 16 bits (never 0 for
//! data that is not all zeros); a checksum field holds the complement of
//! the sum of what it covers, taken with the field zeroed.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Folds the carries of a 32-bit accumulation of 16-bit words back in
/// (end-around carry): two steps are exact for every `u32`.
#[inline(always)]
pub(crate) const fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// [`fold`] of a sum of two 16-bit numbers (at most 0x1fffe), for which
/// one end-around carry is enough.
#[inline(always)]
pub(crate) const fn fold_once(sum: u32) -> u16 {
    ((sum & 0xffff) + (sum >> 16)) as u16
}

/// [`fold`] for a 64-bit accumulation: 2^32 ≡ 1 in ones'-complement
/// arithmetic too, so the halves add.
#[inline(always)]
const fn fold_wide(sum: u64) -> u16 {
    let s = (sum & 0xffff_ffff) + (sum >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    fold(s as u32)
}

/// Ones'-complement sum of `data` as big-endian 16-bit words (an odd last
/// byte is padded with zero), folded to 16 bits.
pub fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    // u64 cannot overflow for any packet: 2^48 words would be needed.
    let mut sum: u64 = 0;
    for c in &mut chunks {
        if let [a, b] = *c {
            sum += u64::from(u16::from_be_bytes([a, b]));
        }
    }
    if let [last] = *chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([last, 0]));
    }
    fold_wide(sum)
}

/// The ones'-complement sum of partial sums, e.g. of a header and of the
/// data after it. Each part must start at an even offset of the whole
/// (only the last may have an odd length).
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|s| u32::from(*s)).sum())
}

/// The sum of the IPv4 pseudo-header (RFC 768, RFC 9293 §3.1): source,
/// destination, protocol and the upper-layer length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u16 {
    let [s0, s1, s2, s3] = src.octets();
    let [d0, d1, d2, d3] = dst.octets();
    let w = |a: u8, b: u8| u32::from(u16::from_be_bytes([a, b]));
    fold(w(s0, s1) + w(s2, s3) + w(d0, d1) + w(d2, d3) + u32::from(protocol) + u32::from(len))
}

/// The sum of the IPv6 pseudo-header (RFC 8200 §8.1; ICMPv6: RFC 4443
/// §2.3): source, destination, the 32-bit upper-layer length and the next
/// header.
pub(crate) fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u16 {
    fold(
        u32::from(ones_complement_sum(&src.octets()))
            + u32::from(ones_complement_sum(&dst.octets()))
            + (len >> 16)
            + (len & 0xffff)
            + u32::from(next_header),
    )
}

/// The checksum field value for `data` (with its checksum field zeroed).
pub(crate) fn checksum(data: &[u8]) -> u16 {
    !ones_complement_sum(data)
}

/// Whether `data`, checksum field included, sums to all ones.
#[cfg(test)]
pub(crate) fn verify(data: &[u8]) -> bool {
    ones_complement_sum(data) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The worked example of RFC 1071 §3.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_complement_sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(ones_complement_sum(&[0x12]), 0x1200);
        assert_eq!(ones_complement_sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn verify_accepts_own_checksum() {
        let mut d = [0x45, 0x00, 0x00, 0x1c, 0xab, 0xcd, 0, 0];
        let c = checksum(&d).to_be_bytes();
        d[6] = c[0];
        d[7] = c[1];
        assert!(verify(&d));
        d[0] ^= 1;
        assert!(!verify(&d));
    }

    #[test]
    fn fold_handles_every_carry() {
        assert_eq!(fold(0), 0);
        assert_eq!(fold(0xffff), 0xffff);
        assert_eq!(fold(0x1_0000), 1);
        assert_eq!(fold(0x1_fffe), 0xffff);
        assert_eq!(fold(u32::MAX), 0xffff);
        assert_eq!(fold_wide(u64::MAX), 0xffff);
        assert_eq!(fold_wide(1 << 32), 1);
        assert_eq!(fold_once(0xffff + 0xffff), fold(0xffff + 0xffff));
        assert_eq!(fold_once(0xffff + 1), 1);
    }

    /// The pseudo-header sums against RFC 768's layout written out by hand.
    #[test]
    fn pseudo_headers_sum_their_layout() {
        let (s4, d4) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(192, 0, 2, 7));
        let mut v4 = Vec::new();
        v4.extend_from_slice(&s4.octets());
        v4.extend_from_slice(&d4.octets());
        v4.extend_from_slice(&[0, 17, 0x12, 0x34]);
        assert_eq!(
            pseudo_header_v4(s4, d4, 17, 0x1234),
            ones_complement_sum(&v4)
        );
        let s6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d6: Ipv6Addr = "fd00::ffff:2".parse().unwrap();
        let mut v6 = Vec::new();
        v6.extend_from_slice(&s6.octets());
        v6.extend_from_slice(&d6.octets());
        v6.extend_from_slice(&0x0001_0203u32.to_be_bytes());
        v6.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(
            pseudo_header_v6(&s6, &d6, 58, 0x0001_0203),
            ones_complement_sum(&v6)
        );
    }

    proptest! {
        /// Partial sums of even-offset parts combine to the sum of the whole.
        #[test]
        fn combine_equals_the_whole(data in proptest::collection::vec(any::<u8>(), 0..200),
                                    cut in 0usize..100) {
            let cut = (cut * 2).min(data.len() & !1);
            let (a, b) = data.split_at(cut);
            prop_assert_eq!(
                combine(&[ones_complement_sum(a), ones_complement_sum(b)]),
                ones_complement_sum(&data)
            );
        }
    }
}
