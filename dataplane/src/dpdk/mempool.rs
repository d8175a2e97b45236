use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use super::burst::MbufBurst;
use super::eal::{Eal, EalGuard};
use super::error::DpdkError;

/// Bytes in front of a received frame in every mbuf
/// (`RTE_PKTMBUF_HEADROOM`): where the encapsulation prepends its headers.
/// Part of the data room.
pub const MBUF_HEADROOM: usize = dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;

// The sans-IO pipeline's test buffers model the same headroom.
const _: () = assert!(MBUF_HEADROOM == sluice_core::packet::DEFAULT_HEADROOM);

/// A packet-buffer mempool (`rte_pktmbuf_pool_create`). A handle: clones
/// share the pool, which is freed when the last one goes — ports (their
/// RX queues refill from it) and rings hold one, so the pool outlives
/// them. It holds EAL ([`Eal`] cleans up only after it).
#[derive(Clone, Debug)]
pub struct Mempool(Arc<Pool>);

#[derive(Debug)]
struct Pool {
    ptr: NonNull<dpdk_sys::rte_mempool>,
    name: String,
    eal: EalGuard,
}

// SAFETY: rte_mempool is designed for concurrent use from many lcores
// (lock-free ring + per-lcore caches); the pointer stays valid until the
// last handle is dropped.
unsafe impl Send for Pool {}
// SAFETY: as above; get/put are thread-safe.
unsafe impl Sync for Pool {}

impl Mempool {
    /// Creates a pool of `n` mbufs with `data_room` bytes each (headroom
    /// included) and a per-lcore cache of `cache` mbufs.
    pub fn new(
        eal: &Eal,
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<Self, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::msg("rte_pktmbuf_pool_create", "name contains NUL"))?;
        // SAFETY: EAL is initialised (`eal`); name is a valid C string
        // copied by DPDK; SOCKET_ID_ANY = -1.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, -1)
        };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| DpdkError::from_rte_errno(format!("rte_pktmbuf_pool_create({name})")))?;
        Ok(Self(Arc::new(Pool {
            ptr,
            name: name.to_string(),
            eal: eal.guard(),
        })))
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.0.ptr.as_ptr()
    }

    pub(crate) fn eal(&self) -> EalGuard {
        self.0.eal.clone()
    }

    /// Mbufs the pool was created with.
    pub fn size(&self) -> usize {
        // SAFETY: the pool is alive (we hold it); `size` is set when the
        // pool is created and never written again.
        unsafe { (*self.as_ptr()).size as usize }
    }

    /// Mbufs out of the pool: held by `Mbuf`s, bursts, rings or a port's
    /// descriptors (those in per-lcore caches count as in the pool).
    pub fn in_use(&self) -> usize {
        // SAFETY: the pool is alive (we hold it); the call only reads its
        // ring and cache counters.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.as_ptr()) as usize }
    }

    /// Fills the empty `burst` with `n` fresh mbufs: all of them or none
    /// (`rte_pktmbuf_alloc_bulk`). False when the pool is short, the burst
    /// not empty or `n` above its capacity.
    pub fn alloc_into(&self, burst: &mut MbufBurst, n: usize) -> bool {
        // SAFETY: the pool is alive (we hold it).
        unsafe { burst.alloc_from(self.as_ptr(), n) }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the pool is alive; the call only reads counters.
        let in_use = unsafe { dpdk_sys::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use != 0 {
            // An mbuf outlived every port and ring (the runtime drops its
            // workers, and so their bursts, first): freeing the pool would
            // leave it pointing into freed memory. Leave the pool, and with
            // it EAL (a guard that is never released), allocated instead.
            eprintln!(
                "sluice: packet pool {}: {in_use} mbuf(s) still in use; the pool and EAL stay allocated",
                self.name
            );
            std::mem::forget(self.eal.clone());
            return;
        }
        // SAFETY: every mbuf is back in the pool and no port or ring holds
        // it any more (each holds a handle); nothing uses the pool.
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) }
    }
}
