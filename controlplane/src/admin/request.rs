//! What the admin endpoint answers to one request head (AP-5): parsing,
//! the bodiless-`GET` rule and the three routes. Pure apart from reading
//! the [`AdminState`]; the socket side is in [`super::http`].

use std::time::Duration;

use super::state::{AdminState, LIVENESS_WINDOW};
use crate::metrics::exposition::Exposition;
use crate::metrics::MetricsSources;

/// Headers parsed per request; more gets 431.
const MAX_HEADERS: usize = 32;

/// One answer; every answer closes the connection.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub allow_get: bool,
    /// The whole body, or what comes before `stream`.
    pub body: String,
    /// `/metrics`: the exposition, written part by part after `body`
    /// as the client takes it.
    pub stream: Option<Box<Exposition>>,
    /// The client spoke HTTP/1.0: a stream is sent until the connection
    /// closes instead of in chunks.
    pub http10: bool,
}

const TEXT: &str = "text/plain; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: TEXT,
            allow_get: false,
            body: body.into(),
            stream: None,
            http10: false,
        }
    }

    /// The status line, the headers and the body before any stream; the
    /// stream, if any, and whether its parts go out as HTTP/1.1 chunks.
    pub fn into_parts(self) -> (Vec<u8>, Option<Box<Exposition>>, bool) {
        let allow = if self.allow_get { "Allow: GET\r\n" } else { "" };
        let length = match (&self.stream, self.http10) {
            (None, _) => format!("Content-Length: {}\r\n", self.body.len()),
            (Some(_), false) => "Transfer-Encoding: chunked\r\n".to_string(),
            (Some(_), true) => String::new(),
        };
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{length}{allow}Connection: close\r\n\r\n",
            self.status,
            reason(self.status),
            self.content_type,
        )
        .into_bytes();
        out.extend_from_slice(self.body.as_bytes());
        let chunked = self.stream.is_some() && !self.http10;
        (out, self.stream, chunked)
    }

    /// The whole answer at once (tests; a stream is written out in full).
    pub fn into_bytes(self) -> Vec<u8> {
        let (mut out, stream, chunked) = self.into_parts();
        if let Some(mut s) = stream {
            let mut body = Vec::new();
            while !s.fill(&mut body, usize::MAX) {}
            if chunked {
                out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                out.extend_from_slice(&body);
                out.extend_from_slice(b"\r\n0\r\n\r\n");
            } else {
                out.extend_from_slice(&body);
            }
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// The answer to the request head at the start of `buf`, or None while it
/// is incomplete and under `max_head` bytes.
pub fn answer(buf: &[u8], max_head: usize, state: &AdminState) -> Option<Response> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() < max_head => None,
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            Some(Response::text(
                431,
                format!("request head over {max_head} bytes or {MAX_HEADERS} headers\n"),
            ))
        }
        Err(e) => Some(Response::text(400, format!("bad request: {e}\n"))),
        Ok(httparse::Status::Complete(_)) => Some(Response {
            http10: req.version == Some(0),
            ..route(&req, state)
        }),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Healthz,
    Ready,
}

fn route(req: &httparse::Request<'_, '_>, state: &AdminState) -> Response {
    let path = req.path.unwrap_or("");
    let route = match path.split('?').next().unwrap_or("") {
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        "/ready" => Route::Ready,
        _ => {
            return Response::text(404, "not found: try GET /metrics, /healthz or /ready\n");
        }
    };
    if req.method != Some("GET") {
        return Response {
            allow_get: true,
            ..Response::text(405, "only GET is answered here\n")
        };
    }
    if let Some(refusal) = body_refusal(req.headers) {
        return refusal;
    }
    let published = state.lock();
    match route {
        Route::Healthz => liveness(state.since_beat()),
        Route::Ready => readiness(published.as_deref()),
        Route::Metrics => match published.as_deref() {
            // The fixed families are read now, under the lock (they read
            // the ports); the rest streams from counters and snapshots.
            Some(src) => Response {
                content_type: PROMETHEUS_TEXT,
                stream: Some(Box::new(Exposition::new(src, Some(state.since_beat())))),
                ..Response::text(200, "")
            },
            None => Response::text(503, "starting or stopping: no metrics yet\n"),
        },
    }
}

