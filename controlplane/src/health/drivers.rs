//! The closed set of probe drivers, one per [`ProbeKind`]: what the
//! scheduler runs. Kept apart from the [`Probe`] trait so the drivers
//! depend on the trait and this file on the drivers, never both ways.

use std::net::SocketAddr;
use std::time::Instant;

use super::driver::{Input, Probe, Step, Transport};
use super::http::HttpProbe;
use super::kind::ProbeKind;
use super::state::ProbeResult;
use super::tcp::TcpProbe;
use super::udp::UdpProbe;

/// The driver of each [`ProbeKind`]: what the running scheduler uses.
#[derive(Debug)]
pub enum Driver {
    Tcp(TcpProbe),
    Http(HttpProbe),
    Udp(UdpProbe),
}

impl Driver {
    /// A fresh driver for one run against `addr`.
    pub fn new(kind: &ProbeKind, addr: SocketAddr) -> Self {
        match kind {
            ProbeKind::Tcp => Driver::Tcp(TcpProbe),
            ProbeKind::Http {
                request_path,
                host,
                response_codes,
            } => Driver::Http(HttpProbe::new(
                request_path,
                host.as_deref(),
                response_codes,
                addr,
            )),
            ProbeKind::Udp { request, response } => {
                Driver::Udp(UdpProbe::new(request.clone(), response.clone()))
            }
        }
    }
}

impl Probe for Driver {
    fn start(&mut self, now: Instant) -> Transport {
        match self {
            Driver::Tcp(p) => p.start(now),
            Driver::Http(p) => p.start(now),
            Driver::Udp(p) => p.start(now),
        }
    }

    fn on_input(&mut self, input: Input<'_>, now: Instant) -> Step {
        match self {
            Driver::Tcp(p) => p.on_input(input, now),
            Driver::Http(p) => p.on_input(input, now),
            Driver::Udp(p) => p.on_input(input, now),
        }
    }

    fn on_timeout(&mut self, now: Instant) -> ProbeResult {
        match self {
            Driver::Tcp(p) => p.on_timeout(now),
            Driver::Http(p) => p.on_timeout(now),
            Driver::Udp(p) => p.on_timeout(now),
        }
    }
}
