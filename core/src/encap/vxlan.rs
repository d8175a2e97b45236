//! VXLAN (RFC 7348): the 8-byte header and an inner Ethernet header (layout
//! in `wire::vxlan`), over UDP to `vxlan_port` (4789, IANA's VXLAN port,
//! by default), in network `vxlan_vni` (24 bits, default 0).
//!
//! VXLAN carries Ethernet frames, so 14 bytes more go in front of the
//! client's IP packet than with GENEVE: destination `vxlan_mac`, the MAC
//! address of the backends' VXLAN device, source the egress port's MAC,
//! type the inner packet's ethertype. A Linux backend delivers only
//! frames addressed to its device (TCP drops anything else as not for
//! this host), so the device's MAC must be `vxlan_mac`: one value per
//! service, set on every backend's device (`ip link add vxlan0 type vxlan
//! id 42 dstport 4789 local <backend> address <vxlan_mac>`), as overlay
//! fabrics give every gateway one anycast MAC. It has no default.
//!
//! The UDP header is the carrier's (`udp.rs`): source port from the flow
//! hash (RFC 7348 §5: a hash of the inner headers, for ECMP entropy),
//! checksum 0 over IPv4 (RFC 7348 §5 asks for it) and computed over IPv6.
//! The outer IPv4 DF is copied from the inner packet as for every tunnel
//! (`outer.rs`); RFC 7348 §4.3 forbids fragmenting VXLAN packets at the
//! endpoints, which a DF-less inner packet beyond the MTU then is (AP-3),
//! but the alternative — dropping it — is worse for the client, and Linux
//! reassembles the outer packet before decapsulating.

use super::tunnel::{value_mac, Carrier, ConfigKey, Tunnel};
use crate::drop_reason::DropReason;
use crate::wire::ethernet::{self, EthernetRepr, MacAddr};
use crate::wire::vxlan::{self, VxlanRepr, VNI_MASK};

/// IANA's VXLAN port.
const DEFAULT_PORT: u16 = 4789;

/// `vxlan_port`: the UDP destination port.
const PORT: ConfigKey = ConfigKey::int("vxlan_port", DEFAULT_PORT as u32, 1, 65535);

/// `vxlan_vni`: the VXLAN Network Identifier, 24 bits.
const VNI: ConfigKey = ConfigKey::int("vxlan_vni", 0, 0, VNI_MASK);

/// `vxlan_mac`: the backends' VXLAN device MAC, the inner frame's
/// destination.
const MAC: ConfigKey = ConfigKey::mac("vxlan_mac");

/// VXLAN to a UDP port, in one network, to one device MAC.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Vxlan {
    pub port: u16,
    /// 24 bits.
    pub vni: u32,
    /// The inner Ethernet header's destination.
    pub mac: MacAddr,
}

impl Tunnel for Vxlan {
    const NAME: &'static str = "vxlan";
    const KEYS: &'static [ConfigKey] = &[PORT, VNI, MAC];
    const DEFAULT: Self = Vxlan {
        port: DEFAULT_PORT,
        vni: 0,
        mac: [0; 6],
    };
    const HEADER_LEN: usize = vxlan::HEADER_LEN + ethernet::HEADER_LEN;

    #[inline(always)]
    fn carrier(self) -> Carrier {
        Carrier::Udp { port: self.port }
    }

    #[inline(always)]
    fn emit(
        self,
        hdr: &mut [u8],
        inner_ethertype: u16,
        port_mac: MacAddr,
    ) -> Result<(), DropReason> {
        let (v, frame) = hdr
            .split_first_chunk_mut::<{ vxlan::HEADER_LEN }>()
            .ok_or(DropReason::NoHeadroom)?;
        VxlanRepr { vni: self.vni }.emit(v);
        EthernetRepr {
            dst: self.mac,
            src: port_mac,
            vlan: None,
            ethertype: inner_ethertype,
        }
        .emit(frame)
        .map_err(|_| DropReason::NoHeadroom)
    }

    fn configure(self, value: &mut impl FnMut(&ConfigKey) -> u64) -> Self {
        Vxlan {
            port: u16::try_from(value(&PORT)).unwrap_or(self.port),
            vni: u32::try_from(value(&VNI) & u64::from(VNI_MASK)).unwrap_or(self.vni),
            mac: value_mac(value(&MAC)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encap::tunnel::mac_value;
    use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

    const PORT_MAC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];
    const DEVICE_MAC: MacAddr = [0x02, 0x5c, 0, 0, 0, 0x2a];

    /// RFC 7348 §5: the VXLAN header (I flag, VNI), then the inner
    /// Ethernet header to the device MAC from the port's, typed as the
    /// inner packet.
    #[test]
    fn header_and_inner_frame_follow_rfc_7348() {
        let v = Vxlan {
            port: 4789,
            vni: 0x12_3456,
            mac: DEVICE_MAC,
        };
        let mut h = [0xffu8; Vxlan::HEADER_LEN];
        v.emit(&mut h, ETHERTYPE_IPV4, PORT_MAC).unwrap();
        assert_eq!(&h[..8], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        assert_eq!(&h[8..14], &DEVICE_MAC);
        assert_eq!(&h[14..20], &PORT_MAC);
        assert_eq!(&h[20..22], &[0x08, 0x00]);
        v.emit(&mut h, ETHERTYPE_IPV6, PORT_MAC).unwrap();
        assert_eq!(&h[20..22], &[0x86, 0xdd]);
        assert_eq!(
            v.emit(&mut [0u8; Vxlan::HEADER_LEN - 1], ETHERTYPE_IPV4, PORT_MAC),
            Err(DropReason::NoHeadroom)
        );
    }

    #[test]
    fn keys_configure_port_vni_and_mac() {
        let v = Vxlan::DEFAULT.configure(&mut |k| match k.name {
            "vxlan_port" => 8472,
            "vxlan_vni" => u64::from(VNI_MASK),
            _ => mac_value(DEVICE_MAC),
        });
        assert_eq!(
            v,
            Vxlan {
                port: 8472,
                vni: 0xff_ffff,
                mac: DEVICE_MAC
            }
        );
        assert_eq!(mac_value(v.mac), 0x025c_0000_002a);
        assert_eq!(v.carrier(), Carrier::Udp { port: 8472 });
        assert_eq!(v.tunnel_len(), 8 + 8 + 14);
    }
}
