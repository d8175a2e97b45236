//! Cache prefetch hints (DPDK's `rte_prefetch0` family). The intrinsic is
//! `unsafe` to call in Rust, although a prefetch never faults and never
//! changes program state.

/// Hints that the cache line holding `*p` will be read soon.
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is in the x86-64 baseline (SSE) and never faults,
    // whatever the address; it only hints the cache.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
