//! What a data-path probe's timeout means: the workers report what they
//! saw of its socket (`sluice_core::probe_path::Seen`), and the verdict
//! names where along the path it stopped — which an operator acts on,
//! where "timeout" says nothing.

use sluice_core::probe_path::Seen;

use super::failure::FailureReason;

/// What is known of a data-path run in flight: what the workers saw of
/// its socket, and whether its transport came up (a stream's handshake
/// completed).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PathReport {
    pub seen: Seen,
    pub connected: bool,
}

/// Why a data-path probe that got no verdict in time failed.
pub fn timeout_reason(report: PathReport) -> FailureReason {
    let PathReport { seen, connected } = report;
    if connected {
        // The path works both ways: the server is slow or silent.
        FailureReason::Timeout
    } else if seen.answer_from_backend {
        FailureReason::AnsweredFromBackendAddress
    } else if seen.answer_from_other {
        FailureReason::AnsweredFromElsewhere
    } else if seen.answer_from_vip {
        // The answer came, from the VIP, and the socket never saw it.
        FailureReason::AnswerNotTaken
    } else if seen.too_big {
        FailureReason::TooBig
    } else if seen.sent {
        FailureReason::NoAnswer
    } else if seen.not_sent {
        FailureReason::NotSent
    } else {
        FailureReason::NotRouted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each stop along the path has its own reason; an answer from the
    /// wrong address wins over what else was seen; once connected, the
    /// path is not what failed.
    #[test]
    fn hc_9_each_stop_along_the_path_has_its_reason() {
        let r = |seen| {
            timeout_reason(PathReport {
                seen,
                connected: false,
            })
        };
        let s = Seen::default();
        assert_eq!(r(s), FailureReason::NotRouted);
        let not_sent = Seen {
            not_sent: true,
            ..s
        };
        assert_eq!(r(not_sent), FailureReason::NotSent);
        let sent = Seen { sent: true, ..s };
        assert_eq!(r(sent), FailureReason::NoAnswer);
        let big = Seen {
            too_big: true,
            ..sent
        };
        assert_eq!(r(big), FailureReason::TooBig);
        let from_vip = Seen {
            answer_from_vip: true,
            ..sent
        };
        assert_eq!(r(from_vip), FailureReason::AnswerNotTaken);
        let wrong = Seen {
            answer_from_backend: true,
            ..from_vip
        };
        assert_eq!(r(wrong), FailureReason::AnsweredFromBackendAddress);
        let other = Seen {
            answer_from_other: true,
            ..sent
        };
        assert_eq!(r(other), FailureReason::AnsweredFromElsewhere);
        let up = PathReport {
            seen: from_vip,
            connected: true,
        };
        assert_eq!(timeout_reason(up), FailureReason::Timeout);
    }
}
