use std::ptr::NonNull;

use sluice_core::burst::BurstPacket;
use sluice_core::packet::PacketBuf;

use super::ids::PortId;

/// An owned, single-segment packet buffer. Freed on drop; ownership passes
/// to and from drivers through a burst's slots (`MbufBurst::held_raw`,
/// `MbufBurst::spare_raw`).
// Transparent over a non-null pointer: `Option<Mbuf>` then has the layout
// of a nullable `*mut rte_mbuf`, so a burst's slots are handed to the
// driver as its pointer array without copying (`MbufBurst::spare_raw`).
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<dpdk_sys::rte_mbuf>,
}

// SAFETY: an mbuf is owned by exactly one `Mbuf`; moving it between threads
// moves that ownership (DPDK's rings do the same). rte_pktmbuf_free may be
// called from any lcore or thread.
unsafe impl Send for Mbuf {}

impl Mbuf {
    #[inline]
    fn raw(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: we own a valid mbuf for our whole lifetime.
        unsafe { self.ptr.as_ref() }
    }

    /// Packet length (all segments).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.raw().pkt_len
    }

    /// The DPDK port the packet was received on.
    #[inline]
    pub fn port(&self) -> PortId {
        PortId::new(self.raw().port)
    }

    /// Whether the mbuf is a single segment (the only kind we process).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.raw().nb_segs == 1
    }

    /// Bytes of packet data a freshly allocated mbuf of this one's pool
    /// holds (its buffer minus DPDK's default headroom): the largest frame
    /// a fragment built in such an mbuf can be (AP-3).
    #[inline]
    pub fn fresh_room(&self) -> usize {
        usize::from(self.raw().buf_len).saturating_sub(dpdk_sys::RTE_PKTMBUF_HEADROOM as usize)
    }

    /// The mempool this mbuf was allocated from (valid as long as any of
    /// its mbufs is: `Mempool` frees a pool only with every mbuf back).
    #[inline]
    pub(crate) fn pool(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw().pool
    }
}

impl PacketBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: for the first segment, buf_addr + data_off .. + data_len is
        // initialised packet data inside the buffer we own; the slice borrows
        // self, so the mbuf cannot be freed or changed meanwhile. We only
        // expose the first segment (multi-segment packets are dropped by the
        // worker before the pipeline sees them).
        unsafe {
            std::slice::from_raw_parts(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, with exclusive access through &mut self.
        unsafe {
            let m = self.ptr.as_mut();
            std::slice::from_raw_parts_mut(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    // prepend / trim_front / truncate are DPDK's rte_pktmbuf_prepend / adj /
    // trim for a single segment, written out here so they inline into the
    // packet path instead of costing two out-of-line calls per packet.

    #[inline]
    fn prepend(&mut self, n: usize) -> bool {
        let Ok(n) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: we own the mbuf exclusively (&mut self); only header
        // fields change, and the check keeps data_off within the buffer.
        let m = unsafe { self.ptr.as_mut() };
        if n > m.data_off {
            return false;
        }
        m.data_off -= n;
        m.data_len += n;
        m.pkt_len += u32::from(n);
        true
    }

    #[inline]
    fn trim_front(&mut self, n: usize) -> bool {
        // SAFETY: as in `prepend`.
        let m = unsafe { self.ptr.as_mut() };
        let Ok(n) = u16::try_from(n) else {
            return false;
        };
        if n > m.data_len {
            return false;
        }
        m.data_off += n;
        m.data_len -= n;
        m.pkt_len -= u32::from(n);
        true
    }

    #[inline]
    fn truncate(&mut self, len: usize) {
        // SAFETY: as in `prepend`; the pipeline only sees single-segment
        // mbufs, so data_len and pkt_len describe the same bytes.
        let m = unsafe { self.ptr.as_mut() };
        if len < usize::from(m.data_len) {
            let cut = m.data_len - len as u16;
            m.data_len -= cut;
            m.pkt_len -= u32::from(cut);
        }
    }

    // The new window in one step: one bounds check, one write of each
    // length field (`prepend` + `trim_front` + `truncate` would each check
    // and write).
    #[inline(always)]
    fn reframe(&mut self, from: usize, front: usize, keep: usize) -> Option<&mut [u8]> {
        let (Ok(from), Ok(front), Ok(keep)) = (
            u16::try_from(from),
            u16::try_from(front),
            u16::try_from(keep),
        ) else {
            return None;
        };
        // SAFETY: we own the mbuf exclusively (&mut self); the checks keep
        // the new window inside the old one's start minus the headroom and
        // its end, so it lies within the buffer, and single-segment (the
        // pipeline sees no other), so data_len and pkt_len agree.
        unsafe {
            let m = self.ptr.as_mut();
            let end = u32::from(from) + u32::from(keep);
            let start = u32::from(m.data_off) + u32::from(from);
            if end > u32::from(m.data_len) || u32::from(front) > start {
                return None;
            }
            // Both fit a u16: they are at most data_off + data_len.
            m.data_off = (start - u32::from(front)) as u16;
            let len = u32::from(front) + u32::from(keep);
            m.data_len = len as u16;
            m.pkt_len = len;
            Some(std::slice::from_raw_parts_mut(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                len as usize,
            ))
        }
    }

    // rte_pktmbuf_append for a single segment (only fresh, single-segment
    // mbufs are filled this way: fragments, AP-3).
    #[inline]
    fn append(&mut self, n: usize) -> bool {
        // SAFETY: as in `prepend`; the check keeps data_off + data_len
        // within buf_len, so the grown data stays inside the buffer.
        let m = unsafe { self.ptr.as_mut() };
        let Ok(n) = u16::try_from(n) else {
            return false;
        };
        let end = usize::from(m.data_off) + usize::from(m.data_len) + usize::from(n);
        if m.nb_segs != 1 || end > usize::from(m.buf_len) {
            return false;
        }
        m.data_len += n;
        m.pkt_len += u32::from(n);
        true
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf and nobody else references it.
        unsafe { dpdk_sys::rte_pktmbuf_free(self.ptr.as_ptr()) }
    }
}

impl BurstPacket for Mbuf {
    #[inline]
    fn is_contiguous(&self) -> bool {
        Mbuf::is_contiguous(self)
    }
}
