//! GRE (RFC 2784/2890): the basic 4-byte header the encapsulator emits;
//! the tests read it back through a view that understands the optional
//! checksum, key and sequence fields.

use super::put;
#[cfg(test)]
use super::Error;

pub(crate) const HEADER_LEN: usize = 4;

#[cfg(test)]
const FLAG_C: u8 = 0x80;
#[cfg(test)]
const FLAG_K: u8 = 0x20;
#[cfg(test)]
const FLAG_S: u8 = 0x10;

/// A GRE header view.
#[cfg(test)]
#[derive(Copy, Clone, Debug)]
pub(crate) struct GrePacket<'a> {
    hdr: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

#[cfg(test)]
impl<'a> GrePacket<'a> {
    /// Accepts version 0 only (version 1 is PPTP's enhanced GRE).
    pub(crate) fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let hdr = buf.first_chunk::<HEADER_LEN>().ok_or(Error::Truncated)?;
        if hdr[1] & 0x07 != 0 {
            return Err(Error::Malformed);
        }
        let optional = [FLAG_C, FLAG_K, FLAG_S]
            .iter()
            .filter(|f| hdr[0] & **f != 0)
            .count();
        let payload = buf
            .get(HEADER_LEN + 4 * optional..)
            .ok_or(Error::Truncated)?;
        Ok(Self { hdr, payload })
    }

    pub(crate) fn flags(&self) -> u8 {
        self.hdr[0]
    }

    pub(crate) fn version(&self) -> u8 {
        self.hdr[1] & 0x07
    }

    /// The payload's ethertype.
    pub(crate) fn protocol_type(&self) -> u16 {
        u16::from_be_bytes([self.hdr[2], self.hdr[3]])
    }

    pub(crate) fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// A basic GRE header: no checksum, key or sequence number, version 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct GreRepr {
    pub(crate) protocol_type: u16,
}

impl GreRepr {
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) {
        put::<0, 2, HEADER_LEN>(hdr, [0, 0]);
        put::<2, 2, HEADER_LEN>(hdr, self.protocol_type.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_parse_basic_header() {
        let mut h = [0xffu8; HEADER_LEN];
        GreRepr {
            protocol_type: 0x86dd,
        }
        .emit(&mut h);
        assert_eq!(h, [0, 0, 0x86, 0xdd]);
        let g = GrePacket::new_checked(&h).unwrap();
        assert_eq!((g.flags(), g.version(), g.protocol_type()), (0, 0, 0x86dd));
        assert!(g.payload().is_empty());
    }

    #[test]
    fn optional_fields_are_skipped_and_bounds_checked() {
        let mut p = vec![FLAG_C | FLAG_K, 0, 0x08, 0x00, 0, 0, 0, 0, 0, 0, 0, 7, 0x45];
        assert_eq!(GrePacket::new_checked(&p).unwrap().payload(), &[0x45]);
        p.truncate(11);
        assert_eq!(GrePacket::new_checked(&p).err(), Some(Error::Truncated));
        assert_eq!(
            GrePacket::new_checked(&[0, 1, 8, 0]).err(),
            Some(Error::Malformed)
        );
        assert_eq!(
            GrePacket::new_checked(&[0, 0, 8]).err(),
            Some(Error::Truncated)
        );
    }
}
