//! A bounded walk over IPv6 extension headers (RFC 8200 §4) to the upper
//! layer: hop-by-hop, routing, fragment, destination options and AH.
//!
//! Anything else (ESP included: its contents are opaque) ends the walk and
//! is reported as the upper-layer protocol.

use super::proto::{AH, HOP_BY_HOP, IPV6_DEST_OPTS, IPV6_FRAGMENT, IPV6_ROUTING};
use super::{get_u16, get_u32, get_u8, set_u16, set_u32, set_u8, Error};

/// Longest chain the walk follows. Legitimate packets carry two or three;
/// the bound keeps the per-packet cost fixed against crafted chains.
pub(crate) const MAX_EXT_HEADERS: usize = 8;

pub(crate) const FRAGMENT_HEADER_LEN: usize = 8;

/// Where each field of the Fragment header (RFC 8200 §4.5) starts.
pub(crate) mod fragment_offset {
    pub(crate) const NEXT_HEADER: usize = 0;
    /// Fragment offset (13 bits, 8-byte units), 2 reserved bits, M.
    pub(crate) const OFFSET_M: usize = 2;
    pub(crate) const IDENT: usize = 4;
}

const FRAG_M: u16 = 0x0001;
const FRAG_OFFSET_SHIFT: u32 = 3;

/// What an accessor reads when the buffer is shorter than the header.
const NO_FRAGMENT_HEADER: [u8; FRAGMENT_HEADER_LEN] = [0; FRAGMENT_HEADER_LEN];

