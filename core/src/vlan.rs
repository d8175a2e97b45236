//! Trunk ports: a port configured with an 802.1Q VLAN receives only frames
//! whose outer tag is that VLAN, and every frame it sends carries the tag.
//! The pipeline writes the tag where it builds the Ethernet header anyway
//! (encapsulation, prebuilt outer headers); what it does not build — the
//! kernel's frames from the exception path, fragments — gets the tag pushed
//! here, and frames punted to the kernel have it popped, so the TAP carries
//! plain untagged frames with the port's addresses (see
//! `docs/architecture.md`, "Trunk ports").

use crate::packet::PacketBuf;
use crate::wire::ethernet::{self, outer_vlan_id, VlanTagRepr, VLAN_TAG_LEN};

/// MACs: the bytes in front of the tag.
const MACS: usize = ethernet::offset::ETHERTYPE;

/// Whether a frame received on a port of VLAN `vid` belongs to it: its
/// outer tag is 802.1Q with that VLAN ID (priority bits ignored).
#[inline(always)]
pub(crate) fn accepts(frame: &[u8], vid: u16) -> bool {
    outer_vlan_id(frame) == Some(vid)
}

/// Inserts an 802.1Q tag with `vid` (priority 0) after the MACs. False,
/// with the packet untouched, when it is shorter than the MACs or has no
/// headroom for the tag.
pub fn push_tag<P: PacketBuf>(pkt: &mut P, vid: u16) -> bool {
    if pkt.data().len() < MACS || !pkt.prepend(VLAN_TAG_LEN) {
        return false;
    }
    let Some(front) = pkt.data_mut().first_chunk_mut::<{ MACS + VLAN_TAG_LEN }>() else {
        return false;
    };
    front.copy_within(VLAN_TAG_LEN.., 0);
    if let Some(tag) = front.last_chunk_mut::<VLAN_TAG_LEN>() {
        VlanTagRepr { vid }.emit(tag);
    }
    true
}

/// Removes the frame's outer 802.1Q tag. False, with the packet untouched,
/// when it has none.
pub fn pop_tag<P: PacketBuf>(pkt: &mut P) -> bool {
    if outer_vlan_id(pkt.data()).is_none() {
        return false;
    }
    let Some(front) = pkt.data_mut().first_chunk_mut::<{ MACS + VLAN_TAG_LEN }>() else {
        return false;
    };
    front.copy_within(..MACS, VLAN_TAG_LEN);
    pkt.trim_front(VLAN_TAG_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::VecPacket;

    fn untagged() -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x06];
        f.extend_from_slice(&[0xaa; 28]);
        f
    }

    #[test]
    fn push_then_pop_round_trips() {
        let f = untagged();
        let mut p = VecPacket::new(&f);
        assert!(push_tag(&mut p, 100));
        assert_eq!(p.data().len(), f.len() + 4);
        assert_eq!(&p.data()[..12], &f[..12]);
        assert_eq!(&p.data()[12..16], &[0x81, 0x00, 0x00, 100]);
        assert_eq!(&p.data()[16..], &f[12..]);
        assert!(accepts(p.data(), 100));
        assert!(!accepts(p.data(), 101));
        assert!(pop_tag(&mut p));
        assert_eq!(p.data(), &f[..]);
        assert!(!accepts(p.data(), 100));
        // Nothing to pop: untouched.
        assert!(!pop_tag(&mut p));
        assert_eq!(p.data(), &f[..]);
    }

    #[test]
    fn no_headroom_or_short_frame_leaves_the_packet() {
        let f = untagged();
        let mut p = VecPacket::with_headroom(&f, 2);
        assert!(!push_tag(&mut p, 7));
        assert_eq!(p.data(), &f[..]);
        let mut short = VecPacket::new(&f[..10]);
        assert!(!push_tag(&mut short, 7));
        assert_eq!(short.data(), &f[..10]);
    }
}
