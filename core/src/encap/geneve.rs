//! GENEVE (RFC 8926): the 8-byte base header without options (layout in
//! `wire::geneve`), over UDP to `geneve_port` (6081, IANA's GENEVE port,
//! by default).
//!
//! Version 0, Opt Len 0, O (control) and C (critical options) clear: a
//! data packet with nothing for the receiver to interpret beyond the VNI
//! (`geneve_vni`, 24 bits, default 0).
//!
//! *Protocol Type* is the inner packet's ethertype, 0x0800 or 0x86DD: the
//! client's IP packet follows the header directly, as in every other
//! tunnel here. The alternative, 0x6558 (an Ethernet frame), would need an
//! inner Ethernet header whose destination is each backend's tunnel
//! device MAC, which the appliance does not know, and 14 bytes more per
//! packet. A Linux backend decapsulates IP payloads with a `geneve` device
//! created with `innerprotoinherit` (Linux 5.18 and later; without it a
//! `geneve` device drops everything but 0x6558), e.g.
//! `ip link add gnv0 type geneve id 0 remote <appliance> innerprotoinherit`;
//! gateway load balancers hand appliances IP payloads the same way.
//!
//! The UDP header is the carrier's (`udp.rs`): source port from the flow
//! hash (RFC 8926 §3.3: a hash of the inner headers, for ECMP entropy),
//! checksum 0 over IPv4 and computed over IPv6, where a zero one needs both
//! ends configured for it (RFC 6935, 6936). The outer IPv4 DF is copied
//! from the inner packet as for every tunnel (`outer.rs`): §4.4.1 recommends
//! DF always, but ICMP about the outer packet would reach the appliance,
//! not the client, so a packet without DF beyond a smaller link would be
//! lost instead of fragmented.

use super::tunnel::{Carrier, ConfigKey, Tunnel};
use crate::drop_reason::DropReason;
use crate::wire::ethernet::MacAddr;
use crate::wire::geneve::{GeneveRepr, HEADER_LEN, VNI_MASK};

/// `geneve_port`: the UDP destination port.
const PORT: ConfigKey = ConfigKey::int("geneve_port", DEFAULT_PORT as u32, 1, 65535);

/// IANA's GENEVE port.
const DEFAULT_PORT: u16 = 6081;

/// `geneve_vni`: the Virtual Network Identifier, 24 bits.
const VNI: ConfigKey = ConfigKey::int("geneve_vni", 0, 0, VNI_MASK);

/// GENEVE to a UDP port, in one virtual network.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Geneve {
    pub port: u16,
    /// 24 bits.
    pub vni: u32,
}

impl Tunnel for Geneve {
    const NAME: &'static str = "geneve";
    const KEYS: &'static [ConfigKey] = &[PORT, VNI];
    const DEFAULT: Self = Geneve {
        port: DEFAULT_PORT,
        vni: 0,
    };
    const HEADER_LEN: usize = HEADER_LEN;

    #[inline(always)]
    fn carrier(self) -> Carrier {
        Carrier::Udp { port: self.port }
    }

    #[inline(always)]
    fn emit(self, hdr: &mut [u8], inner_ethertype: u16, _: MacAddr) -> Result<(), DropReason> {
        let h = hdr
            .first_chunk_mut::<HEADER_LEN>()
            .ok_or(DropReason::NoHeadroom)?;
        GeneveRepr {
            protocol_type: inner_ethertype,
            vni: self.vni,
        }
        .emit(h);
        Ok(())
    }

    fn configure(self, value: &mut impl FnMut(&ConfigKey) -> u64) -> Self {
        Geneve {
            port: u16::try_from(value(&PORT)).unwrap_or(self.port),
            vni: u32::try_from(value(&VNI) & u64::from(VNI_MASK)).unwrap_or(self.vni),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

    /// RFC 8926 §3.4 field by field: Ver (2 bits) and Opt Len (6) in the
    /// first byte, O, C and 6 reserved bits in the second, Protocol Type,
    /// then the VNI's 24 bits and a reserved byte.
    #[test]
    fn base_header_bytes_follow_rfc_8926() {
        let mut h = [0xffu8; HEADER_LEN];
        let g = Geneve {
            port: 6081,
            vni: 0x12_3456,
        };
        g.emit(&mut h, ETHERTYPE_IPV4, [0; 6]).unwrap();
        assert_eq!(h, [0x00, 0x00, 0x08, 0x00, 0x12, 0x34, 0x56, 0x00]);
        let ver = h[0] >> 6;
        let opt_len_words = h[0] & 0x3f;
        let (o, c) = (h[1] & 0x80 != 0, h[1] & 0x40 != 0);
        assert_eq!(
            (ver, opt_len_words, o, c, h[1] & 0x3f),
            (0, 0, false, false, 0)
        );
        let vni = u32::from_be_bytes([0, h[4], h[5], h[6]]);
        assert_eq!((vni, h[7]), (0x12_3456, 0));

        g.emit(&mut h, ETHERTYPE_IPV6, [0; 6]).unwrap();
        assert_eq!(&h[2..4], &[0x86, 0xdd]);
        assert_eq!(
            g.emit(&mut [0u8; HEADER_LEN - 1], ETHERTYPE_IPV4, [0; 6]),
            Err(DropReason::NoHeadroom)
        );
    }

    #[test]
    fn carrier_is_udp_to_the_configured_port() {
        let g = Geneve::DEFAULT.configure(&mut |k| match k.name {
            "geneve_port" => 7000,
            _ => u64::from(VNI_MASK),
        });
        assert_eq!(
            g,
            Geneve {
                port: 7000,
                vni: 0xff_ffff
            }
        );
        assert_eq!(g.carrier(), Carrier::Udp { port: 7000 });
        assert_eq!(g.tunnel_len(), 16);
        assert_eq!(Geneve::DEFAULT, Geneve { port: 6081, vni: 0 });
    }
}
