//! GENEVE (RFC 8926 §3.4): the base header and an emitter for a header
//! without options; the tests read emitted headers back through a
//! two-way view.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Ver|  Opt Len  |O|C|    Rsvd.  |          Protocol Type        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        Virtual Network Identifier (VNI)       |    Reserved   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Variable-Length Options                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::put;
#[cfg(test)]
use super::{get_u16, get_u32, get_u8, set_u16, set_u8, Error};

/// The base header, without options.
pub(crate) const HEADER_LEN: usize = 8;

/// Where each field of the base header starts.
pub(crate) mod offset {
    /// Version (2 bits) and option length in 4-byte words (6 bits).
    pub(crate) const VER_OPT_LEN: usize = 0;
    /// O (control), C (critical options) and 6 reserved bits.
    #[cfg(test)]
    pub(crate) const FLAGS: usize = 1;
    pub(crate) const PROTOCOL_TYPE: usize = 2;
    /// The VNI (24 bits) and a reserved byte, one 32-bit word.
    pub(crate) const VNI_RESERVED: usize = 4;
}

/// O: a control message, not data.
#[cfg(test)]
pub(crate) const FLAG_CONTROL: u8 = 0x80;
/// C: options the receiver must understand follow.
#[cfg(test)]
pub(crate) const FLAG_CRITICAL: u8 = 0x40;
/// The VNI's 24 bits.
pub(crate) const VNI_MASK: u32 = 0x00ff_ffff;

/// What an accessor reads when the buffer is shorter than the header.
#[cfg(test)]
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of a GENEVE packet in `T`: base header, options, payload.
#[cfg(test)]
#[derive(Copy, Clone, Debug)]
pub(crate) struct GenevePacket<T> {
    buffer: T,
}

#[cfg(test)]
impl<T: AsRef<[u8]>> GenevePacket<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks version 0 and that the base header and the options it
    /// announces are present.
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.version() != 0 {
            return Err(Error::Malformed);
        }
        if p.header_len() > p.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    pub(crate) fn version(&self) -> u8 {
        get_u8::<{ offset::VER_OPT_LEN }, HEADER_LEN>(self.header()) >> 6
    }

    /// Bytes of the options after the base header.
    pub(crate) fn options_len(&self) -> usize {
        usize::from(get_u8::<{ offset::VER_OPT_LEN }, HEADER_LEN>(self.header()) & 0x3f) * 4
    }

    /// Base header and options.
    pub(crate) fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len()
    }

    /// The flag byte: [`FLAG_CONTROL`], [`FLAG_CRITICAL`], 6 reserved bits.
    pub(crate) fn flags(&self) -> u8 {
        get_u8::<{ offset::FLAGS }, HEADER_LEN>(self.header())
    }

    /// The payload's ethertype.
    pub(crate) fn protocol_type(&self) -> u16 {
        get_u16::<{ offset::PROTOCOL_TYPE }, HEADER_LEN>(self.header())
    }

    pub(crate) fn vni(&self) -> u32 {
        get_u32::<{ offset::VNI_RESERVED }, HEADER_LEN>(self.header()) >> 8
    }

    /// The byte after the VNI.
    pub(crate) fn reserved(&self) -> u8 {
        get_u8::<{ offset::VNI_RESERVED + 3 }, HEADER_LEN>(self.header())
    }

    /// Everything after the header and its options.
    pub(crate) fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

#[cfg(test)]
impl<T: AsRef<[u8]> + AsMut<[u8]>> GenevePacket<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    pub(crate) fn set_protocol_type(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::PROTOCOL_TYPE }, HEADER_LEN>(h, v);
        }
    }

    /// Sets the VNI (24 bits; higher bits are dropped), keeping the
    /// reserved byte.
    pub(crate) fn set_vni(&mut self, vni: u32) {
        let reserved = self.reserved();
        if let Some(h) = self.header_mut() {
            let [_, v0, v1, v2] = (vni & VNI_MASK).to_be_bytes();
            put::<{ offset::VNI_RESERVED }, 4, HEADER_LEN>(h, [v0, v1, v2, reserved]);
        }
    }

    pub(crate) fn set_flags(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::FLAGS }, HEADER_LEN>(h, v);
        }
    }
}

/// A data message's base header without options: version 0, O and C
/// clear, reserved fields zero.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct GeneveRepr {
    /// The payload's ethertype.
    pub(crate) protocol_type: u16,
    /// 24 bits; higher bits are dropped.
    pub(crate) vni: u32,
}

impl GeneveRepr {
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) {
        let [_, v0, v1, v2] = (self.vni & VNI_MASK).to_be_bytes();
        put::<{ offset::VER_OPT_LEN }, 2, HEADER_LEN>(hdr, [0, 0]);
        put::<{ offset::PROTOCOL_TYPE }, 2, HEADER_LEN>(hdr, self.protocol_type.to_be_bytes());
        put::<{ offset::VNI_RESERVED }, 4, HEADER_LEN>(hdr, [v0, v1, v2, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_view_round_trip() {
        let mut h = [0xffu8; HEADER_LEN];
        GeneveRepr {
            protocol_type: 0x86dd,
            vni: 0xab12_3456,
        }
        .emit(&mut h);
        assert_eq!(h, [0, 0, 0x86, 0xdd, 0x12, 0x34, 0x56, 0]);
        let g = GenevePacket::new_checked(&h).unwrap();
        assert_eq!(
            (g.version(), g.header_len(), g.flags(), g.protocol_type()),
            (0, HEADER_LEN, 0, 0x86dd)
        );
        assert_eq!((g.vni(), g.reserved()), (0x12_3456, 0));
        assert!(g.payload().is_empty());
    }

    #[test]
    fn setters_write_their_fields_only() {
        let mut h = [0u8, 0, 0, 0, 0, 0, 0, 0x77, 9];
        let mut g = GenevePacket::new_unchecked(&mut h);
        g.set_protocol_type(0x0800);
        g.set_vni(0x0102_0304);
        g.set_flags(FLAG_CONTROL | FLAG_CRITICAL);
        assert_eq!(h, [0, 0xc0, 0x08, 0x00, 0x02, 0x03, 0x04, 0x77, 9]);
        assert_eq!(GenevePacket::new_unchecked(&h).payload(), &[9]);
    }

    #[test]
    fn options_version_and_truncation_are_checked() {
        // Opt Len 1: four bytes of options, then the payload.
        let p = [0x01, 0, 0x08, 0, 0, 0, 1, 0, 1, 2, 3, 4, 0x45];
        let g = GenevePacket::new_checked(&p[..]).unwrap();
        assert_eq!((g.options_len(), g.payload()), (4, &[0x45][..]));
        assert_eq!(
            GenevePacket::new_checked(&p[..11]).err(),
            Some(Error::Truncated)
        );
        let mut v1 = p;
        v1[0] |= 0x40;
        assert_eq!(
            GenevePacket::new_checked(&v1[..]).err(),
            Some(Error::Malformed)
        );
        for cut in 0..HEADER_LEN {
            assert_eq!(
                GenevePacket::new_checked(&p[..cut]).err(),
                Some(Error::Truncated)
            );
        }
    }
}
