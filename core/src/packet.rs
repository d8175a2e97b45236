//! The packet buffer abstraction the sans-IO pipeline works on.
//!
//! DPDK's `Mbuf` implements it in the worker; [`VecPacket`] implements it for
//! tests, benches and fuzzers, with the same headroom semantics.

/// A contiguous packet with headroom in front of it.
pub trait PacketBuf {
    fn data(&self) -> &[u8];
    fn data_mut(&mut self) -> &mut [u8];
    /// Grows the packet at the front by `n` bytes (contents of the new bytes
    /// unspecified). Returns false, leaving the packet as it was, if the
    /// headroom is too small.
    fn prepend(&mut self, n: usize) -> bool;
    /// Removes `n` bytes from the front. Returns false, leaving the packet as
    /// it was, if the packet is shorter than `n`.
    fn trim_front(&mut self, n: usize) -> bool;
    /// Cuts the packet to `len` bytes (no-op if already shorter).
    fn truncate(&mut self, len: usize);
    /// Grows the packet at the end by `n` bytes (contents of the new bytes
    /// unspecified). Returns false, leaving the packet as it was, if the
    /// tailroom is too small. Used to fill fresh buffers with fragments.
    fn append(&mut self, n: usize) -> bool;

    /// Keeps the `keep` bytes at offset `from` with `front` bytes in front
    /// of them (the bytes before `from`, or headroom; contents unspecified)
    /// and nothing after, and returns the new data (`front` + `keep`
    /// bytes): what an encapsulation does to a frame in one step. None,
    /// leaving the packet as it was, when `from` + `keep` is past its end
    /// or `front` more than the bytes before `from` and the headroom.
    #[inline]
    fn reframe(&mut self, from: usize, front: usize, keep: usize) -> Option<&mut [u8]> {
        if from.checked_add(keep)? > self.data().len() {
            return None;
        }
        let moved = match front.checked_sub(from) {
            Some(grow) => self.prepend(grow),
            None => self.trim_front(from - front),
        };
        if !moved {
            return None;
        }
        self.truncate(front + keep);
        Some(self.data_mut())
    }
}

/// Default headroom, as DPDK's RTE_PKTMBUF_HEADROOM.
pub const DEFAULT_HEADROOM: usize = 128;

/// A heap-backed packet with headroom, for tests, benches and fuzzing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecPacket {
    buf: Vec<u8>,
    start: usize,
}

impl VecPacket {
    pub fn new(bytes: &[u8]) -> Self {
        Self::with_headroom(bytes, DEFAULT_HEADROOM)
    }

    pub fn with_headroom(bytes: &[u8], headroom: usize) -> Self {
        let mut buf = vec![0u8; headroom + bytes.len()];
        buf[headroom..].copy_from_slice(bytes);
        Self {
            buf,
            start: headroom,
        }
    }
}

impl PacketBuf for VecPacket {
    fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }

    fn trim_front(&mut self, n: usize) -> bool {
        if n > self.buf.len() - self.start {
            return false;
        }
        self.start += n;
        true
    }

    fn truncate(&mut self, len: usize) {
        let end = self.start.saturating_add(len);
        if end < self.buf.len() {
            self.buf.truncate(end);
        }
    }

    /// Unbounded tailroom (a test buffer grows).
    fn append(&mut self, n: usize) -> bool {
        self.buf.resize(self.buf.len() + n, 0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_and_trim_respect_bounds() {
        let mut p = VecPacket::with_headroom(&[1, 2, 3], 4);
        assert!(!p.prepend(5));
        assert_eq!(p.data(), &[1, 2, 3]);
        assert!(p.prepend(4));
        assert_eq!(p.data().len(), 7);
        assert!(p.trim_front(6));
        assert_eq!(p.data(), &[3]);
        assert!(!p.trim_front(2));
        p.truncate(0);
        assert!(p.data().is_empty());
        assert!(p.append(2));
        assert_eq!(p.data(), &[0, 0]);
    }
}