/// A request with a body is refused without reading it: the connection
/// closes after the answer, so the body is never waited for.
fn body_refusal(headers: &[httparse::Header<'_>]) -> Option<Response> {
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Some(Response::text(413, "a request body is not accepted here\n"));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(h.value)
                .ok()
                .map(|v| v.trim().parse::<u64>())
            {
                Some(Ok(0)) => {}
                Some(Ok(_)) => {
                    return Some(Response::text(413, "a request body is not accepted here\n"))
                }
                _ => return Some(Response::text(400, "bad Content-Length\n")),
            }
        }
    }
    None
}

/// `/healthz`: the control loop ran within [`LIVENESS_WINDOW`].
pub fn liveness(since_beat: Duration) -> Response {
    if since_beat <= LIVENESS_WINDOW {
        Response::text(
            200,
            format!("ok: control loop ran {} ms ago\n", since_beat.as_millis()),
        )
    } else {
        Response::text(
            503,
            format!(
                "control loop has not run for {:.1} s (limit {} s)\n",
                since_beat.as_secs_f64(),
                LIVENESS_WINDOW.as_secs()
            ),
        )
    }
}

/// `/ready`: started (first snapshot published, workers running) and every
/// port's link up.
fn readiness(src: Option<&MetricsSources>) -> Response {
    let Some(src) = src else {
        return Response::text(503, "not ready: starting or stopping\n");
    };
    let links: Vec<(String, bool)> = src
        .ports
        .iter()
        .zip(&src.port_names)
        .map(|(port, name)| (name.clone(), port.link().up))
        .collect();
    readiness_of(src.snapshot.load().generation, &links)
}

/// `/ready` from the published generation and each port's (name, link up).
pub fn readiness_of(generation: u64, links: &[(String, bool)]) -> Response {
    let list = links
        .iter()
        .map(|(n, up)| format!("{n} {}", if *up { "up" } else { "down" }))
        .collect::<Vec<_>>()
        .join(", ");
    if links.iter().all(|(_, up)| *up) {
        Response::text(
            200,
            format!("ready: snapshot {generation}, links: {list}\n"),
        )
    } else {
        Response::text(503, format!("not ready: links: {list}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(req: &str) -> Option<Response> {
        answer(req.as_bytes(), 8192, &AdminState::new())
    }

    #[test]
    fn incomplete_head_waits_until_the_cap() {
        assert!(ask("GET /metrics HTTP/1.1\r\nHost: x\r\n").is_none());
        let long = format!("GET /metrics HTTP/1.1\r\nX: {}", "a".repeat(8192));
        assert_eq!(
            answer(long.as_bytes(), 8192, &AdminState::new())
                .unwrap()
                .status,
            431
        );
    }

    #[test]
    fn only_a_bodiless_get_is_answered() {
        let status = |r: &str| ask(r).map(|r| r.status);
        assert_eq!(
            status("POST /metrics HTTP/1.1\r\nContent-Length: 65536\r\n\r\n"),
            Some(405)
        );
        assert!(ask("PUT /ready HTTP/1.1\r\n\r\n")
            .unwrap()
            .into_bytes()
            .windows(10)
            .any(|w| w == b"Allow: GET"));
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n"),
            Some(413)
        );
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(413)
        );
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Some(400)
        );
        assert_eq!(status("GET /nope HTTP/1.1\r\n\r\n"), Some(404));
        assert_eq!(status("GET\x01 / HTTP/1.1\r\n\r\n"), Some(400));
        // Nothing published yet: metrics and readiness are unavailable.
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
            Some(503)
        );
        assert_eq!(status("GET /ready HTTP/1.0\r\n\r\n"), Some(503));
        assert_eq!(status("GET /healthz?x=1 HTTP/1.0\r\n\r\n"), Some(200));
    }

    #[test]
    fn liveness_fails_once_the_control_loop_stalls() {
        assert_eq!(liveness(Duration::from_millis(20)).status, 200);
        assert_eq!(liveness(LIVENESS_WINDOW).status, 200);
        let stalled = liveness(LIVENESS_WINDOW + Duration::from_secs(1));
        assert_eq!(stalled.status, 503);
        assert!(stalled.body.contains("11.0 s"), "{}", stalled.body);
    }

    #[test]
    fn readiness_needs_every_link_up() {
        let up = [("uplink".to_string(), true), ("downlink".to_string(), true)];
        assert_eq!(readiness_of(3, &up).status, 200);
        let down = [
            ("uplink".to_string(), true),
            ("downlink".to_string(), false),
        ];
        let r = readiness_of(3, &down);
        assert_eq!(r.status, 503);
        assert!(r.body.contains("downlink down"), "{}", r.body);
    }
}
