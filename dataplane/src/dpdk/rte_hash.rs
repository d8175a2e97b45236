//! DPDK's `rte_hash` with fixed-size keys and a `u64` value: only as the
//! peer in the conntrack benchmark (benches/benches/conntrack.rs), so the
//! shard's numbers have a reference on the same machine and keys.

use std::ffi::CString;
use std::ptr::NonNull;

use super::eal::{Eal, EalGuard};
use super::error::DpdkError;

/// An `rte_hash` table of `K`-byte keys. Single-threaded use only (created
/// without the multi-writer / read-write-concurrency flags), hence not
/// `Sync`. Holds EAL ([`Eal`] cleans up only after it).
pub struct RteHash<const K: usize> {
    raw: NonNull<dpdk_sys::rte_hash>,
    _eal: EalGuard,
}

impl<const K: usize> RteHash<K> {
    /// Creates a table for `entries` keys. `name` must be unique in the
    /// process (DPDK names its memory zones after it).
    pub fn new(eal: &Eal, name: &str, entries: u32) -> Result<Self, DpdkError> {
        let cname = CString::new(name)
            .map_err(|_| DpdkError::msg("rte_hash_create", "name contains a NUL byte"))?;
        let params = dpdk_sys::rte_hash_parameters {
            name: cname.as_ptr(),
            entries,
            key_len: K as u32,
            // None: DPDK's default (CRC32 with SSE4.2, else jhash).
            hash_func: None,
            hash_func_init_val: 0,
            socket_id: 0,
            ..Default::default()
        };
        // SAFETY: params is fully initialised and outlives the call; DPDK
        // copies the name into the table; EAL is initialised (`eal`).
        let raw = unsafe { dpdk_sys::rte_hash_create(&params) };
        NonNull::new(raw)
            .map(|raw| Self {
                raw,
                _eal: eal.guard(),
            })
            .ok_or_else(|| DpdkError::from_rc("rte_hash_create", 0))
    }

    /// Adds or replaces `key` → `value`.
    pub fn insert(&mut self, key: &[u8; K], value: u64) -> Result<(), DpdkError> {
        // SAFETY: the table is live (owned by self), `key` points to K
        // readable bytes (its key_len); the data pointer is stored as an
        // opaque word, never dereferenced by DPDK.
        let rc = unsafe {
            dpdk_sys::rte_hash_add_key_data(
                self.raw.as_ptr(),
                key.as_ptr().cast(),
                value as usize as *mut std::ffi::c_void,
            )
        };
        if rc < 0 {
            Err(DpdkError::from_rc("rte_hash_add_key_data", rc))
        } else {
            Ok(())
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &[u8; K]) -> Option<u64> {
        let mut data: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the table is live, `key` points to K readable bytes and
        // `data` is a valid out-pointer for the duration of the call.
        let rc = unsafe {
            dpdk_sys::rte_hash_lookup_data(self.raw.as_ptr(), key.as_ptr().cast(), &mut data)
        };
        (rc >= 0).then_some(data as usize as u64)
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        // SAFETY: the table is live.
        let n = unsafe { dpdk_sys::rte_hash_count(self.raw.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<const K: usize> Drop for RteHash<K> {
    fn drop(&mut self) {
        // SAFETY: the table was created by rte_hash_create and is freed once.
        unsafe { dpdk_sys::rte_hash_free(self.raw.as_ptr()) }
    }
}
