//! IPv6 fixed header (RFC 8200 §3): a two-way view and an emitter.
//! Extension headers: [`super::ipv6_ext`].

use std::net::Ipv6Addr;

use super::{field, get_u16, get_u8, set_u16, set_u8, Error};
#[cfg(test)]
use super::{get_u32, put, set_u32};

pub(crate) const HEADER_LEN: usize = 40;

/// Where each field of the fixed header starts.
pub(crate) mod offset {
    /// Version (4 bits), traffic class (8), flow label (20): one 32-bit word.
    pub(crate) const VERSION_TC_FLOW: usize = 0;
    pub(crate) const PAYLOAD_LEN: usize = 4;
    pub(crate) const NEXT_HEADER: usize = 6;
    #[cfg(test)]
    pub(crate) const HOP_LIMIT: usize = 7;
    pub(crate) const SRC_ADDR: usize = 8;
    pub(crate) const DST_ADDR: usize = 24;
}

const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// What an accessor reads when the buffer is shorter than the header
/// (only a view made by [`Ipv6Packet::new_unchecked`] can be).
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of an IPv6 packet in `T`; `payload` stops at the payload length
/// (the buffer may carry Ethernet padding after it).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks version 6 and that the payload length fits the buffer.
    /// Jumbograms (payload length 0 with a Jumbo option) are not supported:
    /// they read as an empty payload and fail the extension-header walk.
    #[inline]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks only version 6 and the 40 bytes of the fixed header: for a
    /// packet quoted by an ICMPv6 error, cut short of its payload length.
    #[inline]
    pub(crate) fn new_checked_header(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        Ok(p)
    }

    /// What [`Ipv6Packet::new_checked_header`] checks.
    #[inline]
    pub(crate) fn check_header(&self) -> Result<(), Error> {
        let hdr = self
            .buffer
            .as_ref()
            .first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        if get_u8::<{ offset::VERSION_TC_FLOW }, HEADER_LEN>(hdr) >> 4 != 6 {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// What [`Ipv6Packet::new_checked`] checks.
    #[inline]
    pub(crate) fn check_len(&self) -> Result<(), Error> {
        self.check_header()?;
        if HEADER_LEN + usize::from(self.payload_len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    #[cfg(test)]
    fn first_word(&self) -> u32 {
        get_u32::<{ offset::VERSION_TC_FLOW }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }

    #[cfg(test)]
    pub(crate) fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    #[cfg(test)]
    pub(crate) fn flow_label(&self) -> u32 {
        self.first_word() & FLOW_LABEL_MASK
    }

    #[inline(always)]
    pub(crate) fn payload_len(&self) -> u16 {
        get_u16::<{ offset::PAYLOAD_LEN }, HEADER_LEN>(self.header())
    }

    /// The first next-header value (an extension header or the upper layer).
    #[inline(always)]
    pub(crate) fn next_header(&self) -> u8 {
        get_u8::<{ offset::NEXT_HEADER }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn hop_limit(&self) -> u8 {
        get_u8::<{ offset::HOP_LIMIT }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field::<{ offset::SRC_ADDR }, 16, HEADER_LEN>(self.header()))
    }

    #[inline(always)]
    pub(crate) fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field::<{ offset::DST_ADDR }, 16, HEADER_LEN>(self.header()))
    }

    /// The source then the destination address, as they lie side by side
    /// at the end of the fixed header.
    #[inline(always)]
    pub(crate) fn address_bytes(&self) -> [u8; 32] {
        field::<{ offset::SRC_ADDR }, 32, HEADER_LEN>(self.header())
    }

    /// Extension headers and upper-layer data, up to the payload length
    /// (empty when the buffer ends before it, as a quoted packet's does).
    #[inline(always)]
    pub(crate) fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        self.buffer.as_ref().get(HEADER_LEN..end).unwrap_or(&[])
    }

    /// Header plus payload.
    #[inline(always)]
    pub(crate) fn total_len(&self) -> usize {
        HEADER_LEN + self.payload().len()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    #[cfg(test)]
    fn set_first_word(&mut self, w: u32) {
        if let Some(h) = self.header_mut() {
            set_u32::<{ offset::VERSION_TC_FLOW }, HEADER_LEN>(h, w);
        }
    }

    /// Sets the version nibble (6 for a valid header).
    #[cfg(test)]
    pub(crate) fn set_version(&mut self, v: u8) {
        let w = self.first_word() & 0x0fff_ffff;
        self.set_first_word(w | (u32::from(v & 0x0f) << 28));
    }

    #[cfg(test)]
    pub(crate) fn set_traffic_class(&mut self, tc: u8) {
        let w = self.first_word() & 0xf00f_ffff;
        self.set_first_word(w | (u32::from(tc) << 20));
    }

    /// Sets the 20-bit flow label (higher bits of `label` are ignored).
    #[cfg(test)]
    pub(crate) fn set_flow_label(&mut self, label: u32) {
        let w = self.first_word() & !FLOW_LABEL_MASK;
        self.set_first_word(w | (label & FLOW_LABEL_MASK));
    }

    pub(crate) fn set_payload_len(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::PAYLOAD_LEN }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_next_header(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::NEXT_HEADER }, HEADER_LEN>(h, v);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_hop_limit(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::HOP_LIMIT }, HEADER_LEN>(h, v);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_src_addr(&mut self, a: Ipv6Addr) {
        if let Some(h) = self.header_mut() {
            put::<{ offset::SRC_ADDR }, 16, HEADER_LEN>(h, a.octets());
        }
    }

    #[cfg(test)]
    pub(crate) fn set_dst_addr(&mut self, a: Ipv6Addr) {
        if let Some(h) = self.header_mut() {
            put::<{ offset::DST_ADDR }, 16, HEADER_LEN>(h, a.octets());
        }
    }
}

/// An extension-header-less IPv6 header to emit (outer tunnel headers).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ipv6Repr {
    pub(crate) src: Ipv6Addr,
    pub(crate) dst: Ipv6Addr,
    pub(crate) next_header: u8,
    pub(crate) hop_limit: u8,
    /// 20 bits; tunnels set it from the inner flow (RFC 6438) so that ECMP
    /// and RSS on the way to the backend spread flows without parsing
    /// past the outer header.
    pub(crate) flow_label: u32,
    /// Bytes after the header.
    pub(crate) payload_len: usize,
}

