//! TCP header (RFC 9293 §3.1): ports, flags, data offset.

use super::Error;

pub const HEADER_LEN: usize = 20;

pub const FLAG_FIN: u8 = 0x01;
pub const FLAG_SYN: u8 = 0x02;
pub const FLAG_RST: u8 = 0x04;
pub const FLAG_PSH: u8 = 0x08;
pub const FLAG_ACK: u8 = 0x10;

/// A validated TCP segment header (options included).
#[derive(Copy, Clone, Debug)]
pub struct TcpSegment<'a> {
    hdr: &'a [u8; HEADER_LEN],
    options: &'a [u8],
    payload: &'a [u8],
}

impl<'a> TcpSegment<'a> {
    /// Checks data offset ≥ 5 and that the whole header is present. The
    /// checksum is not verified (the segment is forwarded untouched).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let hdr = buf.first_chunk::<HEADER_LEN>().ok_or(Error::Truncated)?;
        let doff = usize::from(hdr[12] >> 4) * 4;
        if doff < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let options = buf.get(HEADER_LEN..doff).ok_or(Error::Truncated)?;
        let payload = buf.get(doff..).ok_or(Error::Truncated)?;
        Ok(Self {
            hdr,
            options,
            payload,
        })
    }

    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.hdr[0], self.hdr[1]])
    }

    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.hdr[2], self.hdr[3]])
    }

    pub fn seq(&self) -> u32 {
        u32::from_be_bytes([self.hdr[4], self.hdr[5], self.hdr[6], self.hdr[7]])
    }

    pub fn ack_number(&self) -> u32 {
        u32::from_be_bytes([self.hdr[8], self.hdr[9], self.hdr[10], self.hdr[11]])
    }

    pub fn header_len(&self) -> usize {
        usize::from(self.hdr[12] >> 4) * 4
    }

    /// The flag byte (CWR ECE URG ACK PSH RST SYN FIN); see `FLAG_*`.
    pub fn flags(&self) -> u8 {
        self.hdr[13]
    }

    pub fn syn(&self) -> bool {
        self.flags() & FLAG_SYN != 0
    }

    pub fn ack(&self) -> bool {
        self.flags() & FLAG_ACK != 0
    }

    pub fn fin(&self) -> bool {
        self.flags() & FLAG_FIN != 0
    }

    pub fn rst(&self) -> bool {
        self.flags() & FLAG_RST != 0
    }

    pub fn window(&self) -> u16 {
        u16::from_be_bytes([self.hdr[14], self.hdr[15]])
    }

    pub fn options(&self) -> &'a [u8] {
        self.options
    }

    pub fn payload(&self) -> &'a [u8] {
        self.payload
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
