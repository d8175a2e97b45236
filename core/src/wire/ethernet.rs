//! Ethernet II with up to two VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8).

use super::{field, get_u16, put, Error};

pub(crate) const HEADER_LEN: usize = 14;

/// Where each field starts, in an untagged frame and after one tag.
pub(crate) mod offset {
    pub(crate) const DST: usize = 0;
    pub(crate) const SRC: usize = 6;
    /// The ethertype, or the TPID of the first VLAN tag.
    pub(crate) const ETHERTYPE: usize = 12;
    /// The first tag's control field (PCP, DEI, VID).
    pub(crate) const VLAN_TCI: usize = 14;
    /// The ethertype after one VLAN tag.
    pub(crate) const VLAN_ETHERTYPE: usize = 16;
}
pub(crate) const VLAN_TAG_LEN: usize = 4;
/// QinQ is the deepest stacking seen on real networks; a third tag leaves
/// its TPID as the reported ethertype, which callers treat as unknown.
pub(crate) const MAX_VLAN_TAGS: usize = 2;

pub(crate) const ETHERTYPE_IPV4: u16 = 0x0800;
pub(crate) const ETHERTYPE_ARP: u16 = 0x0806;
pub(crate) const ETHERTYPE_VLAN: u16 = 0x8100;
pub(crate) const ETHERTYPE_IPV6: u16 = 0x86dd;
pub(crate) const ETHERTYPE_QINQ: u16 = 0x88a8;

pub(crate) type MacAddr = [u8; 6];

/// A parsed Ethernet frame: the fixed header, the VLAN tags that follow it,
/// and the payload after the last tag.
#[derive(Copy, Clone, Debug)]
pub(crate) struct EthernetFrame<'a> {
    #[cfg(test)]
    hdr: &'a [u8; HEADER_LEN],
    /// TCIs in wire order (outer first); only `tag_count` are meaningful.
    #[cfg(test)]
    tags: [u16; MAX_VLAN_TAGS],
    tag_count: u8,
    ethertype: u16,
    payload: &'a [u8],
}

fn is_vlan_tpid(t: u16) -> bool {
    t == ETHERTYPE_VLAN || t == ETHERTYPE_QINQ
}

impl<'a> EthernetFrame<'a> {
    pub(crate) fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let (hdr, mut rest) = buf
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        let mut ethertype = get_u16::<{ offset::ETHERTYPE }, HEADER_LEN>(hdr);
        let mut tags = [0u16; MAX_VLAN_TAGS];
        let mut tag_count = 0u8;
        for slot in tags.iter_mut() {
            if !is_vlan_tpid(ethertype) {
                break;
            }
            let (tag, after) = rest
                .split_first_chunk::<VLAN_TAG_LEN>()
                .ok_or(Error::Truncated)?;
            *slot = u16::from_be_bytes([tag[0], tag[1]]);
            ethertype = u16::from_be_bytes([tag[2], tag[3]]);
            tag_count += 1;
            rest = after;
        }
        Ok(Self {
            #[cfg(test)]
            hdr,
            #[cfg(test)]
            tags,
            tag_count,
            ethertype,
            payload: rest,
        })
    }

    #[cfg(test)]
    pub(crate) fn dst(&self) -> MacAddr {
        field::<{ offset::DST }, 6, HEADER_LEN>(self.hdr)
    }

    #[cfg(test)]
    pub(crate) fn src(&self) -> MacAddr {
        field::<{ offset::SRC }, 6, HEADER_LEN>(self.hdr)
    }

    /// The ethertype after the VLAN tags: the payload's protocol.
    pub(crate) fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The VLAN tag control fields (PCP/DEI/VID), outer first.
    #[cfg(test)]
    pub(crate) fn vlan_tags(&self) -> &[u16] {
        self.tags.get(..usize::from(self.tag_count)).unwrap_or(&[])
    }

    /// Bytes from the frame start to the payload: 14, 18 or 22.
    pub(crate) fn header_len(&self) -> usize {
        HEADER_LEN + VLAN_TAG_LEN * usize::from(self.tag_count)
    }

    pub(crate) fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// The 12-bit VLAN identifier of a tag control field (PCP and DEI cut).
pub(crate) const VID_MASK: u16 = 0x0fff;

