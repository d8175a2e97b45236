//! VXLAN (RFC 7348 §5): the 8-byte header, a two-way view and an emitter.
//! An Ethernet frame follows the header.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |R|R|R|R|I|R|R|R|            Reserved                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::put;
#[cfg(test)]
use super::{get_u32, get_u8, Error};

pub(crate) const HEADER_LEN: usize = 8;

/// Where each field starts.
pub(crate) mod offset {
    /// The flag byte: I (a valid VNI) and seven reserved bits.
    pub(crate) const FLAGS: usize = 0;
    /// Three reserved bytes after the flags, one 32-bit word with them.
    #[cfg(test)]
    pub(crate) const FLAGS_RESERVED: usize = 0;
    /// The VNI (24 bits) and a reserved byte, one 32-bit word.
    pub(crate) const VNI_RESERVED: usize = 4;
}

/// I: the VNI is valid; RFC 7348 sets it on every packet.
pub(crate) const FLAG_VNI: u8 = 0x08;
/// The VNI's 24 bits.
pub(crate) const VNI_MASK: u32 = 0x00ff_ffff;

/// What an accessor reads when the buffer is shorter than the header.
#[cfg(test)]
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of a VXLAN packet in `T`: header, then the inner frame (read
/// back by the tests: nothing on the appliance decapsulates VXLAN).
#[cfg(test)]
#[derive(Copy, Clone, Debug)]
pub(crate) struct VxlanPacket<T> {
    buffer: T,
}

#[cfg(test)]
impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// A view without any check: accessors read zeros if `buffer` is
    /// shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks the header is present and its I flag set (RFC 7348 §5: a
    /// receiver may drop a packet without it).
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.flags() & FLAG_VNI == 0 {
            return Err(Error::Malformed);
        }
        Ok(p)
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    pub(crate) fn flags(&self) -> u8 {
        get_u8::<{ offset::FLAGS }, HEADER_LEN>(self.header())
    }

    /// The 24 reserved bits after the flags.
    pub(crate) fn reserved_after_flags(&self) -> u32 {
        get_u32::<{ offset::FLAGS_RESERVED }, HEADER_LEN>(self.header()) & 0x00ff_ffff
    }

    pub(crate) fn vni(&self) -> u32 {
        get_u32::<{ offset::VNI_RESERVED }, HEADER_LEN>(self.header()) >> 8
    }

    /// The byte after the VNI.
    pub(crate) fn reserved(&self) -> u8 {
        get_u8::<{ offset::VNI_RESERVED + 3 }, HEADER_LEN>(self.header())
    }

    /// The inner Ethernet frame.
    pub(crate) fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }
}

/// A header with the I flag set, reserved fields zero.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct VxlanRepr {
    /// 24 bits; higher bits are dropped.
    pub vni: u32,
}

impl VxlanRepr {
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) {
        let [_, v0, v1, v2] = (self.vni & VNI_MASK).to_be_bytes();
        put::<{ offset::FLAGS }, 4, HEADER_LEN>(hdr, [FLAG_VNI, 0, 0, 0]);
        put::<{ offset::VNI_RESERVED }, 4, HEADER_LEN>(hdr, [v0, v1, v2, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7348 §5 bit by bit: only I in the flag byte, 24 reserved bits,
    /// the VNI's 24 bits, a reserved byte.
    #[test]
    fn emit_and_view_round_trip() {
        let mut h = [0xffu8; HEADER_LEN];
        VxlanRepr { vni: 0xab12_3456 }.emit(&mut h);
        assert_eq!(h, [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        let v = VxlanPacket::new_checked(&h).unwrap();
        assert_eq!(
            (v.flags(), v.reserved_after_flags(), v.vni(), v.reserved()),
            (FLAG_VNI, 0, 0x12_3456, 0)
        );
        assert!(v.payload().is_empty());
    }

    #[test]
    fn missing_flag_and_truncation_are_refused() {
        let p = [0x08, 0, 0, 0, 0, 0, 42, 0, 0xaa];
        assert_eq!(VxlanPacket::new_checked(&p[..]).unwrap().payload(), &[0xaa]);
        let mut no_i = p;
        no_i[0] = 0;
        assert_eq!(
            VxlanPacket::new_checked(&no_i[..]).err(),
            Some(Error::Malformed)
        );
        for cut in 0..HEADER_LEN {
            assert_eq!(
                VxlanPacket::new_checked(&p[..cut]).err(),
                Some(Error::Truncated)
            );
        }
    }
}
