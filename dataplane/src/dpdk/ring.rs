//! Single-producer single-consumer mbuf rings between two workers (software
//! steering: one flow, one shard, when the port cannot hash on addresses).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use super::burst::MbufBurst;
use super::error::DpdkError;
use super::mempool::Mempool;

// From rte_ring_core.h (macros bindgen cannot see through).
const RING_F_SP_ENQ: u32 = 0x0001;
const RING_F_SC_DEQ: u32 = 0x0002;

/// The ring itself; freed when both ends are gone. Holds the pool of the
/// mbufs it carries, so those still queued can be freed then (and, through
/// the pool, EAL).
struct Ring {
    ptr: NonNull<dpdk_sys::rte_ring>,
    _pool: Mempool,
}

// SAFETY: an rte_ring is designed to be shared between lcores; each end
// below is used by exactly one thread (SP/SC flags), and rte_ring_free is
// called once, by the last owner of the Arc.
unsafe impl Send for Ring {}
// SAFETY: as above; the two ends touch disjoint producer/consumer state.
unsafe impl Sync for Ring {}

impl Ring {
    /// Moves up to the room left in `burst` out of the ring.
    ///
    /// # Safety
    /// The caller must be the ring's only consumer.
    unsafe fn dequeue_into(&self, burst: &mut MbufBurst) -> usize {
        let (slots, room) = burst.spare_raw();
        if room == 0 {
            return 0;
        }
        // SAFETY: the caller is the only consumer; `slots` has room for
        // `room` pointers (the burst's empty tail, lent for this call).
        let n = unsafe {
            dpdk_sys::rte_ring_dequeue_burst(
                self.ptr.as_ptr(),
                slots.cast::<*mut std::ffi::c_void>(),
                room as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        let n = n.min(room);
        // SAFETY: the producer enqueued owned mbufs; dequeuing the first `n`
        // hands that ownership to us.
        unsafe { burst.commit_raw(n) };
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Mbufs still queued would leak: free them first.
        let mut burst = MbufBurst::default();
        // SAFETY: no end is left (we are the last Arc owner), so this thread
        // is the only consumer.
        while unsafe { self.dequeue_into(&mut burst) } > 0 {
            burst.clear();
        }
        // SAFETY: the ring was created by rte_ring_create and nobody uses it.
        unsafe { dpdk_sys::rte_ring_free(self.ptr.as_ptr()) };
    }
}

/// The sending end: owned by one worker.
pub struct RingProducer(Arc<Ring>);
/// The receiving end: owned by one worker.
pub struct RingConsumer(Arc<Ring>);

impl std::fmt::Debug for RingProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingProducer")
    }
}

impl std::fmt::Debug for RingConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingConsumer")
    }
}

/// Creates a ring of `capacity` (a power of two) slots for mbufs of
/// `pool`; one slot stays empty, as rte_ring requires.
pub fn mbuf_ring(
    pool: &Mempool,
    name: &str,
    capacity: u32,
) -> Result<(RingProducer, RingConsumer), DpdkError> {
    let cname = CString::new(name).map_err(|_| DpdkError::msg("ring name", "contains NUL"))?;
    // SAFETY: EAL is initialised (the pool holds it); cname is a valid C
    // string; SOCKET_ID_ANY (-1) is allowed.
    let ring = unsafe {
        dpdk_sys::rte_ring_create(cname.as_ptr(), capacity, -1, RING_F_SP_ENQ | RING_F_SC_DEQ)
    };
    let ptr = NonNull::new(ring)
        .ok_or_else(|| DpdkError::from_rc(format!("rte_ring_create({name})"), 0))?;
    let ring = Arc::new(Ring {
        ptr,
        _pool: pool.clone(),
    });
    Ok((RingProducer(Arc::clone(&ring)), RingConsumer(ring)))
}

impl RingProducer {
    /// Moves as many mbufs of `burst` as fit into the ring; the rest stay
    /// in `burst` (the caller counts and frees them). Returns how many went.
    #[inline]
    pub fn enqueue(&mut self, burst: &mut MbufBurst) -> usize {
        let (slots, n) = burst.held_raw();
        if n == 0 {
            return 0;
        }
        // SAFETY: this producer is the ring's only producer (not Clone, one
        // owner); slots[..n] are owned mbufs, and ownership passes to the
        // ring for the first `sent`.
        let sent = unsafe {
            dpdk_sys::rte_ring_enqueue_burst(
                self.0.ptr.as_ptr(),
                slots.cast::<*mut std::ffi::c_void>().cast_const(),
                n as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        let sent = sent.min(n);
        // SAFETY: the ring took exactly the first `sent`.
        unsafe { burst.release_sent(sent) };
        sent
    }
}

impl RingConsumer {
    /// Appends up to the room left in `burst`; returns how many arrived.
    #[inline]
    pub fn dequeue(&mut self, burst: &mut MbufBurst) -> usize {
        // SAFETY: this consumer is the ring's only consumer (not Clone, one
        // owner).
        unsafe { self.0.dequeue_into(burst) }
    }
}
