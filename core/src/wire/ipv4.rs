//! IPv4 (RFC 791): header with options, fragmentation fields, emitter.

use std::net::Ipv4Addr;

use super::{checksum, field, Error};

pub const HEADER_LEN: usize = 20;
/// Largest IHL (15 words).
pub const MAX_HEADER_LEN: usize = 60;

const FLAG_DF: u8 = 0x40;
const FLAG_MF: u8 = 0x20;

/// A validated IPv4 packet. The buffer may be longer than the packet
/// (Ethernet padding); `payload` stops at the total length.
#[derive(Copy, Clone, Debug)]
pub struct Ipv4Packet<'a> {
    hdr: &'a [u8; HEADER_LEN],
    options: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Ipv4Packet<'a> {
    /// Checks version 4, IHL ≥ 5, IHL ≤ total length ≤ buffer length.
    /// The header checksum is not verified: NICs do that, and a forwarder
    /// that passes the packet on untouched must not be stricter than one.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let hdr = buf.first_chunk::<HEADER_LEN>().ok_or(Error::Truncated)?;
        if hdr[0] >> 4 != 4 {
            return Err(Error::Malformed);
        }
        let ihl = usize::from(hdr[0] & 0x0f) * 4;
        if ihl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
        if total < ihl {
            return Err(Error::Malformed);
        }
        let packet = buf.get(..total).ok_or(Error::Truncated)?;
        let options = packet.get(HEADER_LEN..ihl).ok_or(Error::Truncated)?;
        let payload = packet.get(ihl..).ok_or(Error::Truncated)?;
        Ok(Self {
            hdr,
            options,
            payload,
        })
    }

    pub fn header_len(&self) -> usize {
        usize::from(self.hdr[0] & 0x0f) * 4
    }

    pub fn dscp_ecn(&self) -> u8 {
        self.hdr[1]
    }

    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes([self.hdr[2], self.hdr[3]])
    }

    pub fn ident(&self) -> u16 {
        u16::from_be_bytes([self.hdr[4], self.hdr[5]])
    }

    pub fn dont_frag(&self) -> bool {
        self.hdr[6] & FLAG_DF != 0
    }

    pub fn more_frags(&self) -> bool {
        self.hdr[6] & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16::from_be_bytes([self.hdr[6] & 0x1f, self.hdr[7]])
    }

    /// HA-2: MF set or a non-zero offset, so the first fragment counts.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.hdr[8]
    }

    pub fn protocol(&self) -> u8 {
        self.hdr[9]
    }

    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.hdr[10], self.hdr[11]])
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field::<12, 4, HEADER_LEN>(self.hdr))
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(field::<16, 4, HEADER_LEN>(self.hdr))
    }

    pub fn options(&self) -> &'a [u8] {
        self.options
    }

    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Whether the header checksum (options included) is correct.
    pub fn verify_checksum(&self) -> bool {
        // The fixed header is an even length, so the two partial sums add.
        let s = u32::from(checksum::ones_complement_sum(self.hdr.as_slice()))
            + u32::from(checksum::ones_complement_sum(self.options));
        ((s & 0xffff) + (s >> 16)) as u16 == 0xffff
    }
}

