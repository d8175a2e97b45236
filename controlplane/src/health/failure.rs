//! Why a probe failed. Every failed probe is counted under exactly one
//! reason, exported as `sluice_backend_probe_failures_total{reason="…"}`
//! and shown by `sluice status` while a backend's latest probe failed.

macro_rules! failure_reasons {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*) => {
        /// A named reason for a failed probe.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum FailureReason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl FailureReason {
            /// Every reason, in counter-index order.
            pub const ALL: &'static [FailureReason] = &[$(FailureReason::$variant,)*];
            pub const COUNT: usize = Self::ALL.len();

            /// The metric label and status word: stable, snake_case.
            pub const fn name(self) -> &'static str {
                match self {
                    $(FailureReason::$variant => $name,)*
                }
            }

            pub const fn index(self) -> usize {
                self as usize
            }
        }
    };
}

failure_reasons! {
    /// No verdict within `timeout` (HC-3): an unanswered SYN, a silent
    /// HTTP server, a UDP request nobody answered.
    Timeout => "timeout",
    /// TCP and HTTP: the backend answered the SYN with RST (nothing
    /// listens on the port).
    Refused => "refused",
    /// UDP: an ICMP port unreachable came back (nothing listens on the
    /// port); the connected socket's next receive reports ECONNREFUSED.
    PortUnreachable => "port_unreachable",
    /// An ICMP destination unreachable other than a UDP port unreachable
    /// (host, network, administratively prohibited), or no route.
    Unreachable => "unreachable",
    /// HTTP: the connection was reset, or the request could not be
    /// written, before a response head arrived.
    Reset => "reset",
    /// HTTP: no status line in the response head (closed early, garbage,
    /// or a head longer than 8 KiB).
    BadResponse => "bad_response",
    /// HTTP: a status code outside `response_codes` (HC-2).
    HttpStatus => "http_status",
    /// UDP: the reply does not contain the configured `response`.
    ResponseMismatch => "response_mismatch",
    /// The probe could not run on this host: no socket, no free port, a
    /// send refused locally.
    LocalError => "local_error",
    /// Data path: the probe's packets never reached the workers (the
    /// kernel's route for probes through the port's TAP is missing, or the
    /// port has no TAP or no address of the VIP's family).
    NotRouted => "not_routed",
    /// Data path: the workers could not send the probe to the backend
    /// (next hop unresolved, the backend gone from the tables): see
    /// `sluice_dropped_packets_total`.
    NotSent => "not_sent",
    /// Data path: a probe packet was beyond the egress MTU once
    /// encapsulated.
    TooBig => "too_big",
    /// Data path: the probe went out to the backend and nothing came back
    /// to the appliance — the backend does not take the VIP (not bound on
    /// its loopback), cannot decapsulate (no tunnel device, wrong VXLAN
    /// MAC), drops it (`rp_filter`), or sends its answer elsewhere.
    NoAnswer => "no_answer",
    /// Data path: the backend answered from the VIP, as it should, but the
    /// appliance's kernel did not take the answer: its reverse-path filter
    /// found no route to the VIP (sluice makes the TAP's filter loose; the
    /// appliance needs a route that covers the VIPs — a default route
    /// does).
    AnswerNotTaken => "answer_not_taken",
    /// Data path: the backend answered from its own address, not from the
    /// VIP: a client would drop that answer.
    AnsweredFromBackendAddress => "answered_from_backend_address",
    /// Data path: the answer came from an address that is neither the VIP
    /// nor the backend's (a NAT or another host on the way back).
    AnsweredFromElsewhere => "answered_from_elsewhere",
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Labels are distinct and indexes follow declaration order.
    #[test]
    fn names_are_distinct_and_indexes_dense() {
        let mut names: Vec<_> = FailureReason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FailureReason::COUNT);
        for (i, r) in FailureReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
