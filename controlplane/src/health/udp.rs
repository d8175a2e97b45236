//! The UDP probe: one datagram (`request`) to the backend's port from a
//! fresh socket connected to it; the first reply decides.
//!
//! - A reply within the timeout passes; with `response` set it must
//!   contain those bytes, else the probe fails (`response_mismatch`).
//! - An ICMP port unreachable fails at once (`port_unreachable`): the
//!   kernel reports it on the connected socket as ECONNREFUSED.
//! - Other ICMP errors the kernel reports on a connected socket (protocol
//!   unreachable, administratively prohibited…) fail at once
//!   (`unreachable`); host and network unreachable, which Linux treats as
//!   transient, are not reported and end in a timeout, as does silence.
//!
//! A fresh socket per run (a new source port) means a late reply to an
//! earlier run never counts for this one.

use std::net::SocketAddr;
use std::time::Instant;

use super::driver::{Input, Probe, Step, Transport};
use super::failure::FailureReason;
use super::state::{ProbeResult, WeightReport};
use crate::config::UdpCheck;

#[derive(Debug)]
pub struct UdpProbe {
    request: Vec<u8>,
    response: Option<Vec<u8>>,
}

impl UdpProbe {
    /// The check's datagram; the socket, connected to the backend, is
    /// the shell's.
    pub fn new(check: &UdpCheck, _: SocketAddr) -> Self {
        Self {
            request: check.request.clone(),
            response: check.response.clone(),
        }
    }
}

impl Probe for UdpProbe {
    fn start(&mut self, _now: Instant) -> Transport {
        Transport::Datagram
    }

    fn on_input(&mut self, input: Input<'_>, _now: Instant) -> Step {
        match input {
            Input::Connected => Step::Send(std::mem::take(&mut self.request)),
            Input::Data(reply) => {
                if self
                    .response
                    .as_deref()
                    .is_none_or(|want| contains(reply, want))
                {
                    Step::Done(ProbeResult::Success {
                        weight: WeightReport::NotApplicable,
                    })
                } else {
                    Step::fail(FailureReason::ResponseMismatch)
                }
            }
            Input::Refused => Step::fail(FailureReason::PortUnreachable),
            Input::Unreachable => Step::fail(FailureReason::Unreachable),
            Input::LocalError => Step::fail(FailureReason::LocalError),
            // Stream events: not on a datagram socket.
            Input::Closed | Input::Reset => Step::Wait,
        }
    }
}

/// `needle` occurs in `haystack` (an empty needle always does).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(request: &[u8], response: Option<&[u8]>) -> UdpProbe {
        let check = UdpCheck {
            request: request.to_vec(),
            response: response.map(<[u8]>::to_vec),
        };
        UdpProbe::new(&check, "192.0.2.1:53".parse().unwrap())
    }

    fn run(response: Option<&[u8]>, inputs: &[Input<'_>]) -> Vec<Step> {
        let now = Instant::now();
        let mut p = probe(b"ping", response);
        assert_eq!(p.start(now), Transport::Datagram);
        inputs.iter().map(|&i| p.on_input(i, now)).collect()
    }

    const PASS: Step = Step::Done(ProbeResult::Success {
        weight: WeightReport::NotApplicable,
    });

    /// The request goes out once the socket is connected; any reply passes
    /// without `response`; with it, the reply must contain it.
    #[test]
    fn udp_reply_and_response_match() {
        let sent = Step::Send(b"ping".to_vec());
        assert_eq!(
            run(None, &[Input::Connected, Input::Data(b"")]),
            [sent.clone(), PASS]
        );
        assert_eq!(
            run(Some(b"pong"), &[Input::Connected, Input::Data(b"<pong>\n")]),
            [sent.clone(), PASS]
        );
        assert_eq!(
            run(Some(b"pong"), &[Input::Connected, Input::Data(b"pon")]),
            [sent, Step::fail(FailureReason::ResponseMismatch)]
        );
    }

    /// ICMP port unreachable (ECONNREFUSED) and other reported ICMP errors
    /// fail at once, each under its reason; silence times out.
    #[test]
    fn udp_icmp_errors_and_timeout() {
        assert_eq!(
            run(None, &[Input::Connected, Input::Refused])[1],
            Step::fail(FailureReason::PortUnreachable)
        );
        assert_eq!(
            run(None, &[Input::Connected, Input::Unreachable])[1],
            Step::fail(FailureReason::Unreachable)
        );
        assert_eq!(
            probe(b"x", None).on_timeout(Instant::now()),
            ProbeResult::Failure(FailureReason::Timeout)
        );
    }
}
