//! One pass over a received frame: Ethernet (+VLAN) → IPv4/IPv6 (+ext
//! headers) → TCP/UDP ports, summarised as a `Copy` value that borrows
//! nothing, so the caller can rewrite the packet afterwards.

use std::net::IpAddr;

use super::ethernet::{EthernetFrame, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ipv4::Ipv4Packet;
use super::ipv6::{self, Ipv6Packet};
use super::ipv6_ext::{self, Ipv6FragInfo};
use super::proto::{ICMP, ICMPV6, TCP, UDP};
use super::tcp::TcpSegment;
use super::udp::UdpDatagram;
use super::Error;
use crate::drop_reason::DropReason;

/// Why a frame could not be parsed; one variant per layer so that drops are
/// counted where the damage is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    TruncatedEthernet,
    UnknownEthertype,
    BadIpv4Header,
    BadIpv6Header,
    BadIpv6ExtensionHeader,
    BadL4Header,
}

impl ParseError {
    pub(crate) const fn drop_reason(self) -> DropReason {
        match self {
            ParseError::TruncatedEthernet => DropReason::TruncatedEthernet,
            ParseError::UnknownEthertype => DropReason::UnknownEthertype,
            ParseError::BadIpv4Header => DropReason::BadIpv4Header,
            ParseError::BadIpv6Header => DropReason::BadIpv6Header,
            ParseError::BadIpv6ExtensionHeader => DropReason::BadIpv6ExtensionHeader,
            ParseError::BadL4Header => DropReason::BadL4Header,
        }
    }
}

impl From<ParseError> for DropReason {
    fn from(e: ParseError) -> Self {
        e.drop_reason()
    }
}

/// Fragment status (HA-2).
// Public for core/tests/parse.rs, flow.rs and proptest.rs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// Not fragmented.
    No,
    /// Offset 0 with more to come (IPv4 MF), or any IPv6 Fragment header at
    /// offset 0 (atomic fragments included). Carries the L4 header.
    First,
    /// Non-zero offset: no L4 header, no ports (FR-4).
    Later,
}

impl Fragment {
    /// HA-2: the first fragment counts as fragmented too.
    // Public for core/tests/proptest.rs.
    pub fn is_fragmented(self) -> bool {
        self != Fragment::No
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ports {
    pub src: u16,
    pub dst: u16,
}

/// What the pipeline needs to know about an IP packet.
// Every field public: core/tests (flow.rs, parse.rs) build and read it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IpInfo {
    /// 0x0800 or 0x86DD (after any VLAN tags).
    pub ethertype: u16,
    /// Offset of the IP header in the frame (14, 18 or 22).
    pub l3_offset: usize,
    /// IP header + payload, excluding Ethernet padding.
    pub ip_len: usize,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub protocol: u8,
    /// Offset of the upper-layer header in the frame.
    pub l4_offset: usize,
    pub fragment: Fragment,
    /// IPv4 DF; always true for IPv6 (routers never fragment it).
    pub dont_fragment: bool,
    /// TCP/UDP ports, present unless a non-first fragment.
    pub ports: Option<Ports>,
    /// TCP flag byte (0 for other protocols).
    pub tcp_flags: u8,
    /// ICMP/ICMPv6 type, when the packet is one and carries it.
    pub icmp_type: Option<u8>,
}

/// Where the IP packet sits in the frame: all that encapsulation needs.
/// Small and free of `IpAddr`s (whose 17-byte, align-1 layout the compiler
/// copies byte by byte), so the worker carries it from stage 1 to stage 2
/// of a burst cheaply.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct L3Layout {
    /// 0x0800 or 0x86DD.
    pub(crate) ethertype: u16,
    /// Offset of the IP header in the frame.
    pub(crate) l3_offset: usize,
    /// IP header + payload, excluding Ethernet padding.
    pub(crate) ip_len: usize,
    /// IPv4 DF; always true for IPv6.
    pub(crate) dont_fragment: bool,
}

impl L3Layout {
    /// An IPv4 packet at `l3_offset` in the frame, `ip_len` bytes long.
    #[inline(always)]
    pub(crate) const fn ipv4(l3_offset: usize, ip_len: usize, dont_fragment: bool) -> Self {
        L3Layout {
            ethertype: ETHERTYPE_IPV4,
            l3_offset,
            ip_len,
            dont_fragment,
        }
    }
}

impl From<&IpInfo> for L3Layout {
    fn from(ip: &IpInfo) -> Self {
        Self {
            ethertype: ip.ethertype,
            l3_offset: ip.l3_offset,
            ip_len: ip.ip_len,
            dont_fragment: ip.dont_fragment,
        }
    }
}

impl From<&L3Layout> for L3Layout {
    fn from(l: &L3Layout) -> Self {
        *l
    }
}

/// A successfully parsed frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// ARP: for the exception path; not parsed further.
    Arp,
    Ip(IpInfo),
}

