use super::Mbuf;

/// Largest burst a queue is polled or flushed with.
pub const MAX_BURST: usize = 64;

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
                *slot = Some(m);
                self.len += 1;
                Ok(())
            }
            None => Err(m),
        }
    }

    /// The mbufs in the burst, in order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &Mbuf> + '_ {
        self.slots[..self.len].iter().flatten()
    }

    /// Takes every mbuf out, in order, leaving the burst empty.
    #[inline]
    pub fn drain(&mut self) -> impl Iterator<Item = Mbuf> + '_ {
        let n = std::mem::take(&mut self.len);
        self.bytes = 0;
        self.slots[..n].iter_mut().filter_map(Option::take)
    }

    /// Frees every mbuf still held; returns how many.
    #[inline]
    pub fn clear(&mut self) -> usize {
        self.drain().count()
    }

    /// Moves the first `n` mbufs out as raw pointers into `out` (for a TX
    /// call), compacting what remains to the front.
    #[inline]
    pub(crate) fn take_raw(&mut self, out: &mut [*mut dpdk_sys::rte_mbuf; MAX_BURST]) -> usize {
        let n = self.len;
        for (dst, slot) in out.iter_mut().zip(self.slots[..n].iter_mut()) {
            if let Some(m) = slot.take() {
                *dst = m.into_raw();
            }
        }
        self.len = 0;
        self.bytes = 0;
        n
    }

    /// Puts mbufs the driver did not take back into the burst.
    ///
    /// # Safety
    /// Every pointer must be a valid mbuf the caller owns.
    #[inline]
    pub(crate) unsafe fn restore_raw(&mut self, ptrs: &[*mut dpdk_sys::rte_mbuf]) {
        for &p in ptrs {
            if let Some(nn) = std::ptr::NonNull::new(p) {
                // SAFETY: the caller guarantees ownership of each pointer.
                let m = unsafe { Mbuf::from_raw(nn) };
                // The burst was emptied by take_raw, so there is room for
                // every pointer that came out of it.
                let _ = self.push(m);
            }
        }
    }
}

impl MbufBurst {
    /// Sum of the packet lengths in the burst.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.bytes
    }
}
