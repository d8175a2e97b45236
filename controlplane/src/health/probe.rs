//! Probe drivers (HC-1, HC-2) on non-blocking sockets, stepped by the
//! scheduler whenever mio reports readiness.
//!
//! TCP checks (HC-1) run half-open over a raw socket (see [`super::halfopen`]);
//! the non-blocking `connect()` probe here, closed with an RST
//! (`SO_LINGER` 0) as soon as the handshake completes, is the fallback
//! when the process lacks CAP_NET_RAW and for IPv6 backends: same verdicts,
//! one ACK more on the wire.

use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;

use mio::net::TcpStream;

use super::state::{parse_weight, ProbeResult, WeightReport};

/// What to probe; part of the key that lets services share probes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Tcp,
    Http {
        request_path: String,
        /// None: `<ip>:<port>` (HC-2).
        host: Option<String>,
        /// Expected status codes (default `[200]`).
        response_codes: Vec<u16>,
    },
}

/// Largest response head we read; anything longer fails the probe.
const MAX_HEAD: usize = 8192;

#[derive(Debug)]
enum Phase {
    Connecting,
    /// HTTP: request bytes still to write.
    Writing(Vec<u8>),
    /// HTTP: response head read so far.
    Reading(Vec<u8>),
}

/// One probe in flight.
#[derive(Debug)]
pub struct InFlight {
    pub stream: TcpStream,
    phase: Phase,
}

impl InFlight {
    pub fn start(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        Ok(Self {
            stream,
            phase: Phase::Connecting,
        })
    }

    /// Advances on readiness; `Some` once the probe has a verdict.
    pub fn step(&mut self, kind: &ProbeKind, addr: SocketAddr) -> Option<ProbeResult> {
        match self.step_inner(kind, addr) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(_) => Some(ProbeResult::Failure),
        }
    }

    fn step_inner(
        &mut self,
        kind: &ProbeKind,
        addr: SocketAddr,
    ) -> io::Result<Option<ProbeResult>> {
        loop {
            match &mut self.phase {
                Phase::Connecting => {
                    if let Some(e) = self.stream.take_error()? {
                        return Err(e);
                    }
                    // Not connected yet: peer_addr fails with ENOTCONN.
                    match self.stream.peer_addr() {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(None),
                        Err(e) => return Err(e),
                    }
                    match kind {
                        ProbeKind::Tcp => {
                            self.abort();
                            return Ok(Some(ProbeResult::Success {
                                weight: WeightReport::NotApplicable,
                            }));
                        }
                        ProbeKind::Http {
                            request_path, host, ..
                        } => {
                            let host = host.clone().unwrap_or_else(|| addr.to_string());
                            let req = format!(
                                "GET {request_path} HTTP/1.1\r\nHost: {host}\r\n\
                                 User-Agent: sluice-health-check\r\nConnection: close\r\n\r\n"
                            );
                            self.phase = Phase::Writing(req.into_bytes());
                        }
                    }
                }
                Phase::Writing(buf) => {
                    let n = self.stream.write(buf)?;
                    buf.drain(..n);
                    if buf.is_empty() {
                        self.phase = Phase::Reading(Vec::with_capacity(512));
                    }
                }
                Phase::Reading(head) => {
                    let mut chunk = [0u8; 2048];
                    let n = self.stream.read(&mut chunk)?;
                    head.extend_from_slice(&chunk[..n]);
                    let complete = head.windows(4).any(|w| w == b"\r\n\r\n");
                    if complete || n == 0 || head.len() > MAX_HEAD {
                        let verdict = judge_http(head, kind);
                        self.abort();
                        return Ok(Some(verdict));
                    }
                }
            }
        }
    }

    /// Closes with an RST rather than a FIN: no TIME_WAIT on the appliance
    /// for thousands of probes a second, and the backend sees no half-closed
    /// connection.
    pub fn abort(&self) {
        let _ = socket2::SockRef::from(&self.stream).set_linger(Some(std::time::Duration::ZERO));
    }
}

/// HC-2 verdict and HC-7 weight from a response head.
pub fn judge_http(head: &[u8], kind: &ProbeKind) -> ProbeResult {
    let ProbeKind::Http { response_codes, .. } = kind else {
        return ProbeResult::Failure;
    };
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| {
            let mut parts = l.split_ascii_whitespace();
            let version = parts.next()?;
            version.starts_with("HTTP/").then_some(())?;
            parts.next()?.parse::<u16>().ok()
        })
        .filter(|c| response_codes.contains(c));
    if status.is_none() {
        return ProbeResult::Failure;
    }
    let weight = lines
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("x-load-balancing-endpoint-weight")
                .then(|| parse_weight(value))
        })
        .flatten();
    ProbeResult::Success {
        weight: weight.map_or(WeightReport::Invalid, WeightReport::Valid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(codes: &[u16]) -> ProbeKind {
        ProbeKind::Http {
            request_path: "/".into(),
            host: None,
            response_codes: codes.to_vec(),
        }
    }

    /// HC-2 status codes and HC-7 header parsing on canned responses.
    #[test]
    fn hc_2_and_hc_7_judge_responses() {
        let ok = |w| ProbeResult::Success { weight: w };
        let cases: &[(&str, &[u16], ProbeResult)] = &[
            ("HTTP/1.1 200 OK\r\n\r\n", &[200], ok(WeightReport::Invalid)),
            (
                "HTTP/1.1 200 OK\r\nx-load-balancing-endpoint-weight: 25\r\n\r\n",
                &[200],
                ok(WeightReport::Valid(25)),
            ),
            (
                "HTTP/1.0 204 No\r\nX-Load-Balancing-Endpoint-Weight: 2000\r\n\r\n",
                &[200, 204],
                ok(WeightReport::Invalid),
            ),
            ("HTTP/1.1 503 Down\r\n\r\n", &[200], ProbeResult::Failure),
            ("garbage\r\n\r\n", &[200], ProbeResult::Failure),
            ("", &[200], ProbeResult::Failure),
        ];
        for (resp, codes, want) in cases {
            assert_eq!(judge_http(resp.as_bytes(), &http(codes)), *want, "{resp:?}");
        }
    }
}
