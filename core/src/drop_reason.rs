//! Why a packet was dropped. Every dropped packet is counted under exactly
//! one reason, exported as `sluice_dropped_packets_total{reason="…"}`.

macro_rules! drop_reasons {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*) => {
        /// A named reason for dropping a packet (a `Copy` value: no
        /// allocation on the packet path).
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl DropReason {
            /// Every reason, in counter-index order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];
            pub const COUNT: usize = Self::ALL.len();

            /// The metric label: stable, snake_case.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $name,)*
                }
            }

            #[inline]
            pub const fn index(self) -> usize {
                self as usize
            }
        }
    };
}

drop_reasons! {
    /// Frame shorter than its Ethernet (+VLAN) header.
    TruncatedEthernet => "truncated_ethernet",
    /// Ethertype neither IPv4, IPv6 nor anything the exception path takes.
    UnknownEthertype => "unknown_ethertype",
    /// IPv4 header too short, bad version/IHL, or total length beyond the
    /// frame; or, for a packet being fragmented (AP-3), a malformed option
    /// list or fragment offsets past the 13-bit field.
    BadIpv4Header => "bad_ipv4_header",
    /// IPv6 header too short or payload length beyond the frame.
    BadIpv6Header => "bad_ipv6_header",
    /// IPv6 extension-header chain malformed or longer than the walk allows.
    BadIpv6ExtensionHeader => "bad_ipv6_extension_header",
    /// TCP/UDP header truncated or malformed (e.g. TCP data offset < 5).
    BadL4Header => "bad_l4_header",
    /// Destination is neither a VIP nor the appliance (FR-3).
    NotForUs => "not_for_us",
    /// Destination is a VIP but no forwarding rule matches (FR-3).
    NoRule => "no_rule",
    /// The service has no eligible backend (empty table, EL-4).
    NoBackend => "no_backend",
    /// The chosen backend's next-hop MAC is not resolved yet.
    NextHopUnresolved => "next_hop_unresolved",
    /// The encapsulation cannot carry this packet (e.g. address families).
    EncapUnsupported => "encap_unsupported",
    /// Not enough headroom in the buffer to prepend the outer headers.
    NoHeadroom => "no_headroom",
    /// Packet (encapsulated: its outer packet) exceeds the egress MTU and
    /// neither an ICMP answer (DF / IPv6; refusals of the answer have their
    /// own reasons below) nor fragmentation (IPv4 without DF) is possible:
    /// it would need more than `fragment::MAX_FRAGMENTS` fragments, or the
    /// outer packet would pass 65,535 bytes (AP-3).
    MtuExceeded => "mtu_exceeded",
    /// `fragments = "follow_flow"`: a first fragment of a datagram whose
    /// first fragment was seen with other ports (its start rewritten: an
    /// overlap).
    FragmentOverlap => "fragment_overlap",
    /// `fragments = "follow_flow"`: a later fragment held for its
    /// datagram's first fragment, which did not come within
    /// `fragment_flows::HOLD_MS`.
    FragmentUnplaced => "fragment_unplaced",
    /// `fragments = "follow_flow"`: a later fragment before its first one
    /// while the worker already holds `fragment_flows::HELD` of them.
    FragmentHoldFull => "fragment_hold_full",
    /// A data-path health probe's packet came from the kernel through the
    /// TAP of another port than its backend's egress port (a reload moved
    /// the backend while the probe ran); the probe fails and runs again.
    ProbeWrongPort => "probe_wrong_port",
    /// Addressed to the appliance but no exception path is configured.
    NoExceptionPath => "no_exception_path",
    /// Addressed to the appliance, but the exception path's TAP queue was full.
    ExceptionQueueFull => "exception_queue_full",
    /// Addressed to the appliance on a worker without a TAP queue pair, but
    /// the ring to the worker that writes its packets to the TAP was full
    /// (AP-4).
    ExceptionRelayFull => "exception_relay_full",
    /// The ring to the worker owning the packet's tracking key was full.
    SteeringRingFull => "steering_ring_full",
    /// The egress TX queue was full.
    TxQueueFull => "tx_queue_full",
    /// A chained (multi-segment) mbuf: the pipeline handles contiguous
    /// packets only; size the mempool's data room above the port MTU.
    MultiSegment => "multi_segment",
    /// The packet arrived while the worker was shutting down.
    Shutdown => "shutdown",
    /// Too big for the egress MTU and no ICMP error may answer it (RFC 1122
    /// §3.2.2 / RFC 4443 §2.4: about an ICMP error, a non-first fragment,
    /// or from a broadcast, multicast or unspecified source).
    IcmpNotAllowed => "icmp_not_allowed",
    /// Too big for the egress MTU; the ICMP answer was suppressed by the
    /// worker's rate limit.
    IcmpRateLimited => "icmp_rate_limited",
    /// Too big for the egress MTU and fragmentable (IPv4 without DF, AP-3),
    /// but the mbuf pool had too few buffers for its fragments: the whole
    /// packet is dropped (no partial datagram is sent).
    FragmentAllocFailed => "fragment_alloc_failed",
    /// Received on a port configured with `vlan = N` without that 802.1Q
    /// tag as its outer tag (untagged, another VLAN, or an 802.1ad outer
    /// tag): it belongs to no network this port is on.
    WrongVlan => "wrong_vlan",
    /// A packet the worker's own bookkeeping could not place: a slot of the
    /// staged burst read out of range or never staged. Never expected; a
    /// non-zero count is a bug worth reporting with the configuration.
    Internal => "internal",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_indices_dense() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
