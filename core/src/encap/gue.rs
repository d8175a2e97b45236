//! Generic UDP Encapsulation (draft-ietf-intarea-gue), variant 0: a 4-byte
//! data header naming the inner packet's IP protocol (4 or 41), over UDP
//! to `gue_port`. A Linux backend decapsulates it with a `fou` receive
//! port in GUE mode (`ip fou add port 6080 gue`) and an `ipip`/`sit`
//! device.

use super::tunnel::{Carrier, ConfigKey, Tunnel};
use crate::drop_reason::DropReason;
use crate::wire::ethernet::MacAddr;
use crate::wire::ethernet::ETHERTYPE_IPV6;
use crate::wire::gue::{self, GueRepr};
use crate::wire::proto::{IPV4_IN_IP, IPV6_IN_IP};

/// `gue_port`: the UDP destination port.
const PORT: ConfigKey = ConfigKey::int("gue_port", DEFAULT_PORT as u32, 1, 65535);

/// The port Linux's `fou`/`gue` examples use; GUE has no IANA port.
const DEFAULT_PORT: u16 = 6080;

/// GUE to a UDP port.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gue {
    pub port: u16,
}

impl Tunnel for Gue {
    const NAME: &'static str = "gue";
    const KEYS: &'static [ConfigKey] = &[PORT];
    const DEFAULT: Self = Gue { port: DEFAULT_PORT };
    const HEADER_LEN: usize = gue::HEADER_LEN;

    #[inline(always)]
    fn carrier(self) -> Carrier {
        Carrier::Udp { port: self.port }
    }

    #[inline(always)]
    fn emit(self, hdr: &mut [u8], inner_ethertype: u16, _: MacAddr) -> Result<(), DropReason> {
        let h = hdr
            .first_chunk_mut::<{ gue::HEADER_LEN }>()
            .ok_or(DropReason::NoHeadroom)?;
        let protocol = if inner_ethertype == ETHERTYPE_IPV6 {
            IPV6_IN_IP
        } else {
            IPV4_IN_IP
        };
        GueRepr { protocol }.emit(h);
        Ok(())
    }

    fn configure(self, value: &mut impl FnMut(&ConfigKey) -> u64) -> Self {
        Gue {
            port: u16::try_from(value(&PORT)).unwrap_or(self.port),
        }
    }
}