impl Ipv6Repr {
    /// Writes the header; `Malformed` if the payload length does not fit
    /// the 16-bit field (jumbograms are not emitted).
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Malformed)?;
        let fl = (self.flow_label & FLOW_LABEL_MASK).to_be_bytes();
        let l = len.to_be_bytes();
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&[
            0x60,
            fl[1],
            fl[2],
            fl[3],
            l[0],
            l[1],
            self.next_header,
            self.hop_limit,
        ]);
        h[8..24].copy_from_slice(&self.src.octets());
        h[24..].copy_from_slice(&self.dst.octets());
        *hdr = h;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_round_trips() {
        let r = Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::5".parse().unwrap(),
            next_header: 47,
            hop_limit: 64,
            flow_label: 0xfff_abcde,
            payload_len: 100,
        };
        let mut h = [0u8; HEADER_LEN];
        r.emit(&mut h).unwrap();
        let mut buf = h.to_vec();
        buf.extend_from_slice(&[0; 100]);
        let v = Ipv6Packet::new_checked(&buf).unwrap();
        assert_eq!((v.flow_label(), v.traffic_class()), (0xabcde, 0));
        assert_eq!(
            (v.next_header(), v.hop_limit(), v.payload_len()),
            (47, 64, 100)
        );
        assert_eq!((v.src_addr(), v.dst_addr()), (r.src, r.dst));
        let too_big = Ipv6Repr {
            payload_len: 65_536,
            ..r
        };
        assert_eq!(too_big.emit(&mut h), Err(Error::Malformed));
    }

    fn packet(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x6a, 0xbc, 0xde, 0xf0];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[17, 63]);
        p.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn accessors() {
        let mut p = packet(&[1, 2, 3]);
        p.push(0xee); // padding beyond the payload length
        let v = Ipv6Packet::new_checked(&p).unwrap();
        assert_eq!(v.traffic_class(), 0xab);
        assert_eq!(v.flow_label(), 0xcdef0);
        assert_eq!(
            (v.next_header(), v.hop_limit(), v.payload_len()),
            (17, 63, 3)
        );
        assert_eq!(v.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(v.payload(), &[1, 2, 3]);
        assert_eq!(v.total_len(), 43);
    }

    #[test]
    fn truncation_at_every_boundary() {
        let p = packet(&[1, 2, 3, 4]);
        for cut in 0..p.len() {
            assert_eq!(
                Ipv6Packet::new_checked(&p[..cut]).err(),
                Some(Error::Truncated),
                "{cut}"
            );
        }
    }

    #[test]
    fn bad_version() {
        let mut p = packet(&[]);
        p[0] = 0x4a;
        assert_eq!(Ipv6Packet::new_checked(&p).err(), Some(Error::Malformed));
    }
}
