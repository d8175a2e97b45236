//! IP-in-IP (RFC 2003, RFC 2473): no header of its own; the outer
//! header's protocol is the inner packet's family (4 or 41), so IPv4 and
//! IPv6 ride in either outer family. A Linux backend decapsulates it with
//! `ipip`/`sit` (outer IPv4) or `ip6tnl` (outer IPv6) devices.

use super::tunnel::{Carrier, Tunnel};
use crate::drop_reason::DropReason;
use crate::wire::ethernet::MacAddr;

/// IP-in-IP: no keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ipip;

impl Tunnel for Ipip {
    const NAME: &'static str = "ipip";
    const DEFAULT: Self = Ipip;
    const HEADER_LEN: usize = 0;

    #[inline(always)]
    fn carrier(self) -> Carrier {
        Carrier::InnerFamily
    }

    #[inline(always)]
    fn emit(self, _: &mut [u8], _: u16, _: MacAddr) -> Result<(), DropReason> {
        Ok(())
    }
}
