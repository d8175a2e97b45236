//! GRE (RFC 2784): the basic 4-byte header — no checksum, key or sequence
//! number — whose protocol type is the inner packet's ethertype. A Linux
//! backend decapsulates it with a `gre` (outer IPv4) or `ip6gre` (outer
//! IPv6) device, or the fallback `gre0`/`ip6gre0`.

use super::tunnel::{Carrier, Tunnel};
use crate::drop_reason::DropReason;
use crate::wire::ethernet::MacAddr;
use crate::wire::gre::{self, GreRepr};
use crate::wire::proto::GRE;

/// GRE: no keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gre;

impl Tunnel for Gre {
    const NAME: &'static str = "gre";
    const DEFAULT: Self = Gre;
    const HEADER_LEN: usize = gre::HEADER_LEN;

    #[inline(always)]
    fn carrier(self) -> Carrier {
        Carrier::Protocol(GRE)
    }

    #[inline(always)]
    fn emit(self, hdr: &mut [u8], inner_ethertype: u16, _: MacAddr) -> Result<(), DropReason> {
        let h = hdr
            .first_chunk_mut::<{ gre::HEADER_LEN }>()
            .ok_or(DropReason::NoHeadroom)?;
        GreRepr {
            protocol_type: inner_ethertype,
        }
        .emit(h);
        Ok(())
    }
}