/// A view of an IPv6 Fragment header in `T`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ipv6FragmentHeader<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    /// A view without any check: accessors read zeros and setters write
    /// nothing if `buffer` is shorter than [`FRAGMENT_HEADER_LEN`].
    #[inline(always)]
    pub(crate) const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Checks that the 8 bytes of the header are there.
    #[inline]
    pub(crate) fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    #[inline(always)]
    fn header(&self) -> &[u8; FRAGMENT_HEADER_LEN] {
        self.buffer
            .as_ref()
            .first_chunk()
            .unwrap_or(&NO_FRAGMENT_HEADER)
    }

    /// The first header of the fragmentable part.
    pub(crate) fn next_header(&self) -> u8 {
        get_u8::<{ fragment_offset::NEXT_HEADER }, FRAGMENT_HEADER_LEN>(self.header())
    }

    fn offset_m(&self) -> u16 {
        get_u16::<{ fragment_offset::OFFSET_M }, FRAGMENT_HEADER_LEN>(self.header())
    }

    /// Fragment offset in 8-byte units.
    pub(crate) fn frag_offset(&self) -> u16 {
        self.offset_m() >> FRAG_OFFSET_SHIFT
    }

    pub(crate) fn more_frags(&self) -> bool {
        self.offset_m() & FRAG_M != 0
    }

    pub(crate) fn ident(&self) -> u32 {
        get_u32::<{ fragment_offset::IDENT }, FRAGMENT_HEADER_LEN>(self.header())
    }

    /// The header's contents.
    pub(crate) fn info(&self) -> Ipv6FragInfo {
        Ipv6FragInfo {
            offset: self.frag_offset(),
            more: self.more_frags(),
            ident: self.ident(),
            next: self.next_header(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6FragmentHeader<T> {
    #[inline(always)]
    fn header_mut(&mut self) -> Option<&mut [u8; FRAGMENT_HEADER_LEN]> {
        self.buffer.as_mut().first_chunk_mut()
    }

    fn set_offset_m(&mut self, v: u16) {
        if let Some(h) = self.header_mut() {
            set_u16::<{ fragment_offset::OFFSET_M }, FRAGMENT_HEADER_LEN>(h, v);
        }
    }

    pub(crate) fn set_next_header(&mut self, v: u8) {
        if let Some(h) = self.header_mut() {
            set_u8::<{ fragment_offset::NEXT_HEADER }, FRAGMENT_HEADER_LEN>(h, v);
        }
    }

    /// Sets the fragment offset (8-byte units, 13 bits), keeping M and the
    /// reserved bits.
    pub(crate) fn set_frag_offset(&mut self, units: u16) {
        let low = self.offset_m() & ((1 << FRAG_OFFSET_SHIFT) - 1);
        self.set_offset_m((units << FRAG_OFFSET_SHIFT) | low);
    }

    pub(crate) fn set_more_frags(&mut self, more: bool) {
        let w = self.offset_m() & !FRAG_M;
        self.set_offset_m(if more { w | FRAG_M } else { w });
    }

    pub(crate) fn set_ident(&mut self, v: u32) {
        if let Some(h) = self.header_mut() {
            set_u32::<{ fragment_offset::IDENT }, FRAGMENT_HEADER_LEN>(h, v);
        }
    }
}

/// The contents of a Fragment header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ipv6FragInfo {
    /// In 8-byte units.
    pub(crate) offset: u16,
    pub(crate) more: bool,
    pub(crate) ident: u32,
    /// The Fragment header's next header: the first header of the
    /// fragmentable part, the only protocol a non-first fragment shows.
    pub(crate) next: u8,
}

impl Ipv6FragInfo {
    /// Writes the whole header, reserved fields zero.
    pub(crate) fn emit(&self, hdr: &mut [u8; FRAGMENT_HEADER_LEN]) {
        *hdr = [0; FRAGMENT_HEADER_LEN];
        let mut h = Ipv6FragmentHeader::new_unchecked(hdr);
        h.set_next_header(self.next);
        h.set_frag_offset(self.offset);
        h.set_more_frags(self.more);
        h.set_ident(self.ident);
    }
}

/// Where the walk ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ipv6Upper {
    /// Upper-layer protocol (after a non-first fragment: the fragment
    /// header's next-header value, whose data is not in this packet).
    pub(crate) protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    pub(crate) offset: usize,
    /// Present whenever a Fragment header was seen (HA-2: atomic and first
    /// fragments included).
    pub(crate) fragment: Option<Ipv6FragInfo>,
}

fn is_extension(nh: u8) -> bool {
    matches!(
        nh,
        HOP_BY_HOP | IPV6_ROUTING | IPV6_FRAGMENT | IPV6_DEST_OPTS | AH
    )
}

/// Walks the chain starting with `first` (the fixed header's next header)
/// over `payload` (the IPv6 payload).
///
/// Rejects hop-by-hop anywhere but first (RFC 8200 §4.3), a second
/// Fragment header, headers that run past the payload, and chains longer
/// than [`MAX_EXT_HEADERS`]. Stops after a non-first fragment's header,
/// since what follows is the middle of the original datagram.
pub(crate) fn walk(first: u8, payload: &[u8]) -> Result<Ipv6Upper, Error> {
    let mut nh = first;
    let mut offset = 0usize;
    let mut fragment = None;
    for count in 0..=MAX_EXT_HEADERS {
        if !is_extension(nh) {
            return Ok(Ipv6Upper {
                protocol: nh,
                offset,
                fragment,
            });
        }
        if count == MAX_EXT_HEADERS {
            return Err(Error::TooManyHeaders);
        }
        if nh == HOP_BY_HOP && count != 0 {
            return Err(Error::Malformed);
        }
        let rest = payload.get(offset..).ok_or(Error::Truncated)?;
        if nh == IPV6_FRAGMENT {
            let info = Ipv6FragmentHeader::new_checked(rest)?.info();
            if fragment.is_some() {
                return Err(Error::Malformed);
            }
            fragment = Some(info);
            nh = info.next;
            offset += FRAGMENT_HEADER_LEN;
            if info.offset != 0 {
                return Ok(Ipv6Upper {
                    protocol: nh,
                    offset,
                    fragment,
                });
            }
            continue;
        }
        let h = rest.first_chunk::<2>().ok_or(Error::Truncated)?;
        let len = if nh == AH {
            (usize::from(h[1]) + 2) * 4
        } else {
            (usize::from(h[1]) + 1) * 8
        };
        if rest.len() < len {
            return Err(Error::Truncated);
        }
        nh = h[0];
        offset += len;
    }
    // The loop returns on its last iteration; kept total without a panic.
    Err(Error::TooManyHeaders)
}

#[cfg(test)]
mod tests {
    use super::super::proto::{TCP, UDP};
    use super::*;

    /// An extension header of kind `kind` followed by `next`, 8 bytes long.
    fn ext(kind: u8, next: u8) -> Vec<u8> {
        match kind {
            AH => vec![next, 0, 0, 0, 0, 0, 0, 0], // (0 + 2) * 4 = 8
            IPV6_FRAGMENT => vec![next, 0, 0, 0, 0, 0, 0, 1],
            _ => vec![next, 0, 1, 4, 0, 0, 0, 0],
        }
    }

    fn chain(kinds: &[u8], upper: u8) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, k) in kinds.iter().enumerate() {
            let next = kinds.get(i + 1).copied().unwrap_or(upper);
            out.extend(ext(*k, next));
        }
        out.extend_from_slice(&[0xab; 8]);
        out
    }

    #[test]
    fn no_extension_headers() {
        let u = walk(TCP, &[0; 20]).unwrap();
        assert_eq!(
            u,
            Ipv6Upper {
                protocol: TCP,
                offset: 0,
                fragment: None
            }
        );
    }

    #[test]
    fn every_kind_is_skipped() {
        let kinds = [HOP_BY_HOP, IPV6_DEST_OPTS, IPV6_ROUTING, AH, IPV6_DEST_OPTS];
        let p = chain(&kinds, UDP);
        let u = walk(HOP_BY_HOP, &p).unwrap();
        assert_eq!((u.protocol, u.offset, u.fragment), (UDP, 40, None));
    }

    #[test]
    fn longer_headers_use_their_length_fields() {
        // Routing header with Hdr Ext Len 1 = 16 bytes, AH with 4 = 24 bytes.
        let mut p = vec![AH, 1];
        p.extend_from_slice(&[0; 14]);
        p.extend_from_slice(&[TCP, 4]);
        p.extend_from_slice(&[0; 22]);
        let u = walk(IPV6_ROUTING, &p).unwrap();
        assert_eq!((u.protocol, u.offset), (TCP, 40));
    }

    /// HA-2: a Fragment header is reported even at offset 0 (first or atomic
    /// fragment), and the walk continues to the upper layer.
    #[test]
    fn ha_2_first_fragment_walks_on() {
        let p = chain(&[IPV6_DEST_OPTS, IPV6_FRAGMENT], TCP);
        let u = walk(IPV6_DEST_OPTS, &p).unwrap();
        assert_eq!((u.protocol, u.offset), (TCP, 16));
        let f = u.fragment.unwrap();
        assert_eq!((f.offset, f.more, f.ident), (0, false, 1));
    }

    #[test]
    fn ha_2_non_first_fragment_stops_at_its_header() {
        // offset 185 (×8), M set; the bytes after it are not a header.
        let mut p = vec![UDP, 0, 0x05, 0xc9, 0, 0, 0, 9];
        p.extend_from_slice(&[0xff; 16]);
        let u = walk(IPV6_FRAGMENT, &p).unwrap();
        assert_eq!((u.protocol, u.offset), (UDP, 8));
        assert_eq!(
            u.fragment,
            Some(Ipv6FragInfo {
                offset: 185,
                more: true,
                ident: 9,
                next: UDP,
            })
        );
    }

    #[test]
    fn chain_limit() {
        let ok = chain(&[IPV6_DEST_OPTS; MAX_EXT_HEADERS], TCP);
        assert_eq!(
            walk(IPV6_DEST_OPTS, &ok).unwrap().offset,
            8 * MAX_EXT_HEADERS
        );
        let too_long = chain(&[IPV6_DEST_OPTS; MAX_EXT_HEADERS + 1], TCP);
        assert_eq!(walk(IPV6_DEST_OPTS, &too_long), Err(Error::TooManyHeaders));
    }

    #[test]
    fn misplaced_hop_by_hop_and_double_fragment_are_malformed() {
        let p = chain(&[IPV6_DEST_OPTS, HOP_BY_HOP], TCP);
        assert_eq!(walk(IPV6_DEST_OPTS, &p), Err(Error::Malformed));
        let p = chain(&[IPV6_FRAGMENT, IPV6_FRAGMENT], TCP);
        assert_eq!(walk(IPV6_FRAGMENT, &p), Err(Error::Malformed));
    }

    #[test]
    fn truncation_at_every_boundary() {
        let kinds = [HOP_BY_HOP, IPV6_FRAGMENT, AH, IPV6_ROUTING];
        let p = chain(&kinds, TCP);
        let headers_end = 8 * kinds.len();
        for cut in 0..headers_end {
            assert_eq!(walk(HOP_BY_HOP, &p[..cut]), Err(Error::Truncated), "{cut}");
        }
        assert!(walk(HOP_BY_HOP, &p[..headers_end]).is_ok());
    }
}
