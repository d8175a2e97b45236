//! Generic UDP Encapsulation header, variant 0 (draft-ietf-intarea-gue §3.1):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Ver|C|   Hlen  |  Proto/ctype  |             Flags             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::put;
#[cfg(test)]
use super::Error;

pub(crate) const HEADER_LEN: usize = 4;

/// A variant-0 data message header without extension fields.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct GueRepr {
    /// The IP protocol of the payload: 4 (IPv4) or 41 (IPv6).
    pub(crate) protocol: u8,
}

impl GueRepr {
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) {
        // Ver 0, C 0 (data), Hlen 0 (no extension words).
        hdr[0] = 0;
        hdr[1] = self.protocol;
        put::<2, 2, HEADER_LEN>(hdr, [0, 0]);
    }

    /// Reads a variant-0 data header without extensions.
    #[cfg(test)]
    pub(crate) fn parse(buf: &[u8]) -> Result<Self, Error> {
        let h = buf.first_chunk::<HEADER_LEN>().ok_or(Error::Truncated)?;
        if h[0] != 0 {
            return Err(Error::Malformed);
        }
        Ok(Self { protocol: h[1] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_parse() {
        let mut h = [0xff; HEADER_LEN];
        GueRepr { protocol: 41 }.emit(&mut h);
        assert_eq!(h, [0, 41, 0, 0]);
        assert_eq!(GueRepr::parse(&h), Ok(GueRepr { protocol: 41 }));
        assert_eq!(GueRepr::parse(&[0x40, 4, 0, 0]), Err(Error::Malformed));
        assert_eq!(GueRepr::parse(&[0, 4, 0]), Err(Error::Truncated));
    }
}
