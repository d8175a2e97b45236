//! The closed set of probe drivers, one per [`ProbeKind`]: what the
//! scheduler runs. Kept apart from the [`Probe`] trait so the drivers
//! depend on the trait and this file on the drivers, never both ways.

use std::net::SocketAddr;
use std::time::Instant;

use super::driver::{Input, Probe, Step, Transport};
use super::http::HttpProbe;
use super::state::ProbeResult;
use super::tcp::TcpProbe;
use super::udp::UdpProbe;
use crate::config::ProbeKind;

/// The driver enum and its dispatch from one list: each `ProbeKind`
/// variant and the driver that runs it, built by `Driver::new(&check,
/// addr)`.
macro_rules! drivers {
    ($($kind:ident => $probe:ident),* $(,)?) => {
        /// The driver of each [`ProbeKind`]: what the running scheduler uses.
        #[derive(Debug)]
        pub enum Driver {
            $($kind($probe),)*
        }

        impl Driver {
            /// A fresh driver for one run against `addr`.
            pub fn new(kind: &ProbeKind, addr: SocketAddr) -> Self {
                match kind {
                    $(ProbeKind::$kind(check) => Driver::$kind($probe::new(check, addr)),)*
                }
            }
        }

        impl Probe for Driver {
            fn start(&mut self, now: Instant) -> Transport {
                match self {
                    $(Driver::$kind(p) => p.start(now),)*
                }
            }

            fn on_input(&mut self, input: Input<'_>, now: Instant) -> Step {
                match self {
                    $(Driver::$kind(p) => p.on_input(input, now),)*
                }
            }

            fn on_timeout(&mut self, now: Instant) -> ProbeResult {
                match self {
                    $(Driver::$kind(p) => p.on_timeout(now),)*
                }
            }
        }
    };
}

drivers! {
    Tcp => TcpProbe,
    Http => HttpProbe,
    Udp => UdpProbe,
}
