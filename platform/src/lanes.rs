//! Sixteen 32-bit lanes compared at once: which slots of a conntrack
//! bucket's signature line hold a given signature, or are occupied.
//! Written portably, the comparison compiles to about 57 instructions
//! (the vectoriser splits the sixteen lanes unevenly and reassembles the
//! bits one by one); with SSE2, which every x86-64 CPU has, it is four
//! loads, four masks, four compares, three packs and a move-mask.

/// Bit `i` set where `lanes[i] & keep == value`.
#[inline(always)]
pub fn lanes_equal(lanes: &[u32; 16], keep: u32, value: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cmpeq_epi32, _mm_loadu_si128, _mm_movemask_epi8,
            _mm_packs_epi16, _mm_packs_epi32, _mm_set1_epi32,
        };
        let p = lanes.as_ptr().cast::<__m128i>();
        // SAFETY: SSE2 is in the x86-64 baseline. The four unaligned
        // loads read the 64 bytes `lanes` borrows, 16 at a time
        // (`p.add(3)` is its last quarter). A compare gives each lane
        // 0 or -1, which both signed packs keep (no saturation), so byte
        // `i` of the packed vector is lane `i`'s result and the move-mask
        // takes bit `i` from it.
        unsafe {
            let keep = _mm_set1_epi32(keep as i32);
            let value = _mm_set1_epi32(value as i32);
            let q0 = _mm_cmpeq_epi32(_mm_and_si128(_mm_loadu_si128(p), keep), value);
            let q1 = _mm_cmpeq_epi32(_mm_and_si128(_mm_loadu_si128(p.add(1)), keep), value);
            let q2 = _mm_cmpeq_epi32(_mm_and_si128(_mm_loadu_si128(p.add(2)), keep), value);
            let q3 = _mm_cmpeq_epi32(_mm_and_si128(_mm_loadu_si128(p.add(3)), keep), value);
            let packed = _mm_packs_epi16(_mm_packs_epi32(q0, q1), _mm_packs_epi32(q2, q3));
            _mm_movemask_epi8(packed) as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        lanes_equal_portable(lanes, keep, value)
    }
}

/// [`lanes_equal`] in portable code: the reference its tests compare
/// with, and its implementation off x86-64.
#[inline(always)]
pub fn lanes_equal_portable(lanes: &[u32; 16], keep: u32, value: u32) -> u32 {
    lanes
        .iter()
        .enumerate()
        .fold(0, |m, (i, &s)| m | (u32::from(s & keep == value) << i))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no dependency for one test).
    fn next(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *state >> 16
    }

    #[test]
    fn lanes_equal_agrees_with_the_portable_comparison() {
        let mut state = 7;
        for round in 0..20_000u32 {
            let value = next(&mut state) as u32;
            let keep = match round % 4 {
                0 => u32::MAX,
                1 => 0x7fff_ffff,
                2 => 0x8000_0000,
                _ => next(&mut state) as u32,
            };
            // Some lanes equal to the value, some 0, some random, with
            // the masked-off bits set at random.
            let lanes: [u32; 16] = std::array::from_fn(|_| {
                let noise = next(&mut state) as u32;
                match noise % 3 {
                    0 => (value & keep) | (noise & !keep),
                    1 => noise & !keep,
                    _ => noise,
                }
            });
            assert_eq!(
                lanes_equal(&lanes, keep, value & keep),
                lanes_equal_portable(&lanes, keep, value & keep),
                "{lanes:x?} keep {keep:#x} value {value:#x}"
            );
        }
    }

    #[test]
    fn each_lane_sets_its_own_bit() {
        for i in 0..16 {
            let mut lanes = [1u32; 16];
            lanes[i] = 5;
            assert_eq!(lanes_equal(&lanes, u32::MAX, 5), 1 << i);
            assert_eq!(lanes_equal(&lanes, u32::MAX, 1), 0xffff & !(1 << i));
        }
    }
}