/// An option-less IPv4 header to emit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Writes the header with its checksum; `Malformed` if the total length
    /// does not fit the 16-bit field.
    ///
    /// The checksum is summed from the field values, not read back from the
    /// buffer: the header usually lands in a headroom cache line that is still
    /// being fetched, and reading back bytes just stored one at a time would
    /// stall on store forwarding. The header is then written with one copy.
    pub fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let total = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        let flags = if self.dont_frag { FLAG_DF } else { 0 };
        let src = self.src.octets();
        let dst = self.dst.octets();
        let word = |a: u8, b: u8| u32::from(u16::from_be_bytes([a, b]));
        let mut sum = 0x4500
            + u32::from(total)
            + u32::from(self.ident)
            + word(flags, 0)
            + word(self.ttl, self.protocol)
            + word(src[0], src[1])
            + word(src[2], src[3])
            + word(dst[0], dst[1])
            + word(dst[2], dst[3]);
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        let c = (!(sum as u16)).to_be_bytes();
        let t = total.to_be_bytes();
        let id = self.ident.to_be_bytes();
        *hdr = [
            0x45,
            0,
            t[0],
            t[1],
            id[0],
            id[1],
            flags,
            0,
            self.ttl,
            self.protocol,
            c[0],
            c[1],
            src[0],
            src[1],
            src[2],
            src[3],
            dst[0],
            dst[1],
            dst[2],
            dst[3],
        ];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with `opt_words` words of NOP options and `payload` bytes.
    fn packet(opt_words: u8, flags_frag: u16, payload: &[u8]) -> Vec<u8> {
        let ihl = 5 + opt_words;
        let total = usize::from(ihl) * 4 + payload.len();
        let mut p = vec![0x40 | ihl, 0];
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0x12, 0x34]);
        p.extend_from_slice(&flags_frag.to_be_bytes());
        p.extend_from_slice(&[64, 17, 0, 0, 10, 0, 0, 1, 192, 0, 2, 7]);
        p.extend(std::iter::repeat_n(1u8, usize::from(opt_words) * 4));
        let c = checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn accessors() {
        let p = packet(0, 0x4000, &[1, 2, 3]);
        let v = Ipv4Packet::new_checked(&p).unwrap();
        assert_eq!(v.header_len(), 20);
        assert_eq!(v.total_len(), 23);
        assert_eq!(v.ident(), 0x1234);
        assert!(v.dont_frag() && !v.more_frags() && !v.is_fragment());
        assert_eq!((v.ttl(), v.protocol()), (64, 17));
        assert_eq!(v.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(v.dst_addr(), Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!(v.payload(), &[1, 2, 3]);
        assert!(v.verify_checksum());
    }

    #[test]
    fn options_are_skipped_and_checksummed() {
        let p = packet(2, 0, &[9]);
        let v = Ipv4Packet::new_checked(&p).unwrap();
        assert_eq!(v.header_len(), 28);
        assert_eq!(v.options(), &[1; 8]);
        assert_eq!(v.payload(), &[9]);
        assert!(v.verify_checksum());
        let mut bad = p.clone();
        bad[21] ^= 0xff;
        assert!(!Ipv4Packet::new_checked(&bad).unwrap().verify_checksum());
    }

    /// HA-2: MF set, or a non-zero offset, makes a fragment (first included).
    #[test]
    fn ha_2_fragment_fields() {
        let first = packet(0, 0x2000, &[]);
        let v = Ipv4Packet::new_checked(&first).unwrap();
        assert!(v.more_frags() && v.frag_offset() == 0 && v.is_fragment());
        let last = packet(0, 0x00b9, &[]);
        let v = Ipv4Packet::new_checked(&last).unwrap();
        assert!(!v.more_frags() && v.frag_offset() == 0xb9 && v.is_fragment());
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut p = packet(0, 0, &[7]);
        p.extend_from_slice(&[0; 10]);
        assert_eq!(Ipv4Packet::new_checked(&p).unwrap().payload(), &[7]);
    }

    #[test]
    fn truncation_at_every_boundary() {
        let p = packet(1, 0, &[1, 2, 3, 4]);
        for cut in 0..p.len() {
            assert_eq!(
                Ipv4Packet::new_checked(&p[..cut]).err(),
                Some(Error::Truncated),
                "{cut}"
            );
        }
    }

    #[test]
    fn bad_version_ihl_and_total_length() {
        let good = packet(0, 0, &[0; 8]);
        let mut v6 = good.clone();
        v6[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&v6).err(), Some(Error::Malformed));
        for ihl in 0..5u8 {
            let mut p = good.clone();
            p[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::new_checked(&p).err(),
                Some(Error::Malformed),
                "ihl {ihl}"
            );
        }
        // IHL beyond the total length.
        let mut p = good.clone();
        p[0] = 0x4f;
        assert_eq!(Ipv4Packet::new_checked(&p).err(), Some(Error::Malformed));
        // Total length smaller than the header.
        let mut p = good.clone();
        p[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(Ipv4Packet::new_checked(&p).err(), Some(Error::Malformed));
        // Total length beyond the frame.
        let mut p = good;
        p[2..4].copy_from_slice(&29u16.to_be_bytes());
        assert_eq!(Ipv4Packet::new_checked(&p).err(), Some(Error::Truncated));
    }

    #[test]
    fn emit_round_trips_with_valid_checksum() {
        let repr = Ipv4Repr {
            src: Ipv4Addr::new(10, 1, 2, 3),
            dst: Ipv4Addr::new(10, 9, 8, 7),
            protocol: 47,
            ttl: 64,
            ident: 0,
            dont_frag: true,
            payload_len: 0,
        };
        let mut h = [0u8; HEADER_LEN];
        repr.emit(&mut h).unwrap();
        let v = Ipv4Packet::new_checked(&h).unwrap();
        assert!(v.verify_checksum());
        assert_eq!((v.src_addr(), v.dst_addr()), (repr.src, repr.dst));
        assert_eq!((v.protocol(), v.ttl(), v.dont_frag()), (47, 64, true));
        let too_big = Ipv4Repr {
            payload_len: 65_516,
            ..repr
        };
        assert_eq!(too_big.emit(&mut h), Err(Error::Malformed));
    }
}
