//! The Internet checksum (RFC 1071).

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last
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
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum field value for `data` (with its checksum field zeroed).
pub fn checksum(data: &[u8]) -> u16 {
    !ones_complement_sum(data)
}

/// Whether `data`, checksum field included, sums to all ones.
pub fn verify(data: &[u8]) -> bool {
    ones_complement_sum(data) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
