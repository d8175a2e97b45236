//! The resolution nudge: an empty UDP datagram to a backend's discard
//! port (RFC 863) makes the kernel resolve the next hop to send it, and
//! re-confirms a STALE entry, which the dataplane's own traffic never
//! does since it bypasses the kernel.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The discard port (RFC 863): the nudge's destination.
const DISCARD_PORT: u16 = 9;
/// At most one nudge per backend this often.
pub(super) const NUDGE_INTERVAL: Duration = Duration::from_secs(1);

/// Sends the resolution nudges, at most one per target per
/// [`NUDGE_INTERVAL`].
#[derive(Default)]
pub(super) struct Nudger {
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    last: HashMap<IpAddr, Instant>,
}

impl Nudger {
    pub(super) fn nudge(&mut self, addr: IpAddr) {
        if self
            .last
            .get(&addr)
            .is_some_and(|t| t.elapsed() < NUDGE_INTERVAL)
        {
            return;
        }
        self.last.insert(addr, Instant::now());
        let sock = match addr {
            IpAddr::V4(_) => &mut self.v4,
            IpAddr::V6(_) => &mut self.v6,
        };
        if sock.is_none() {
            let any: SocketAddr = match addr {
                IpAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
                IpAddr::V6(_) => ([0u16; 8], 0).into(),
            };
            *sock = UdpSocket::bind(any).ok();
        }
        if let Some(s) = sock {
            // Errors (no route, EHOSTUNREACH after failed resolution) show
            // in the kernel's next answer; nothing to do here.
            let _ = s.send_to(&[], SocketAddr::new(addr, DISCARD_PORT));
        }
    }

    /// Forgets backends no longer resolved.
    pub(super) fn retain(&mut self, keep: impl Fn(&IpAddr) -> bool) {
        self.last.retain(|a, _| keep(a));
    }
}
