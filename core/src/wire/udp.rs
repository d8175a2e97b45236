//! UDP header (RFC 768): a two-way view and an emitter.

#[cfg(test)]
use std::net::Ipv4Addr;
use std::net::Ipv6Addr;

use super::proto::UDP;
use super::{checksum, get_u16, put, set_u16, Error};

pub(crate) const HEADER_LEN: usize = 8;

/// Where each field of the header starts.
pub(crate) mod offset {
    pub(crate) const SRC_PORT: usize = 0;
    pub(crate) const DST_PORT: usize = 2;
    pub(crate) const LENGTH: usize = 4;
    pub(crate) const CHECKSUM: usize = 6;
}

/// The source and destination ports, the first 4 bytes of a UDP or TCP
/// header alike (all an ICMP error's quote must hold of either).
pub(crate) const PORTS_LEN: usize = 4;

/// What an accessor reads when the buffer is shorter than the header.
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of a UDP datagram in `T`: header and everything after it.
///
/// The length field is not checked against the buffer: in a first IP
/// fragment it covers the whole datagram, which this packet only begins.
#[derive(Copy, Clone, Debug)]
pub(crate) struct UdpDatagram<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks that the 8-byte header is there.
    #[inline(always)]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    #[inline(always)]
    pub(crate) fn src_port(&self) -> u16 {
        get_u16::<{ offset::SRC_PORT }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn dst_port(&self) -> u16 {
        get_u16::<{ offset::DST_PORT }, HEADER_LEN>(self.header())
    }

    /// The length field: header and payload.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u16 {
        get_u16::<{ offset::LENGTH }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn checksum(&self) -> u16 {
        get_u16::<{ offset::CHECKSUM }, HEADER_LEN>(self.header())
    }

    /// Everything after the header in the buffer.
    #[cfg(test)]
    pub(crate) fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// The sum the checksum covers over IPv6 (RFC 8200 §8.1): the
    /// pseudo-header and the whole buffer, whose length is the datagram's.
    fn sum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> u16 {
        let d = self.buffer.as_ref();
        checksum::combine(&[
            checksum::pseudo_header_v6(src, dst, UDP, d.len() as u32),
            checksum::ones_complement_sum(d),
        ])
    }

    /// The same over IPv4 (RFC 768).
    #[cfg(test)]
    fn sum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
        let d = self.buffer.as_ref();
        checksum::combine(&[
            checksum::pseudo_header_v4(src, dst, UDP, d.len() as u16),
            checksum::ones_complement_sum(d),
        ])
    }

    /// Whether the checksum is right (0, "none", counts as right over
    /// IPv4 only).
    #[cfg(test)]
    pub(crate) fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || self.sum_v4(src, dst) == 0xffff
    }

    #[cfg(test)]
    pub(crate) fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.sum_v6(src, dst) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpDatagram<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    pub(crate) fn set_src_port(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::SRC_PORT }, HEADER_LEN>(h, v);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_dst_port(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::DST_PORT }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_len(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::LENGTH }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_checksum(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::CHECKSUM }, HEADER_LEN>(h, v);
        }
    }

    /// Computes and writes the checksum over IPv6 from `src` to `dst`
    /// (the buffer is the whole datagram). A computed 0 is sent as 0xffff,
    /// since 0 means "no checksum" (RFC 768), which IPv6 forbids except on
    /// tunnels configured for it (RFC 6935).
    pub(crate) fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = !self.sum_v6(src, dst);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The same over IPv4.
    #[cfg(test)]
    pub(crate) fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = !self.sum_v4(src, dst);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

/// A UDP header to emit. The checksum is written as given: 0 ("none") is
/// what tunnels over IPv4 use (RFC 768; RFC 6935 discusses IPv6).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdpRepr {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    /// Bytes after the UDP header.
    pub(crate) payload_len: usize,
    pub(crate) checksum: u16,
}

impl UdpRepr {
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let len = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        put::<{ offset::SRC_PORT }, 2, HEADER_LEN>(hdr, self.src_port.to_be_bytes());
        put::<{ offset::DST_PORT }, 2, HEADER_LEN>(hdr, self.dst_port.to_be_bytes());
        put::<{ offset::LENGTH }, 2, HEADER_LEN>(hdr, len.to_be_bytes());
        put::<{ offset::CHECKSUM }, 2, HEADER_LEN>(hdr, self.checksum.to_be_bytes());
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
