//! IPv6 fixed header (RFC 8200 §3). Extension headers: [`super::ipv6_ext`].

use std::net::Ipv6Addr;

use super::{field, Error};

pub const HEADER_LEN: usize = 40;

/// A validated IPv6 packet; `payload` stops at the payload length (the
/// buffer may carry Ethernet padding after it).
#[derive(Copy, Clone, Debug)]
pub struct Ipv6Packet<'a> {
    hdr: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> Ipv6Packet<'a> {
    /// Checks version 6 and that the payload length fits the buffer.
    /// Jumbograms (payload length 0 with a Jumbo option) are not supported:
    /// they read as an empty payload and fail the extension-header walk.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let (hdr, rest) = buf
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        if hdr[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        let len = usize::from(u16::from_be_bytes([hdr[4], hdr[5]]));
        let payload = rest.get(..len).ok_or(Error::Truncated)?;
        Ok(Self { hdr, payload })
    }

    pub fn traffic_class(&self) -> u8 {
        (self.hdr[0] << 4) | (self.hdr[1] >> 4)
    }

    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes([0, self.hdr[1] & 0x0f, self.hdr[2], self.hdr[3]])
    }

    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.hdr[4], self.hdr[5]])
    }

    /// The first next-header value (an extension header or the upper layer).
    pub fn next_header(&self) -> u8 {
        self.hdr[6]
    }

    pub fn hop_limit(&self) -> u8 {
        self.hdr[7]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field::<8, 16, HEADER_LEN>(self.hdr))
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(field::<24, 16, HEADER_LEN>(self.hdr))
    }

    /// Extension headers and upper-layer data.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Header plus payload.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
