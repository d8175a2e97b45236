//! `type = "TCP"` (HC-1): a SYN answered by a SYN-ACK; no fields of its
//! own.

use super::kind::CheckType;
use crate::config::context::Ctx;
use crate::config::raw::RawHealthCheck;

/// A TCP check: the handshake alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcpCheck;

impl CheckType for TcpCheck {
    const NAME: &'static str = "TCP";
    const FIELDS: &'static [&'static str] = &[];

    fn validate(_: &mut Ctx<'_>, _: &RawHealthCheck, _: &str) -> Self {
        TcpCheck
    }
}
