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

/// An extension-header-less IPv6 header to emit (outer tunnel headers).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub hop_limit: u8,
    /// 20 bits; tunnels set it from the inner flow (RFC 6438) so that ECMP
    /// and RSS on the way to the backend spread flows without parsing
    /// past the outer header.
    pub flow_label: u32,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Writes the header; `Malformed` if the payload length does not fit
    /// the 16-bit field (jumbograms are not emitted).
    pub fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Malformed)?;
        let fl = (self.flow_label & 0x000f_ffff).to_be_bytes();
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
