//! IPv4 (RFC 791): a two-way view over a header with options, and an
//! emitter for option-less headers.

use std::net::Ipv4Addr;

#[cfg(test)]
use super::put;
use super::{checksum, get_u16, get_u8, set_u16, set_u8, Error};

pub(crate) const HEADER_LEN: usize = 20;
/// Largest IHL (15 words).
pub(crate) const MAX_HEADER_LEN: usize = 60;

/// Where each field of the fixed header starts.
pub(crate) mod offset {
    /// Version (high nibble) and IHL in 32-bit words (low nibble).
    pub(crate) const VERSION_IHL: usize = 0;
    #[cfg(test)]
    pub(crate) const DSCP_ECN: usize = 1;
    pub(crate) const TOTAL_LEN: usize = 2;
    pub(crate) const IDENT: usize = 4;
    /// Flags (3 bits) and fragment offset (13 bits), one 16-bit word.
    pub(crate) const FLAGS_FRAG: usize = 6;
    #[cfg(test)]
    pub(crate) const TTL: usize = 8;
    pub(crate) const PROTOCOL: usize = 9;
    pub(crate) const CHECKSUM: usize = 10;
    pub(crate) const SRC_ADDR: usize = 12;
    pub(crate) const DST_ADDR: usize = 16;
}

/// The version field's value.
pub(crate) const VERSION: u8 = 4;
/// Don't fragment, in the flags/fragment-offset word.
pub(crate) const FLAG_DF: u16 = 0x4000;
/// More fragments, in the flags/fragment-offset word.
pub(crate) const FLAG_MF: u16 = 0x2000;
/// The fragment offset (8-byte units) in the flags/fragment-offset word.
pub(crate) const FRAG_OFFSET_MASK: u16 = 0x1fff;
/// The first byte of a header without options: version 4, IHL 5.
pub(crate) const VERSION_IHL_NO_OPTIONS: u8 = 0x45;
/// Longest options area: IHL 15 less the fixed header.
pub(crate) const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;

/// Option types (RFC 791 §3.1) the options area's walk knows.
pub(crate) mod option {
    /// End of option list: the rest of the area is padding.
    pub(crate) const END: u8 = 0;
    /// No operation: one byte.
    pub(crate) const NOP: u8 = 1;
    /// The copied flag of an option type: the option goes into every
    /// fragment, not only the first.
    pub(crate) const COPIED: u8 = 0x80;
}

/// What an accessor reads when the buffer is shorter than the header
/// (only a view made by [`Ipv4Packet::new_unchecked`] can be).
const NO_HEADER: [u8; HEADER_LEN] = [0; HEADER_LEN];

