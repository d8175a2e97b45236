//! Memory advice for large worker-owned tables (the conntrack shard).
//!
//! A shard is tens of megabytes touched at random: with 4 KiB pages every
//! lookup also misses the TLB, and under virtualisation a page walk costs
//! several memory accesses. Transparent huge pages (2 MiB) cut that; the
//! kernel here runs THP in `madvise` mode, so the table must ask for them.

/// Asks for transparent huge pages over `v`'s whole allocation (capacity,
/// not length). Call before the memory is first written so the first
/// faults already get huge pages. Best effort: the advice failing (THP off,
/// non-Linux kernel) leaves ordinary pages, which is only slower.
pub fn advise_huge_pages<T>(v: &mut Vec<T>) {
    let len = v.capacity().saturating_mul(std::mem::size_of::<T>());
    if len == 0 {
        return;
    }
    let start = v.as_mut_ptr() as usize;
    // madvise wants a page-aligned start; round up into the allocation.
    let page = 4096usize;
    let aligned = (start + page - 1) & !(page - 1);
    let Some(len) = len.checked_sub(aligned - start) else {
        return;
    };
    // SAFETY: [aligned, aligned + len) lies inside `v`'s live allocation,
    // which this call does not free or move; MADV_HUGEPAGE only changes how
    // the kernel backs the range, never its contents or validity.
    let _ = unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
}
