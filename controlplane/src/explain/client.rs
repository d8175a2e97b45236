//! `sluice explain`'s client side against the running appliance: the
//! request for a flow or a capture, checked against the limits before
//! anything is sent, and the answer checked before it is printed (one
//! JSON document per packet with `--json`). Every failure is an
//! [`AskError`] with its exit status: nothing that went wrong exits 0.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use super::live::{self, Request, MAX_PACKETS};
use super::packet;
use crate::control_socket::{self, MAX_REQUEST_BYTES};

/// Why the running appliance gave no explanation.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// The question itself is wrong: a malformed flow, a capture past the
    /// limits, an unknown port or backend (the appliance's words).
    #[error("{0}")]
    Refused(String),
    /// No answer could be had: the socket, or an answer that is not one.
    #[error("{0}")]
    Failed(String),
}

impl AskError {
    /// The exit status: 2 for a refused question (as for an invalid
    /// configuration), 1 for a failure to get an answer.
    pub fn exit_status(&self) -> u8 {
        match self {
            AskError::Refused(_) => 2,
            AskError::Failed(_) => 1,
        }
    }
}

/// What to explain live.
#[derive(Debug)]
pub enum Packets<'a> {
    Flow(&'a str),
    Pcap(&'a Path),
}

/// The request for `packets`, or why it cannot be sent: an unreadable
/// flow or capture, or a capture over [`MAX_PACKETS`] packets or
/// [`MAX_REQUEST_BYTES`] bytes.
pub fn request(
    packets: &Packets<'_>,
    json: bool,
    port: Option<&str>,
    unhealthy: &[IpAddr],
) -> Result<Request, AskError> {
    let mut req = Request {
        json,
        port: port.map(str::to_string),
        unhealthy: unhealthy.to_vec(),
        ..Request::default()
    };
    match packets {
        Packets::Flow(flow) => {
            packet::frame_of_flow(flow).map_err(|e| AskError::Refused(e.to_string()))?;
            req.flow = Some(flow.to_string());
        }
        Packets::Pcap(path) => {
            let frames =
                packet::frames_of_pcap(path).map_err(|e| AskError::Refused(e.to_string()))?;
            if frames.len() > MAX_PACKETS {
                return Err(AskError::Refused(format!(
                    "{}: {} packets; the running sluice explains at most {MAX_PACKETS} \
                     per request\n  hint: split the capture (editcap -c {MAX_PACKETS} IN OUT) \
                     or explain it offline with --config FILE",
                    path.display(),
                    frames.len()
                )));
            }
            req.frames = frames.iter().map(|f| live::hex(f)).collect();
        }
    }
    let bytes = req.line().len();
    if bytes > MAX_REQUEST_BYTES {
        return Err(AskError::Refused(format!(
            "{}: {bytes} bytes to send (frames in hex); a request to the running sluice \
             takes at most {MAX_REQUEST_BYTES}\n  hint: split the capture \
             (editcap -c N IN OUT) or explain it offline with --config FILE",
            match packets {
                Packets::Pcap(p) => p.display().to_string(),
                Packets::Flow(f) => f.to_string(),
            }
        )));
    }
    Ok(req)
}

/// Sends `req` to the appliance at `socket`; its answer, checked, within
/// `timeout`.
pub fn ask(socket: &Path, req: &Request, timeout: Duration) -> Result<String, AskError> {
    let (ok, text) = control_socket::request(socket, &req.line(), timeout)
        .map_err(|e| AskError::Failed(format!("sluice explain: {e}")))?;
    if !ok {
        let text = text.trim_end();
        return Err(AskError::Refused(if text.starts_with("sluice explain:") {
            text.to_string()
        } else {
            format!("sluice explain: the running sluice refused: {text}")
        }));
    }
    check_answer(&text, req).map_err(|why| {
        AskError::Failed(format!(
            "sluice explain: malformed answer from the running sluice at {}: {why}",
            socket.display()
        ))
    })?;
    Ok(text)
}

/// An answer explains every packet asked: with JSON, one document a line
/// numbered 0.. by `packet_index`; as text, a `verdict:` line each.
fn check_answer(text: &str, req: &Request) -> Result<(), String> {
    let want = req.packets();
    if req.json {
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() != want {
            return Err(format!(
                "{} JSON document(s) for {want} packet(s)",
                lines.len()
            ));
        }
        for (i, l) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(l)
                .map_err(|e| format!("document {}: not JSON: {e}", i + 1))?;
            if v["packet_index"] != serde_json::json!(i) || v["verdict"].as_str().is_none() {
                return Err(format!(
                    "document {}: no packet_index {i} or no verdict",
                    i + 1
                ));
            }
        }
    } else {
        let verdicts = text.lines().filter(|l| l.starts_with("verdict:")).count();
        if verdicts != want {
            return Err(format!("{verdicts} verdict(s) for {want} packet(s)"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow_request(json: bool) -> Request {
        request(
            &Packets::Flow("tcp 198.51.100.7:40000 -> 203.0.113.10:80"),
            json,
            None,
            &[],
        )
        .unwrap()
    }

    #[test]
    fn answers_must_explain_every_packet() {
        let req = flow_request(true);
        assert!(check_answer("{\"packet_index\":0,\"verdict\":\"forward\"}\n", &req).is_ok());
        assert!(check_answer("", &req).is_err());
        assert!(check_answer("not json\n", &req).is_err());
        assert!(check_answer("{\"verdict\":\"forward\"}\n", &req).is_err());
        let req = flow_request(false);
        assert!(check_answer("packet: x\nverdict:       forward\n", &req).is_ok());
        assert!(check_answer("sluice explain: oops\n", &req).is_err());
    }

    #[test]
    fn malformed_flows_are_refused_before_sending() {
        let e = request(&Packets::Flow("tcp 1.2.3.4 -> x"), false, None, &[]).unwrap_err();
        assert_eq!(e.exit_status(), 2);
        assert!(e.to_string().contains("hint:"), "{e}");
    }
}