/// Parses a frame. Never panics, never allocates.
// Inlined into the packet loop so the `IpInfo` is built where it is used
// instead of being copied out through two `Result`s (perf showed that copy).
#[inline(always)]
pub fn parse(frame: &[u8]) -> Result<Parsed, ParseError> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| ParseError::TruncatedEthernet)?;
    let l3_offset = eth.header_len();
    match eth.ethertype() {
        ETHERTYPE_ARP => Ok(Parsed::Arp),
        ETHERTYPE_IPV4 => parse_ipv4(eth.payload(), l3_offset).map(Parsed::Ip),
        ETHERTYPE_IPV6 => parse_ipv6(eth.payload(), l3_offset).map(Parsed::Ip),
        _ => Err(ParseError::UnknownEthertype),
    }
}

#[inline(always)]
fn parse_ipv4(buf: &[u8], l3_offset: usize) -> Result<IpInfo, ParseError> {
    let ip = Ipv4Packet::new_checked(buf).map_err(|_| ParseError::BadIpv4Header)?;
    let fragment = match (ip.frag_offset(), ip.more_frags()) {
        (0, false) => Fragment::No,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    let mut info = IpInfo {
        ethertype: ETHERTYPE_IPV4,
        l3_offset,
        ip_len: usize::from(ip.total_len()),
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        protocol: ip.protocol(),
        l4_offset: l3_offset + ip.header_len(),
        fragment,
        dont_fragment: ip.dont_frag(),
        ports: None,
        tcp_flags: 0,
        icmp_type: None,
    };
    if fragment != Fragment::Later {
        parse_l4(&mut info, ip.payload(), ICMP)?;
    }
    Ok(info)
}

fn parse_ipv6(buf: &[u8], l3_offset: usize) -> Result<IpInfo, ParseError> {
    let ip = Ipv6Packet::new_checked(buf).map_err(|_| ParseError::BadIpv6Header)?;
    let upper = ipv6_ext::walk(ip.next_header(), ip.payload())
        .map_err(|_| ParseError::BadIpv6ExtensionHeader)?;
    let fragment = match upper.fragment {
        None => Fragment::No,
        Some(Ipv6FragInfo { offset: 0, .. }) => Fragment::First,
        Some(_) => Fragment::Later,
    };
    let mut info = IpInfo {
        ethertype: ETHERTYPE_IPV6,
        l3_offset,
        ip_len: ip.total_len(),
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        protocol: upper.protocol,
        l4_offset: l3_offset + ipv6::HEADER_LEN + upper.offset,
        fragment,
        dont_fragment: true,
        ports: None,
        tcp_flags: 0,
        icmp_type: None,
    };
    if fragment != Fragment::Later {
        // The walk proved `upper.offset` is within the payload.
        let l4 = ip.payload().get(upper.offset..).unwrap_or(&[]);
        parse_l4(&mut info, l4, ICMPV6)?;
    }
    // HA-2: every fragment of a datagram must show the same protocol, and
    // a non-first fragment shows only the Fragment header's next header.
    // When extension headers follow the Fragment header (destination
    // options in the fragmentable part), the first fragment reports that
    // value too, not the upper layer behind them (whose ports it keeps).
    if let Some(f) = upper.fragment {
        info.protocol = f.next;
    }
    Ok(info)
}

/// Fills ports/flags/ICMP type. `icmp` is the ICMP protocol number of this
/// IP version, so ICMPv6 inside IPv4 is not mistaken for ICMP.
#[inline(always)]
fn parse_l4(info: &mut IpInfo, l4: &[u8], icmp: u8) -> Result<(), ParseError> {
    let bad = |_: Error| ParseError::BadL4Header;
    match info.protocol {
        TCP => {
            let t = TcpSegment::new_checked(l4).map_err(bad)?;
            info.ports = Some(Ports {
                src: t.src_port(),
                dst: t.dst_port(),
            });
            info.tcp_flags = t.flags();
        }
        UDP => {
            let u = UdpDatagram::new_checked(l4).map_err(bad)?;
            info.ports = Some(Ports {
                src: u.src_port(),
                dst: u.dst_port(),
            });
        }
        p if p == icmp => info.icmp_type = l4.first().copied(),
        _ => {}
    }
    Ok(())
}

/// The identification every fragment of a datagram carries: IPv4's
/// Identification, or the IPv6 Fragment header's. None when the packet
/// at `layout` in `frame` is not a fragment it can read.
pub(crate) fn datagram_ident(frame: &[u8], layout: &L3Layout) -> Option<u32> {
    let ip = frame.get(layout.l3_offset..)?;
    if layout.ethertype == ETHERTYPE_IPV6 {
        let p = Ipv6Packet::new_checked(ip).ok()?;
        let upper = ipv6_ext::walk(p.next_header(), p.payload()).ok()?;
        upper.fragment.map(|f| f.ident)
    } else {
        let p = Ipv4Packet::new_checked(ip).ok()?;
        Some(u32::from(p.ident()))
    }
}
