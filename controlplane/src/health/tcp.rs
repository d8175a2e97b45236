//! HC-1's TCP probe: a SYN-ACK within the timeout is a success; an RST or
//! an ICMP destination unreachable is a failure at once; silence times
//! out. The shell answers the SYN-ACK with RST, so no handshake completes
//! (see [`super::halfopen`] for the raw SYN it sends when it can).

use std::net::SocketAddr;
use std::time::Instant;

use super::driver::{tcp_failure, Input, Probe, Step, Transport};
use super::state::{ProbeResult, WeightReport};
use crate::config::TcpCheck;

#[derive(Debug, Default)]
pub struct TcpProbe;

impl TcpProbe {
    /// A TCP check has nothing to configure: the handshake decides.
    pub fn new(_: &TcpCheck, _: SocketAddr) -> Self {
        TcpProbe
    }
}

impl Probe for TcpProbe {
    fn start(&mut self, _now: Instant) -> Transport {
        Transport::Handshake
    }

    fn on_input(&mut self, input: Input<'_>, _now: Instant) -> Step {
        if input == Input::Connected {
            return Step::Done(ProbeResult::Success {
                weight: WeightReport::NotApplicable,
            });
        }
        tcp_failure(input).map_or(Step::Wait, Step::fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::failure::FailureReason;

    /// HC-1: SYN-ACK → success; RST, ICMP unreachable → failure at once,
    /// each under its reason; silence → timeout.
    #[test]
    fn hc_1_verdicts() {
        let now = Instant::now();
        let verdict = |input| {
            let mut p = TcpProbe;
            assert_eq!(p.start(now), Transport::Handshake);
            p.on_input(input, now)
        };
        assert_eq!(
            verdict(Input::Connected),
            Step::Done(ProbeResult::Success {
                weight: WeightReport::NotApplicable
            })
        );
        assert_eq!(verdict(Input::Refused), Step::fail(FailureReason::Refused));
        assert_eq!(
            verdict(Input::Unreachable),
            Step::fail(FailureReason::Unreachable)
        );
        assert_eq!(
            TcpProbe.on_timeout(now),
            ProbeResult::Failure(FailureReason::Timeout)
        );
    }
}
