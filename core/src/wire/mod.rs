//! Zero-copy, bounds-checked protocol views and emitters, one file per
//! protocol (smoltcp style), and the Internet checksum they share.
//!
//! A view (`Ipv4Packet<T>`, `Ipv6Packet<T>`, `IcmpPacket<T>`, …) wraps any
//! buffer `T: AsRef<[u8]>`; with `T: AsMut<[u8]>` as well it also writes.
//! `new_checked` validates the buffer once (lengths, version, the lengths
//! the header announces); every getter and setter then reads or writes its
//! field at a constant offset from the protocol's `offset` module inside
//! the fixed-size header array, through [`field`]/[`put`], whose bounds
//! are proven at compile time. Nothing here allocates or panics: a view
//! made with `new_unchecked` over a buffer too short for its header reads
//! zeros and writes nothing. Emitters (`*Repr::emit`) write whole headers
//! into fixed-size arrays for the same reason. Checksums — folding,
//! combining partial sums, pseudo-headers, incremental update — are
//! computed in [`checksum`] only.

pub mod checksum;
pub(crate) mod ethernet;
pub(crate) mod geneve;
pub(crate) mod gre;
pub(crate) mod gue;
pub mod icmp;
pub mod ipv4;
pub(crate) mod ipv6;
pub(crate) mod ipv6_ext;
pub(crate) mod parse;
pub mod tcp;
pub(crate) mod udp;
#[cfg(test)]
mod views_tests;
pub(crate) mod vxlan;

pub(crate) use parse::datagram_ident;
pub use parse::{parse, Fragment, IpInfo, L3Layout, ParseError, Parsed, Ports};

/// IANA protocol numbers the dataplane cares about.
pub mod proto {
    pub(crate) const HOP_BY_HOP: u8 = 0;
    pub(crate) const ICMP: u8 = 1;
    pub(crate) const IPV4_IN_IP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub(crate) const IPV6_IN_IP: u8 = 41;
    pub(crate) const IPV6_ROUTING: u8 = 43;
    pub(crate) const IPV6_FRAGMENT: u8 = 44;
    pub(crate) const GRE: u8 = 47;
    pub(crate) const ESP: u8 = 50;
    pub(crate) const AH: u8 = 51;
    pub(crate) const ICMPV6: u8 = 58;
    pub(crate) const IPV6_DEST_OPTS: u8 = 60;
}

/// Why a view could not be built over a buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before the header (or the length it announces) does.
    Truncated,
    /// A field holds a value the protocol forbids (version, IHL, offset…).
    Malformed,
    /// An IPv6 extension-header chain is longer than the walk allows.
    TooManyHeaders,
}

/// Copies `N` bytes at constant offset `AT` out of a fixed-size header.
///
/// The inline const assertion turns an out-of-range field into a compile
/// error, so the slice below can never panic at run time.
#[inline(always)]
pub(crate) fn field<const AT: usize, const N: usize, const L: usize>(h: &[u8; L]) -> [u8; N] {
    const { assert!(AT + N <= L) };
    let mut out = [0u8; N];
    out.copy_from_slice(&h[AT..AT + N]);
    out
}

/// Writes `N` bytes at constant offset `AT` into a fixed-size header.
#[inline(always)]
pub(crate) fn put<const AT: usize, const N: usize, const L: usize>(h: &mut [u8; L], v: [u8; N]) {
    const { assert!(AT + N <= L) };
    h[AT..AT + N].copy_from_slice(&v);
}

/// The byte at constant offset `AT` of a fixed-size header.
#[inline(always)]
pub(crate) fn get_u8<const AT: usize, const L: usize>(h: &[u8; L]) -> u8 {
    let [b] = field::<AT, 1, L>(h);
    b
}

/// The big-endian 16-bit field at constant offset `AT`.
#[inline(always)]
pub(crate) fn get_u16<const AT: usize, const L: usize>(h: &[u8; L]) -> u16 {
    u16::from_be_bytes(field::<AT, 2, L>(h))
}

/// The big-endian 32-bit field at constant offset `AT`.
#[inline(always)]
pub(crate) fn get_u32<const AT: usize, const L: usize>(h: &[u8; L]) -> u32 {
    u32::from_be_bytes(field::<AT, 4, L>(h))
}

/// Writes the byte at constant offset `AT`.
#[inline(always)]
pub(crate) fn set_u8<const AT: usize, const L: usize>(h: &mut [u8; L], v: u8) {
    put::<AT, 1, L>(h, [v]);
}

/// Writes `v` big-endian at constant offset `AT`.
#[inline(always)]
pub(crate) fn set_u16<const AT: usize, const L: usize>(h: &mut [u8; L], v: u16) {
    put::<AT, 2, L>(h, v.to_be_bytes());
}

/// Writes `v` big-endian at constant offset `AT`.
#[inline(always)]
pub(crate) fn set_u32<const AT: usize, const L: usize>(h: &mut [u8; L], v: u32) {
    put::<AT, 4, L>(h, v.to_be_bytes());
}
