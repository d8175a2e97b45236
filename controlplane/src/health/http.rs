//! HC-2's HTTP probe and HC-7's weight header: `GET request_path` once the
//! connection is up, then the response head decides. The head is complete
//! at its blank line, at end of file, or past [`MAX_HEAD`] bytes; the
//! shell closes the connection with RST afterwards (no TIME_WAIT on the
//! appliance for thousands of probes a second).

use std::net::SocketAddr;
use std::time::Instant;

use super::driver::{tcp_failure, Input, Probe, Step, Transport};
use super::failure::FailureReason;
use super::state::{parse_weight, ProbeResult, WeightReport};
use crate::config::HttpCheck;

/// Largest response head read; a longer one is judged as it stands
/// (its status line decides).
pub const MAX_HEAD: usize = 8192;

#[derive(Debug)]
pub struct HttpProbe {
    request: Vec<u8>,
    response_codes: Vec<u16>,
    /// The response head so far.
    head: Vec<u8>,
}

impl HttpProbe {
    /// The check's request to `addr`; without a `host`, `Host:
    /// <ip>:<port>` (HC-2).
    pub fn new(check: &HttpCheck, addr: SocketAddr) -> Self {
        let host = check.host.clone().unwrap_or_else(|| addr.to_string());
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\n\
             User-Agent: sluice-health-check\r\nConnection: close\r\n\r\n",
            check.request_path
        );
        Self {
            request: request.into_bytes(),
            response_codes: check.response_codes.clone(),
            head: Vec::new(),
        }
    }
}

impl Probe for HttpProbe {
    fn start(&mut self, _now: Instant) -> Transport {
        Transport::Stream
    }

    fn on_input(&mut self, input: Input<'_>, _now: Instant) -> Step {
        match input {
            Input::Connected => Step::Send(std::mem::take(&mut self.request)),
            Input::Data(bytes) => {
                self.head.extend_from_slice(bytes);
                let complete = self.head.windows(4).any(|w| w == b"\r\n\r\n");
                if complete || self.head.len() > MAX_HEAD {
                    Step::Done(judge_http(&self.head, &self.response_codes))
                } else {
                    Step::Wait
                }
            }
            Input::Closed => Step::Done(judge_http(&self.head, &self.response_codes)),
            other => tcp_failure(other).map_or(Step::Wait, Step::fail),
        }
    }
}

/// HC-2 verdict and HC-7 weight from a response head.
pub fn judge_http(head: &[u8], response_codes: &[u16]) -> ProbeResult {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let Some(status) = lines.next().and_then(|l| {
        let mut parts = l.split_ascii_whitespace();
        let version = parts.next()?;
        version.starts_with("HTTP/").then_some(())?;
        parts.next()?.parse::<u16>().ok()
    }) else {
        return ProbeResult::Failure(FailureReason::BadResponse);
    };
    if !response_codes.contains(&status) {
        return ProbeResult::Failure(FailureReason::HttpStatus);
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

    fn check(request_path: &str, host: Option<&str>) -> HttpCheck {
        HttpCheck {
            request_path: request_path.into(),
            host: host.map(str::to_string),
            response_codes: vec![200],
        }
    }

    /// HC-2 status codes and HC-7 header parsing on canned responses.
    #[test]
    fn hc_2_and_hc_7_judge_responses() {
        let ok = |w| ProbeResult::Success { weight: w };
        let fail = ProbeResult::Failure;
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
            (
                "HTTP/1.1 503 Down\r\n\r\n",
                &[200],
                fail(FailureReason::HttpStatus),
            ),
            ("garbage\r\n\r\n", &[200], fail(FailureReason::BadResponse)),
            ("", &[200], fail(FailureReason::BadResponse)),
        ];
        for (resp, codes, want) in cases {
            assert_eq!(judge_http(resp.as_bytes(), codes), *want, "{resp:?}");
        }
    }

    /// HC-2: the request goes out once connected, with `Host: ip:port` by
    /// default; a head split over reads is judged at its blank line, one
    /// cut short at end of file as it stands.
    #[test]
    fn hc_2_request_then_head_in_pieces() {
        let now = Instant::now();
        let addr: SocketAddr = "192.0.2.10:8080".parse().unwrap();
        let mut p = HttpProbe::new(&check("/healthz", None), addr);
        assert_eq!(p.start(now), Transport::Stream);
        let Step::Send(req) = p.on_input(Input::Connected, now) else {
            panic!("no request");
        };
        let req = String::from_utf8(req).unwrap();
        assert!(req.starts_with("GET /healthz HTTP/1.1\r\nHost: 192.0.2.10:8080\r\n"));
        assert!(req.ends_with("\r\n\r\n"));
        assert_eq!(
            p.on_input(Input::Data(b"HTTP/1.1 200 OK\r\n"), now),
            Step::Wait
        );
        assert_eq!(
            p.on_input(
                Input::Data(b"X-Load-Balancing-Endpoint-Weight: 7\r\n\r\n"),
                now
            ),
            Step::Done(ProbeResult::Success {
                weight: WeightReport::Valid(7)
            })
        );

        let mut p = HttpProbe::new(&check("/", Some("example.test")), addr);
        let Step::Send(req) = p.on_input(Input::Connected, now) else {
            panic!("no request");
        };
        assert!(String::from_utf8(req)
            .unwrap()
            .contains("\r\nHost: example.test\r\n"));
        assert_eq!(
            p.on_input(Input::Data(b"HTTP/1.1 200 OK\r\n"), now),
            Step::Wait
        );
        assert_eq!(
            p.on_input(Input::Closed, now),
            Step::Done(ProbeResult::Success {
                weight: WeightReport::Invalid
            })
        );
        let mut p = HttpProbe::new(&check("/", None), addr);
        assert_eq!(
            p.on_input(Input::Reset, now),
            Step::fail(FailureReason::Reset)
        );
    }
}