/// A view of an IPv4 packet in `T`. The buffer may be longer than the
/// packet (Ethernet padding); `payload` stops at the total length.
#[derive(Copy, Clone, Debug)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks version 4, IHL ≥ 5, IHL ≤ total length ≤ buffer length.
    /// The header checksum is not verified: NICs do that, and a forwarder
    /// that passes the packet on untouched must not be stricter than one.
    #[inline(always)]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks only the header: version 4, IHL ≥ 5 and the fixed 20 bytes
    /// present. For a packet quoted by an ICMP error, whose total length
    /// runs past the quote; `Ipv4Packet::payload` is then empty.
    #[inline]
    pub fn new_checked_header(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        Ok(p)
    }

    /// What [`Ipv4Packet::new_checked_header`] checks.
    #[inline(always)]
    pub(crate) fn check_header(&self) -> Result<(), Error> {
        let hdr = self
            .buffer
            .as_ref()
            .first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        let version_ihl = get_u8::<{ offset::VERSION_IHL }, HEADER_LEN>(hdr);
        if version_ihl >> 4 != VERSION || usize::from(version_ihl & 0x0f) * 4 < HEADER_LEN {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// What [`Ipv4Packet::new_checked`] checks.
    #[inline(always)]
    pub(crate) fn check_len(&self) -> Result<(), Error> {
        self.check_header()?;
        let total = usize::from(self.total_len());
        if total < self.header_len() {
            return Err(Error::Malformed);
        }
        if total > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    #[inline(always)]
    fn header(&self) -> &[u8; HEADER_LEN] {
        self.buffer.as_ref().first_chunk().unwrap_or(&NO_HEADER)
    }

    #[cfg(test)]
    pub(crate) fn version(&self) -> u8 {
        get_u8::<{ offset::VERSION_IHL }, HEADER_LEN>(self.header()) >> 4
    }

    /// Header length in bytes, options included (IHL × 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        usize::from(get_u8::<{ offset::VERSION_IHL }, HEADER_LEN>(self.header()) & 0x0f) * 4
    }

    #[cfg(test)]
    pub(crate) fn dscp_ecn(&self) -> u8 {
        get_u8::<{ offset::DSCP_ECN }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn total_len(&self) -> u16 {
        get_u16::<{ offset::TOTAL_LEN }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn ident(&self) -> u16 {
        get_u16::<{ offset::IDENT }, HEADER_LEN>(self.header())
    }

    /// The flags/fragment-offset word as it is ([`FLAG_DF`], [`FLAG_MF`],
    /// [`FRAG_OFFSET_MASK`]; the top bit is reserved).
    #[inline(always)]
    pub(crate) fn flags_frag(&self) -> u16 {
        get_u16::<{ offset::FLAGS_FRAG }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    #[inline(always)]
    pub(crate) fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in 8-byte units.
    #[inline(always)]
    pub(crate) fn frag_offset(&self) -> u16 {
        self.flags_frag() & FRAG_OFFSET_MASK
    }

    /// HA-2: MF set or a non-zero offset, so the first fragment counts.
    #[cfg(test)]
    pub(crate) fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    #[cfg(test)]
    pub(crate) fn ttl(&self) -> u8 {
        get_u8::<{ offset::TTL }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        get_u8::<{ offset::PROTOCOL }, HEADER_LEN>(self.header())
    }

    #[cfg(test)]
    pub(crate) fn checksum(&self) -> u16 {
        get_u16::<{ offset::CHECKSUM }, HEADER_LEN>(self.header())
    }

    #[inline(always)]
    pub(crate) fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(super::field::<{ offset::SRC_ADDR }, 4, HEADER_LEN>(
            self.header(),
        ))
    }

    #[inline(always)]
    pub(crate) fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(super::field::<{ offset::DST_ADDR }, 4, HEADER_LEN>(
            self.header(),
        ))
    }

    /// The source then the destination address, as they lie side by side
    /// at the end of the fixed header.
    #[inline(always)]
    pub(crate) fn address_bytes(&self) -> [u8; 8] {
        super::field::<{ offset::SRC_ADDR }, 8, HEADER_LEN>(self.header())
    }

    /// The options: bytes 20 to the header length.
    pub(crate) fn options(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }

    /// Header and options: the first [`Ipv4Packet::header_len`] bytes (or
    /// as many as the buffer has).
    pub(crate) fn header_bytes(&self) -> &[u8] {
        let buf = self.buffer.as_ref();
        buf.get(..self.header_len()).unwrap_or(buf)
    }

    /// The bytes after the header, up to the total length (empty when the
    /// buffer ends before it, as a quoted packet's does).
    #[inline(always)]
    pub(crate) fn payload(&self) -> &[u8] {
        let total = usize::from(self.total_len());
        self.buffer
            .as_ref()
            .get(self.header_len()..total)
            .unwrap_or(&[])
    }

    /// Whether the header checksum (options included) is correct.
    #[cfg(test)]
    pub(crate) fn verify_checksum(&self) -> bool {
        checksum::verify(self.header_bytes())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    /// Sets version 4 and the IHL for a header of `len` bytes (a multiple
    /// of 4 from 20 to 60).
    pub(crate) fn set_header_len(&mut self, len: usize) {
        if let Some(h) = self.header_mut() {
            let ihl = (len / 4) as u8 & 0x0f;
            set_u8::<{ offset::VERSION_IHL }, HEADER_LEN>(h, (VERSION << 4) | ihl);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_dscp_ecn(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::DSCP_ECN }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_total_len(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::TOTAL_LEN }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_ident(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::IDENT }, HEADER_LEN>(h, v);
        }
    }

    /// Writes the whole flags/fragment-offset word.
    pub(crate) fn set_flags_frag(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::FLAGS_FRAG }, HEADER_LEN>(h, v);
        }
    }

    /// Sets or clears DF, keeping the rest of the word.
    pub(crate) fn set_dont_frag(&mut self, df: bool) {
        let w = self.flags_frag() & !FLAG_DF;
        self.set_flags_frag(if df { w | FLAG_DF } else { w });
    }

    /// Sets or clears MF, keeping the rest of the word.
    pub(crate) fn set_more_frags(&mut self, mf: bool) {
        let w = self.flags_frag() & !FLAG_MF;
        self.set_flags_frag(if mf { w | FLAG_MF } else { w });
    }

    /// Sets the fragment offset (8-byte units, 13 bits), keeping the flags.
    pub(crate) fn set_frag_offset(&mut self, units: u16) {
        let w = self.flags_frag() & !FRAG_OFFSET_MASK;
        self.set_flags_frag(w | (units & FRAG_OFFSET_MASK));
    }

    #[cfg(test)]
    pub(crate) fn set_ttl(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::TTL }, HEADER_LEN>(h, v);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_protocol(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ offset::PROTOCOL }, HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_checksum(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ offset::CHECKSUM }, HEADER_LEN>(h, v);
        }
    }

    #[cfg(test)]
    pub(crate) fn set_src_addr(&mut self, a: Ipv4Addr) {
        if let Some(h) = self.header_mut() {
            put::<{ offset::SRC_ADDR }, 4, HEADER_LEN>(h, a.octets());
        }
    }

    #[cfg(test)]
    pub(crate) fn set_dst_addr(&mut self, a: Ipv4Addr) {
        if let Some(h) = self.header_mut() {
            put::<{ offset::DST_ADDR }, 4, HEADER_LEN>(h, a.octets());
        }
    }

    /// Computes the header checksum over the header and its options and
    /// writes it.
    pub(crate) fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header_bytes());
        self.set_checksum(c);
    }

    /// The options, writable.
    #[cfg(test)]
    pub(crate) fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..end)
            .unwrap_or(&mut [])
    }
}

