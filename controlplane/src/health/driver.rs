//! The sans-IO probe interface: a driver turns network events into a
//! verdict and never touches a socket or the system clock.
//!
//! One run of a probe: [`Probe::start`] names the [`Transport`] the I/O
//! shell opens to the backend; the shell reports what happens on it as
//! [`Input`]s, each answered by a [`Step`]; the first [`Step::Done`] ends
//! the run and the shell closes its socket. If the run's deadline passes
//! first, the scheduler asks [`Probe::on_timeout`]. Time arrives as `now`
//! arguments, so a driver runs the same on the wall clock and on the
//! virtual time of the tests.
//!
//! A new probe kind is a driver file plus one line in `drivers.rs`'s
//! list (its configuration side is one file in `config/health_check/`);
//! it needs shell work only if it needs a transport the shell lacks.

use std::time::Instant;

use super::failure::FailureReason;
use super::state::ProbeResult;

/// What the shell opens for a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A TCP handshake that goes no further: a raw SYN when the shell can
    /// (HC-1's half-open probe), else a `connect()` closed with RST.
    Handshake,
    /// A TCP connection carrying [`Step::Send`] bytes and [`Input::Data`].
    Stream,
    /// A UDP socket connected to the backend, so only the backend's
    /// datagrams and ICMP errors about them reach it.
    Datagram,
}

/// An event on a run's transport, in protocol terms: the shell has
/// translated errno values and raw packets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// The transport is ready: SYN-ACK seen, `connect()` completed, or
    /// (datagram) the socket is connected.
    Connected,
    /// Stream bytes in arrival order, or one whole datagram.
    Data(&'a [u8]),
    /// The peer closed the stream (end of file).
    Closed,
    /// TCP RST in answer to the SYN, or ECONNREFUSED on a datagram socket
    /// (an ICMP port unreachable came back).
    Refused,
    /// ICMP destination unreachable (other than a datagram's port
    /// unreachable), or the kernel has no route.
    Unreachable,
    /// The established stream was reset, or a write found it closed.
    Reset,
    /// Any other socket error on this host.
    LocalError,
}

/// A driver's answer to an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No verdict yet: wait for more input or the deadline.
    Wait,
    /// Send these bytes (a stream write, or one datagram), then wait.
    Send(Vec<u8>),
    /// The verdict; the run is over.
    Done(ProbeResult),
}

impl Step {
    pub fn fail(reason: FailureReason) -> Self {
        Step::Done(ProbeResult::Failure(reason))
    }
}

/// One probe kind's protocol logic.
pub trait Probe {
    /// Begins a run at `now`: the transport the shell must open.
    fn start(&mut self, now: Instant) -> Transport;

    /// Advances the run on one event.
    fn on_input(&mut self, input: Input<'_>, now: Instant) -> Step;

    /// The run's deadline (`timeout`, HC-3) passed without a verdict.
    fn on_timeout(&mut self, _now: Instant) -> ProbeResult {
        ProbeResult::Failure(FailureReason::Timeout)
    }
}

/// The failure a transport error means for a TCP-based probe (HC-1: RST
/// and ICMP unreachable fail the probe at once).
pub fn tcp_failure(input: Input<'_>) -> Option<FailureReason> {
    match input {
        Input::Refused => Some(FailureReason::Refused),
        Input::Unreachable => Some(FailureReason::Unreachable),
        Input::Reset => Some(FailureReason::Reset),
        Input::LocalError => Some(FailureReason::LocalError),
        Input::Connected | Input::Data(_) | Input::Closed => None,
    }
}
