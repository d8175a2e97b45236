//! UDP header (RFC 768): view and emitter.

use super::{put, Error};

pub const HEADER_LEN: usize = 8;

/// A UDP header view.
///
/// The length field is not checked against the buffer: in a first IP
/// fragment it covers the whole datagram, which this packet only begins.
#[derive(Copy, Clone, Debug)]
pub struct UdpDatagram<'a> {
    hdr: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> UdpDatagram<'a> {
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let (hdr, payload) = buf
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        Ok(Self { hdr, payload })
    }

    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.hdr[0], self.hdr[1]])
    }

    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.hdr[2], self.hdr[3]])
    }

    pub fn len(&self) -> u16 {
        u16::from_be_bytes([self.hdr[4], self.hdr[5]])
    }

    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }

    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.hdr[6], self.hdr[7]])
    }

    /// Everything after the header in the buffer.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// A UDP header to emit. The checksum is written as given: 0 ("none") is
/// what tunnels over IPv4 use (RFC 768; RFC 6935 discusses IPv6).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Bytes after the UDP header.
    pub payload_len: usize,
    pub checksum: u16,
}

impl UdpRepr {
    pub fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let len = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        put::<0, 2, HEADER_LEN>(hdr, self.src_port.to_be_bytes());
        put::<2, 2, HEADER_LEN>(hdr, self.dst_port.to_be_bytes());
        put::<4, 2, HEADER_LEN>(hdr, len.to_be_bytes());
        put::<6, 2, HEADER_LEN>(hdr, self.checksum.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_and_emit_round_trip() {
        let repr = UdpRepr {
            src_port: 50000,
            dst_port: 6080,
            payload_len: 3,
            checksum: 0,
        };
        let mut buf = [0u8; HEADER_LEN + 3];
        let (hdr, _) = buf.split_first_chunk_mut::<HEADER_LEN>().unwrap();
        repr.emit(hdr).unwrap();
        let u = UdpDatagram::new_checked(&buf).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.len(), u.checksum()),
            (50000, 6080, 11, 0)
        );
        assert_eq!(u.payload().len(), 3);
        let too_big = UdpRepr {
            payload_len: 65_528,
            ..repr
        };
        assert_eq!(too_big.emit(&mut [0; HEADER_LEN]), Err(Error::Malformed));
    }

    #[test]
    fn truncation_at_every_boundary() {
        let d = [0u8; HEADER_LEN];
        for cut in 0..HEADER_LEN {
            assert_eq!(
                UdpDatagram::new_checked(&d[..cut]).err(),
                Some(Error::Truncated)
            );
        }
    }
}
