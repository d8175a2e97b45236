use super::mbuf::Mbuf;

pub use sluice_core::burst::MAX_BURST;

/// A burst slot has the size of the driver's mbuf pointer (the null
/// pointer being `None`), so the slots can be lent to it as an array.
const _: () =
    assert!(std::mem::size_of::<Option<Mbuf>>() == std::mem::size_of::<*mut dpdk_sys::rte_mbuf>());

/// A fixed-size array of owned mbufs: a burst to process or to transmit.
/// Lives on the worker's stack or in its struct; never allocates.
#[derive(Debug)]
pub struct MbufBurst {
    slots: [Option<Mbuf>; MAX_BURST],
    len: usize,
    /// Sum of the packet lengths held, kept on push so that counting TX
    /// bytes does not walk the mbufs again.
    bytes: u64,
}

impl Default for MbufBurst {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| None),
            len: 0,
            bytes: 0,
        }
    }
}

impl MbufBurst {
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends; gives the mbuf back if the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        match self.slots.get_mut(self.len) {
            Some(slot) => {
                self.bytes += u64::from(m.pkt_len());
                // Slots past `len` are empty (every way out of the burst
                // takes its mbufs), so nothing is dropped here: no test of
                // the old value on every packet.
                debug_assert!(slot.is_none());
                std::mem::forget(slot.replace(m));
                self.len += 1;
                Ok(())
            }
            None => Err(m),
        }
    }

    /// Appends; when the burst is full, first empties it with `flush` (a
    /// transmit, a ring enqueue). Gives the mbuf back only if there is
    /// still no room (the caller counts the drop). Always inlined: it is
    /// the per-packet step of every lane, and a caller shared with a cold
    /// path (fragments onto a TX lane) must not make it a call.
    #[inline(always)]
    pub fn push_or_flush(&mut self, m: Mbuf, flush: impl FnOnce(&mut Self)) -> Result<(), Mbuf> {
        match self.push(m) {
            Ok(()) => Ok(()),
            Err(m) => {
                flush(self);
                self.push(m)
            }
        }
    }

    /// The mbufs in the burst, in order: a slice iterator, so that the
    /// stages' loops, which zip it with their per-packet records, run by
    /// index (a `flatten` over the slots cost the burst path a check and
    /// a branch per packet in each of those loops).
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Mbuf> {
        self.as_slice().iter()
    }

    /// The mbufs in the burst, in order.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        let filled = self.slots.get(..self.len).unwrap_or(&[]);
        debug_assert!(filled.iter().all(Option::is_some));
        // SAFETY: `Mbuf` is `repr(transparent)` over `NonNull`, so
        // `Option<Mbuf>` has its layout with `None` as null (asserted
        // above for the size); the slots before `len` are all `Some`
        // (every push fills the next slot, every way out takes from the
        // front and moves the rest down: `Drain`'s drop), so they are
        // valid `Mbuf`s, borrowed for as long as `self` is.
        unsafe { std::slice::from_raw_parts(filled.as_ptr().cast::<Mbuf>(), filled.len()) }
    }

    /// The mbufs in the burst, in order, to write into.
    #[inline]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Mbuf> + '_ {
        self.slots[..self.len].iter_mut().flatten()
    }

    /// Fills the empty burst with `n` fresh mbufs from the pool `like`
    /// came from: all of them or none (`rte_pktmbuf_alloc_bulk`). False
    /// when the pool is short, the burst not empty or `n` above
    /// [`MAX_BURST`]. For the fragments of an oversize packet (AP-3).
    pub fn alloc_from_pool_of(&mut self, like: &Mbuf, n: usize) -> bool {
        // SAFETY: `like.pool()` is the live mempool `like` came from: a
        // pool is freed only with no mbuf out (`Mempool`'s drop checks).
        unsafe { self.alloc_from(like.pool(), n) }
    }

    /// [`MbufBurst::alloc_from_pool_of`] for a pool pointer.
    ///
    /// # Safety
    /// `pool` must be a live mempool of mbufs.
    pub(crate) unsafe fn alloc_from(&mut self, pool: *mut dpdk_sys::rte_mempool, n: usize) -> bool {
        if !self.is_empty() || n > MAX_BURST {
            return false;
        }
        let (slots, _) = self.spare_raw();
        // SAFETY: `pool` is live (the caller's contract);
        // rte_pktmbuf_alloc_bulk is safe from any lcore, and `slots` (the
        // whole empty burst) has room for n ≤ MAX_BURST pointers.
        let rc = unsafe { dpdk_sys::rte_pktmbuf_alloc_bulk(pool, slots, n as u32) };
        if rc != 0 {
            return false;
        }
        // SAFETY: on success the first n pointers are freshly allocated,
        // reset mbufs that nobody else references: ours now.
        unsafe { self.commit_raw(n) };
        true
    }

    /// Takes the mbufs out, in order. Whatever the iterator has not
    /// yielded when it is dropped (a `break`, an early return) stays in
    /// the burst, moved to the front, so the slots past
    /// [`MbufBurst::len`] are empty again for the driver calls that fill
    /// them.
    #[inline]
    pub fn drain(&mut self) -> Drain<'_> {
        // Empty until the iterator is dropped, which puts back what it did
        // not yield. Were it forgotten instead (`mem::forget`), the burst
        // stays empty and the rest is freed with it or, if a driver call
        // overwrites those slots first, leaks: never a length over emptied
        // slots, which would hand null pointers to a TX call.
        let end = std::mem::take(&mut self.len);
        self.bytes = 0;
        Drain {
            slots: self.slots.get_mut(..end).unwrap_or_default(),
            next: 0,
            len: &mut self.len,
            bytes: &mut self.bytes,
        }
    }

    /// Frees every mbuf still held, in one `rte_pktmbuf_free_bulk` call
    /// (one mempool put per run of mbufs from the same pool, instead of
    /// one per mbuf); returns how many.
    #[inline]
    pub fn clear(&mut self) -> usize {
        let (ptrs, n) = self.held_raw();
        if n == 0 {
            return 0;
        }
        // SAFETY: the first n slots are mbufs this burst owns (or None,
        // a null pointer, which rte_pktmbuf_free_bulk skips); they are
        // forgotten below, so nothing frees them twice.
        unsafe { dpdk_sys::rte_pktmbuf_free_bulk(ptrs, n as u32) };
        for slot in &mut self.slots[..n] {
            std::mem::forget(slot.take());
        }
        self.len = 0;
        self.bytes = 0;
        n
    }

    /// The empty tail of the burst as a driver's pointer array (an RX
    /// call writes received mbufs there) and its length. Follow with
    /// [`MbufBurst::commit_raw`].
    #[inline]
    pub(crate) fn spare_raw(&mut self) -> (*mut *mut dpdk_sys::rte_mbuf, usize) {
        let tail = self.slots.get_mut(self.len..).unwrap_or_default();
        // Option<Mbuf> is a nullable *mut rte_mbuf (asserted at the top),
        // and every slot past `len` is None (null).
        (tail.as_mut_ptr().cast(), tail.len())
    }

    /// Takes the `n` mbufs a driver wrote into [`MbufBurst::spare_raw`].
    ///
    /// # Safety
    /// The first `n` spare slots must now hold valid mbufs the caller owns.
    #[inline]
    pub(crate) unsafe fn commit_raw(&mut self, n: usize) {
        let start = self.len;
        self.len = (start + n).min(MAX_BURST);
        // Over the filled slots as `Mbuf`s: a load and an add per packet,
        // where a `flatten` over the `Option`s tested each one again.
        let received = self.as_slice().get(start..).unwrap_or_default();
        self.bytes += received.iter().map(|m| u64::from(m.pkt_len())).sum::<u64>();
    }

    /// The held mbufs as a driver's pointer array (a TX call takes them
    /// from there) and their number. Follow with [`MbufBurst::release_sent`].
    #[inline]
    pub(crate) fn held_raw(&mut self) -> (*mut *mut dpdk_sys::rte_mbuf, usize) {
        (self.slots.as_mut_ptr().cast(), self.len)
    }

    /// Gives up the first `sent` mbufs, which the driver now owns; the ones
    /// it did not take move to the front.
    ///
    /// # Safety
    /// The driver must have taken exactly the first `sent` of
    /// [`MbufBurst::held_raw`]'s mbufs.
    #[inline]
    pub(crate) unsafe fn release_sent(&mut self, sent: usize) {
        let n = self.len;
        let sent = sent.min(n);
        for slot in &mut self.slots[..sent] {
            std::mem::forget(slot.take());
        }
        self.len = n - sent;
        if self.len == 0 {
            self.bytes = 0;
            return;
        }
        self.slots[..n].rotate_left(sent);
        self.bytes = self.iter().map(|m| u64::from(m.pkt_len())).sum();
    }

    /// Sum of the packet lengths in the burst.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.bytes
    }
}

/// The iterator of [`MbufBurst::drain`].
#[derive(Debug)]
pub struct Drain<'a> {
    /// The slots held when draining began (a slice, so that the loop's
    /// bound is its length and the compiler knows it is at most
    /// [`MAX_BURST`]).
    slots: &'a mut [Option<Mbuf>],
    /// The next slot to yield.
    next: usize,
    /// The burst's length and byte count, set again on drop.
    len: &'a mut usize,
    bytes: &'a mut u64,
}

impl Iterator for Drain<'_> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        let slot = self.slots.get_mut(self.next)?;
        self.next += 1;
        slot.take()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.slots.len() - self.next;
        (left, Some(left))
    }
}

impl Drop for Drain<'_> {
    #[inline]
    fn drop(&mut self) {
        let left = self.slots.len().saturating_sub(self.next);
        if left == 0 {
            return;
        }
        // Left early: the slots before `next` are empty, the rest still
        // hold their mbufs; move those to the front, in order.
        self.slots.rotate_left(self.next);
        *self.len = left;
        *self.bytes = self.slots[..left]
            .iter()
            .flatten()
            .map(|m| u64::from(m.pkt_len()))
            .sum();
    }
}