/// The VLAN ID of the frame's outer tag when that tag is 802.1Q (0x8100);
/// None for an untagged frame, an 802.1ad outer tag or a short frame.
#[inline(always)]
pub(crate) fn outer_vlan_id(frame: &[u8]) -> Option<u16> {
    let h = frame.first_chunk::<{ HEADER_LEN + VLAN_TAG_LEN }>()?;
    (get_u16::<{ offset::ETHERTYPE }, { HEADER_LEN + VLAN_TAG_LEN }>(h) == ETHERTYPE_VLAN)
        .then(|| get_u16::<{ offset::VLAN_TCI }, { HEADER_LEN + VLAN_TAG_LEN }>(h) & VID_MASK)
}

/// The ethertype field of a frame (a VLAN TPID when it is tagged); None
/// for a frame shorter than the header.
#[inline(always)]
pub(crate) fn ethertype_field(frame: &[u8]) -> Option<u16> {
    let h = frame.first_chunk::<HEADER_LEN>()?;
    Some(get_u16::<{ offset::ETHERTYPE }, HEADER_LEN>(h))
}

/// Swaps the destination and source MAC addresses of the header at the
/// start of `hdr` (an answer goes back to the sender).
pub(crate) fn swap_addresses<const L: usize>(hdr: &mut [u8; L]) {
    let dst: MacAddr = field::<{ offset::DST }, 6, L>(hdr);
    let src: MacAddr = field::<{ offset::SRC }, 6, L>(hdr);
    put::<{ offset::DST }, 6, L>(hdr, src);
    put::<{ offset::SRC }, 6, L>(hdr, dst);
}

/// An 802.1Q tag to emit: TPID 0x8100, PCP and DEI 0, the VLAN ID `vid`
/// (12 bits; higher bits are dropped).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct VlanTagRepr {
    pub(crate) vid: u16,
}

impl VlanTagRepr {
    pub(crate) fn emit(&self, tag: &mut [u8; VLAN_TAG_LEN]) {
        put::<0, 2, VLAN_TAG_LEN>(tag, ETHERTYPE_VLAN.to_be_bytes());
        put::<2, 2, VLAN_TAG_LEN>(tag, (self.vid & VID_MASK).to_be_bytes());
    }
}

/// An Ethernet header to emit: untagged, or with one 802.1Q tag (PCP and
/// DEI 0) when `vlan` is set.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct EthernetRepr {
    pub(crate) dst: MacAddr,
    pub(crate) src: MacAddr,
    pub(crate) vlan: Option<u16>,
    pub(crate) ethertype: u16,
}

/// Bytes of the Ethernet header a frame with `vlan` starts with: 14, or 18
/// with the tag.
#[inline(always)]
pub(crate) const fn header_len_with(vlan: Option<u16>) -> usize {
    match vlan {
        Some(_) => HEADER_LEN + VLAN_TAG_LEN,
        None => HEADER_LEN,
    }
}

impl EthernetRepr {
    pub(crate) fn header_len(&self) -> usize {
        header_len_with(self.vlan)
    }

