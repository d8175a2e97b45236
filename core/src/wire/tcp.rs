//! TCP header (RFC 9293 §3.1): a view of ports, sequence numbers, flags,
//! data offset and window.

use super::{get_u16, get_u32, get_u8, Error};

pub const HEADER_LEN: usize = 20;

/// Where each field of the fixed header starts.
pub mod offset {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub(crate) const ACK: usize = 8;
    /// Data offset in 32-bit words (high nibble).
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
}

#[cfg(test)]
pub(crate) const FLAG_FIN: u8 = 0x01;
pub const FLAG_SYN: u8 = 0x02;
pub(crate) const FLAG_RST: u8 = 0x04;
pub const FLAG_ACK: u8 = 0x10;

/// What an accessor reads when the buffer is shorter than the header.
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// The header length, in bytes, a data-offset byte announces.
#[inline(always)]
pub(crate) const fn data_offset_len(byte: u8) -> usize {
    (byte >> 4) as usize * 4
}

/// A view of a TCP segment in `T` (options included). The segment is
/// forwarded untouched, so this view only reads.
#[derive(Copy, Clone, Debug)]
pub struct TcpSegment<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// A view without any check: accessors read zeros if `buffer` is
    /// shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks data offset ≥ 5 and that the whole header is present. The
    /// checksum is not verified (the segment is forwarded untouched).
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let hdr = buffer
            .as_ref()
            .first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        let doff = data_offset_len(get_u8::<{ offset::DATA_OFFSET }, HEADER_LEN>(hdr));
        if doff < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if doff > buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        get_u16::<{ offset::SRC_PORT }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        get_u16::<{ offset::DST_PORT }, HEADER_LEN>(self.header())
    }

    pub fn seq(&self) -> u32 {
        get_u32::<{ offset::SEQ }, HEADER_LEN>(self.header())
    }

    pub fn ack_number(&self) -> u32 {
        get_u32::<{ offset::ACK }, HEADER_LEN>(self.header())
    }

    pub fn header_len(&self) -> usize {
        data_offset_len(get_u8::<{ offset::DATA_OFFSET }, HEADER_LEN>(self.header()))
    }

    /// The flag byte (CWR ECE URG ACK PSH RST SYN FIN); see `FLAG_*`.
    #[inline(always)]
    pub fn flags(&self) -> u8 {
        get_u8::<{ offset::FLAGS }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn syn(&self) -> bool {
        self.flags() & FLAG_SYN != 0
    }

    pub fn ack(&self) -> bool {
        self.flags() & FLAG_ACK != 0
    }

    #[cfg(test)]
    pub(crate) fn fin(&self) -> bool {
        self.flags() & FLAG_FIN != 0
    }

    pub fn rst(&self) -> bool {
        self.flags() & FLAG_RST != 0
    }

    pub fn window(&self) -> u16 {
        get_u16::<{ offset::WINDOW }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn options(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }

    #[cfg(test)]
    pub(crate) fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(doff: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut s = vec![
            0x30,
            0x39,
            0x00,
            0x50,
            0,
            0,
            0,
            1,
            0,
            0,
            0,
            2,
            doff << 4,
            flags,
            0xff,
            0xff,
            0,
            0,
            0,
            0,
        ];
        s.extend(std::iter::repeat_n(
            1u8,
            usize::from(doff.saturating_sub(5)) * 4,
        ));
        s.extend_from_slice(payload);
        s
    }

    #[test]
    fn accessors() {
        let s = segment(6, FLAG_SYN | FLAG_ACK, &[7, 8]);
        let t = TcpSegment::new_checked(&s).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (12345, 80));
        assert_eq!((t.seq(), t.ack_number(), t.window()), (1, 2, 0xffff));
        assert!(t.syn() && t.ack() && !t.fin() && !t.rst());
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.options(), &[1, 1, 1, 1]);
        assert_eq!(t.payload(), &[7, 8]);
    }

    #[test]
    fn data_offset_below_five_is_malformed() {
        for doff in 0..5 {
            let s = segment(doff, 0, &[0; 40]);
            assert_eq!(
                TcpSegment::new_checked(&s).err(),
                Some(Error::Malformed),
                "{doff}"
            );
        }
    }

    #[test]
    fn truncation_at_every_boundary() {
        let s = segment(15, 0, &[]);
        for cut in 0..s.len() {
            assert_eq!(
                TcpSegment::new_checked(&s[..cut]).err(),
                Some(Error::Truncated),
                "{cut}"
            );
        }
        assert!(TcpSegment::new_checked(&s).is_ok());
    }
}
