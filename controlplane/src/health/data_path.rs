//! What a data-path probe's timeout means: the workers report what they
//! saw of its socket (`sluice_core::probe_path::Seen`), and the verdict
//! names where along the path it stopped — which an operator acts on,
//! where "timeout" says nothing.

use sluice_core::probe_path::Seen;

use super::failure::FailureReason;

/// Why a data-path probe that got no verdict in time failed, from what
/// the workers saw of it.
pub fn timeout_reason(seen: Seen) -> FailureReason {
    if seen.answer_from_backend {
        FailureReason::AnsweredFromBackendAddress
    } else if seen.answer_from_other {
        FailureReason::AnsweredFromElsewhere
    } else if seen.answer_from_vip {
        // The answer came, from the VIP, and the socket still had no
        // verdict: the kernel did not hand it over (its reverse-path
        // filter on the TAP), or the server went quiet after connecting.
        FailureReason::Timeout
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

    /// Each stage of the path names its own reason; an answer from the
    /// wrong address wins over what else was seen.
    #[test]
    fn each_stop_along_the_path_has_its_reason() {
        let s = Seen::default();
        assert_eq!(timeout_reason(s), FailureReason::NotRouted);
        let not_sent = Seen {
            not_sent: true,
            ..s
        };
        assert_eq!(timeout_reason(not_sent), FailureReason::NotSent);
        let sent = Seen { sent: true, ..s };
        assert_eq!(timeout_reason(sent), FailureReason::NoAnswer);
        let big = Seen {
            sent: true,
            too_big: true,
            ..s
        };
        assert_eq!(timeout_reason(big), FailureReason::TooBig);
        let from_vip = Seen {
            answer_from_vip: true,
            ..sent
        };
        assert_eq!(timeout_reason(from_vip), FailureReason::Timeout);
        let wrong = Seen {
            answer_from_backend: true,
            answer_from_vip: true,
            ..sent
        };
        assert_eq!(
            timeout_reason(wrong),
            FailureReason::AnsweredFromBackendAddress
        );
        let other = Seen {
            answer_from_other: true,
            ..sent
        };
        assert_eq!(timeout_reason(other), FailureReason::AnsweredFromElsewhere);
    }
}