    /// Writes the header over the first [`EthernetRepr::header_len`] bytes
    /// of `buf`.
    pub(crate) fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let hdr = buf.get_mut(..self.header_len()).ok_or(Error::Truncated)?;
        hdr[offset::DST..offset::DST + 6].copy_from_slice(&self.dst);
        hdr[offset::SRC..offset::SRC + 6].copy_from_slice(&self.src);
        let tail = match self.vlan {
            Some(vid) => {
                hdr[offset::ETHERTYPE..offset::ETHERTYPE + 2]
                    .copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
                hdr[offset::VLAN_TCI..offset::VLAN_TCI + 2]
                    .copy_from_slice(&(vid & VID_MASK).to_be_bytes());
                offset::VLAN_ETHERTYPE
            }
            None => offset::ETHERTYPE,
        };
        hdr[tail..tail + 2].copy_from_slice(&self.ethertype.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DST: MacAddr = [0x02, 0, 0, 0, 0, 1];
    const SRC: MacAddr = [0x02, 0, 0, 0, 0, 2];

    fn frame(tpids: &[u16], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&DST);
        f.extend_from_slice(&SRC);
        for (i, t) in tpids.iter().enumerate() {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&(100 + i as u16).to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn untagged_single_and_double_tagged() {
        for tpids in [
            &[][..],
            &[ETHERTYPE_VLAN],
            &[ETHERTYPE_QINQ, ETHERTYPE_VLAN],
        ] {
            let f = frame(tpids, ETHERTYPE_IPV4, &[0xaa, 0xbb]);
            let e = EthernetFrame::new_checked(&f).unwrap();
            assert_eq!(e.dst(), DST);
            assert_eq!(e.src(), SRC);
            assert_eq!(e.ethertype(), ETHERTYPE_IPV4);
            assert_eq!(e.header_len(), 14 + 4 * tpids.len());
            assert_eq!(e.vlan_tags().len(), tpids.len());
            assert_eq!(e.payload(), &[0xaa, 0xbb]);
        }
        let f = frame(&[ETHERTYPE_QINQ, ETHERTYPE_VLAN], ETHERTYPE_IPV6, &[]);
        assert_eq!(
            EthernetFrame::new_checked(&f).unwrap().vlan_tags(),
            &[100, 101]
        );
    }

    #[test]
    fn third_tag_is_reported_as_its_tpid() {
        let f = frame(
            &[ETHERTYPE_QINQ, ETHERTYPE_VLAN, ETHERTYPE_VLAN],
            ETHERTYPE_IPV4,
            &[],
        );
        let e = EthernetFrame::new_checked(&f).unwrap();
        assert_eq!(e.ethertype(), ETHERTYPE_VLAN);
        assert_eq!(e.header_len(), 22);
    }

    /// Every cut inside the header and each tag is rejected, never a panic.
    #[test]
    fn truncation_at_every_boundary() {
        for tpids in [
            &[][..],
            &[ETHERTYPE_VLAN],
            &[ETHERTYPE_QINQ, ETHERTYPE_VLAN],
        ] {
            let f = frame(tpids, ETHERTYPE_IPV4, &[]);
            for cut in 0..f.len() {
                let r = EthernetFrame::new_checked(&f[..cut]);
                assert_eq!(r.err(), Some(Error::Truncated), "tags {tpids:?} cut {cut}");
            }
            assert!(EthernetFrame::new_checked(&f).is_ok());
        }
    }

    #[test]
    fn emit_round_trips() {
        for vlan in [None, Some(1), Some(100), Some(4094)] {
            let repr = EthernetRepr {
                dst: DST,
                src: SRC,
                vlan,
                ethertype: ETHERTYPE_IPV6,
            };
            let mut h = vec![0u8; repr.header_len()];
            repr.emit(&mut h).unwrap();
            let e = EthernetFrame::new_checked(&h).unwrap();
            assert_eq!(
                (e.dst(), e.src(), e.ethertype()),
                (DST, SRC, ETHERTYPE_IPV6)
            );
            assert_eq!(e.vlan_tags(), vlan.as_slice());
            assert_eq!(outer_vlan_id(&h), vlan);
            assert_eq!(
                repr.emit(&mut h[..repr.header_len() - 1]),
                Err(Error::Truncated)
            );
        }
    }

    #[test]
    fn outer_vlan_id_is_802_1q_only() {
        let f = frame(&[ETHERTYPE_VLAN], ETHERTYPE_IPV4, &[]);
        assert_eq!(outer_vlan_id(&f), Some(100));
        let f = frame(&[ETHERTYPE_QINQ, ETHERTYPE_VLAN], ETHERTYPE_IPV4, &[]);
        assert_eq!(outer_vlan_id(&f), None);
        let mut f = frame(&[ETHERTYPE_VLAN], ETHERTYPE_IPV4, &[]);
        f[14] = 0xe0; // PCP 7 on VID 100
        assert_eq!(outer_vlan_id(&f), Some(100));
        assert_eq!(outer_vlan_id(&frame(&[], ETHERTYPE_IPV4, &[])), None);
        assert_eq!(outer_vlan_id(&f[..15]), None);
    }

    #[test]
    fn vlan_tag_is_tpid_then_tci_with_the_vid_only() {
        let mut tag = [0xffu8; VLAN_TAG_LEN];
        VlanTagRepr { vid: 0xf123 }.emit(&mut tag);
        assert_eq!(tag, [0x81, 0x00, 0x01, 0x23]);
    }
}
