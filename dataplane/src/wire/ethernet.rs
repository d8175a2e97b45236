//! Ethernet II with up to two VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8).

use super::{field, put, Error};

pub const HEADER_LEN: usize = 14;
pub const VLAN_TAG_LEN: usize = 4;
/// QinQ is the deepest stacking seen on real networks; a third tag leaves
/// its TPID as the reported ethertype, which callers treat as unknown.
pub const MAX_VLAN_TAGS: usize = 2;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_QINQ: u16 = 0x88a8;

pub type MacAddr = [u8; 6];

/// A parsed Ethernet frame: the fixed header, the VLAN tags that follow it,
/// and the payload after the last tag.
#[derive(Copy, Clone, Debug)]
pub struct EthernetFrame<'a> {
    hdr: &'a [u8; HEADER_LEN],
    /// TCIs in wire order (outer first); only `tag_count` are meaningful.
    tags: [u16; MAX_VLAN_TAGS],
    tag_count: u8,
    ethertype: u16,
    payload: &'a [u8],
}

fn is_vlan_tpid(t: u16) -> bool {
    t == ETHERTYPE_VLAN || t == ETHERTYPE_QINQ
}

impl<'a> EthernetFrame<'a> {
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, Error> {
        let (hdr, mut rest) = buf
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(Error::Truncated)?;
        let mut ethertype = u16::from_be_bytes([hdr[12], hdr[13]]);
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
            hdr,
            tags,
            tag_count,
            ethertype,
            payload: rest,
        })
    }

    pub fn dst(&self) -> MacAddr {
        field::<0, 6, HEADER_LEN>(self.hdr)
    }

    pub fn src(&self) -> MacAddr {
        field::<6, 6, HEADER_LEN>(self.hdr)
    }

    /// The ethertype after the VLAN tags: the payload's protocol.
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The VLAN tag control fields (PCP/DEI/VID), outer first.
    pub fn vlan_tags(&self) -> &[u16] {
        self.tags.get(..usize::from(self.tag_count)).unwrap_or(&[])
    }

    /// Bytes from the frame start to the payload: 14, 18 or 22.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + VLAN_TAG_LEN * usize::from(self.tag_count)
    }

    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// An untagged Ethernet header to emit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub ethertype: u16,
}

impl EthernetRepr {
    pub fn emit(&self, hdr: &mut [u8; HEADER_LEN]) {
        put::<0, 6, HEADER_LEN>(hdr, self.dst);
        put::<6, 6, HEADER_LEN>(hdr, self.src);
        put::<12, 2, HEADER_LEN>(hdr, self.ethertype.to_be_bytes());
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
        let mut h = [0u8; HEADER_LEN];
        EthernetRepr {
            dst: DST,
            src: SRC,
            ethertype: ETHERTYPE_IPV6,
        }
        .emit(&mut h);
        let e = EthernetFrame::new_checked(&h).unwrap();
        assert_eq!(
            (e.dst(), e.src(), e.ethertype()),
            (DST, SRC, ETHERTYPE_IPV6)
        );
    }
}
