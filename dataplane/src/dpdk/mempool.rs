use std::ffi::CString;
use std::ptr::NonNull;

use super::DpdkError;

/// Bytes in front of a received frame in every mbuf
/// (`RTE_PKTMBUF_HEADROOM`): where the encapsulation prepends its headers.
/// Part of the data room.
pub const MBUF_HEADROOM: usize = dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;

// The sans-IO pipeline's test buffers model the same headroom.
const _: () = assert!(MBUF_HEADROOM == sluice_core::packet::DEFAULT_HEADROOM);

/// A packet-buffer mempool (`rte_pktmbuf_pool_create`).
#[derive(Debug)]
pub struct Mempool {
    ptr: NonNull<dpdk_sys::rte_mempool>,
}

// SAFETY: rte_mempool is designed for concurrent use from many lcores
// (lock-free ring + per-lcore caches); the pointer stays valid until Drop.
unsafe impl Send for Mempool {}
// SAFETY: as above; get/put are thread-safe.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n` mbufs with `data_room` bytes each (headroom
    /// included) and a per-lcore cache of `cache` mbufs.
    pub fn new(name: &str, n: u32, cache: u32, data_room: u16) -> Result<Self, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::msg("rte_pktmbuf_pool_create", "name contains NUL"))?;
        // SAFETY: EAL is initialised (a Mempool can only be made after
        // Eal::init in our start-up order); name is a valid C string copied
        // by DPDK; SOCKET_ID_ANY = -1.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, -1)
        };
        NonNull::new(ptr)
            .map(|ptr| Self { ptr })
            .ok_or_else(|| DpdkError::from_rte_errno(format!("rte_pktmbuf_pool_create({name})")))
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.ptr.as_ptr()
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: every mbuf from this pool is owned by an `Mbuf` or a port
        // ring; ports are stopped and closed before the pool is dropped
        // (start-up order in the runtime), so nothing uses the pool any more.
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) }
    }
}
