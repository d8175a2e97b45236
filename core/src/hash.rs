//! The deterministic hash behind flow hashing and Maglev permutations.
//!
//! It must give the same output on every appliance, CPU and build (MG-2,
//! AP-6): several appliances behind ECMP must pick the same backend for a
//! flow. So it is a fixed function of its input with fixed constants — no
//! per-process seed, no CPU-feature-dependent code path (which rules out
//! `ahash`). The construction is the 64×64→128-bit multiply-fold mixer
//! used by wyhash/foldhash, applied word by word, followed by a final
//! avalanche; every step is plain integer arithmetic defined identically on
//! every target.

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;

#[inline(always)]
pub(crate) fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a).wrapping_mul(u128::from(b));
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hashes a sequence of 64-bit words under `seed`.
///
/// The word count is mixed in, so `[x]` and `[x, 0]` hash differently.
// Public for core/tests/flow.rs and controlplane/tests/maglev.rs.
#[inline]
pub fn stable_hash_words(seed: u64, words: &[u64]) -> u64 {
    let mut h = seed ^ P0 ^ (words.len() as u64).wrapping_mul(P2);
    for &w in words {
        h = fold_mul(h ^ w, P1);
    }
    fold_mul(h ^ P2, P0 ^ (words.len() as u64))
}

/// Hashes exactly two words under `seed` with two multiplies (the
/// wyhash short-input construction): the IPv4 flow hash, on every packet.
// Public for core/tests/flow.rs.
#[inline(always)]
pub fn stable_hash_pair(seed: u64, a: u64, b: u64) -> u64 {
    let h = fold_mul(a ^ seed ^ P0, b ^ P1);
    fold_mul(h ^ P2, P0 ^ 2)
}

/// Hashes bytes under `seed`: 8-byte little-endian words, the tail
/// zero-padded, and the byte length mixed in.
pub fn stable_hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ P0 ^ (bytes.len() as u64).wrapping_mul(P2);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = fold_mul(h ^ u64::from_le_bytes(w), P1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = fold_mul(h ^ u64::from_le_bytes(w), P1);
    }
    fold_mul(h ^ P2, P0 ^ (bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MG-2 / AP-6: the function is pinned. If these values change, every
    /// deployed appliance would disagree with an upgraded one about which
    /// backend owns a flow — that must be a deliberate, documented change.
    #[test]
    fn mg_2_stable_hash_is_pinned_across_builds() {
        assert_eq!(stable_hash_words(0, &[]), stable_hash_words(0, &[]));
        let pinned = [
            stable_hash_words(0, &[1, 2, 3]),
            stable_hash_bytes(7, b"192.0.2.10"),
            stable_hash_pair(7, 1, 2),
        ];
        assert_eq!(
            pinned,
            [PINNED_WORDS, PINNED_BYTES, PINNED_PAIR],
            "{pinned:#x?}"
        );
    }

    const PINNED_WORDS: u64 = 2_710_936_004_587_438_946;
    const PINNED_BYTES: u64 = 10_113_779_752_739_606_823;
    const PINNED_PAIR: u64 = 3_008_840_139_853_693_831;

    #[test]
    fn word_count_and_seed_change_the_hash() {
        assert_ne!(stable_hash_words(0, &[5]), stable_hash_words(0, &[5, 0]));
        assert_ne!(stable_hash_words(0, &[5]), stable_hash_words(1, &[5]));
        assert_ne!(stable_hash_bytes(0, b"a"), stable_hash_bytes(0, b"a\0"));
        assert_ne!(stable_hash_pair(0, 1, 2), stable_hash_pair(0, 2, 1));
        assert_ne!(stable_hash_pair(0, 1, 2), stable_hash_pair(1, 1, 2));
    }

    #[test]
    fn low_bits_are_well_spread() {
        // Maglev and RSS-like users take `hash % M`; check buckets fill evenly.
        let mut buckets = [0u32; 16];
        let mut pair_buckets = [0u32; 16];
        for i in 0..16_000u64 {
            buckets[(stable_hash_words(3, &[i]) % 16) as usize] += 1;
            // Low 32 bits, scaled as MaglevTable::slot_index does.
            let h = stable_hash_pair(3, 0x0a00_0000_cb00_710a + (i << 32), 0x0006_0000_1234_0050);
            pair_buckets[(((h & 0xffff_ffff) * 16) >> 32) as usize] += 1;
        }
        for b in buckets.iter().chain(&pair_buckets) {
            assert!((800..1200).contains(b), "{buckets:?} {pair_buckets:?}");
        }
    }
}