/// The options of the options area `opts` that go into non-first
/// fragments (RFC 791 §3.2: those with the copied flag), written to `out`
/// and padded with end-of-list to a multiple of 4 bytes; returns their
/// length. `Malformed` for an option that runs past the area or announces
/// a length below 2.
pub(crate) fn copied_options(opts: &[u8], out: &mut [u8; MAX_OPTIONS_LEN]) -> Result<usize, Error> {
    let mut i = 0;
    let mut n = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            option::END => break,
            option::NOP => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1).ok_or(Error::Malformed)?);
                let opt = opts
                    .get(i..i + len)
                    .filter(|_| len >= 2)
                    .ok_or(Error::Malformed)?;
                if kind & option::COPIED != 0 {
                    out.get_mut(n..n + len)
                        .ok_or(Error::Malformed)?
                        .copy_from_slice(opt);
                    n += len;
                }
                i += len;
            }
        }
    }
    let padded = (n + 3) & !3;
    out.get_mut(n..padded)
        .ok_or(Error::Malformed)?
        .fill(option::END);
    Ok(padded)
}

/// An option-less IPv4 header to emit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ipv4Repr {
    pub(crate) src: Ipv4Addr,
    pub(crate) dst: Ipv4Addr,
    pub(crate) protocol: u8,
    pub(crate) ttl: u8,
    pub(crate) ident: u16,
    pub(crate) dont_frag: bool,
    /// Bytes after the header.
    pub(crate) payload_len: usize,
}

impl Ipv4Repr {
    /// Writes the header with its checksum; `Malformed` if the total length
    /// does not fit the 16-bit field.
    ///
    /// The checksum is summed from the field values, not read back from the
    /// buffer: the header usually lands in a headroom cache line that is still
    /// being fetched, and reading back bytes just stored one at a time would
    /// stall on store forwarding. The header is then written with one copy.
    pub(crate) fn emit(&self, hdr: &mut [u8; HEADER_LEN]) -> Result<(), Error> {
        let total = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        let flags = if self.dont_frag { FLAG_DF } else { 0 };
        let src = self.src.octets();
        let dst = self.dst.octets();
        let word = |a: u8, b: u8| u32::from(u16::from_be_bytes([a, b]));
        let sum = word(VERSION_IHL_NO_OPTIONS, 0)
            + u32::from(total)
            + u32::from(self.ident)
            + u32::from(flags)
            + word(self.ttl, self.protocol)
            + word(src[0], src[1])
            + word(src[2], src[3])
            + word(dst[0], dst[1])
            + word(dst[2], dst[3]);
        let c = (!checksum::fold(sum)).to_be_bytes();
        let t = total.to_be_bytes();
        let id = self.ident.to_be_bytes();
        let f = flags.to_be_bytes();
        *hdr = [
            VERSION_IHL_NO_OPTIONS,
            0,
            t[0],
            t[1],
            id[0],
            id[1],
            f[0],
            f[1],
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
