//! What a health check probes: the validated `type` of a `[[health_check]]`
//! (config keeps it as is) and the part of a [`super::ProbeKey`] that picks
//! the driver.

/// One probe kind and its parameters. Part of the key that lets services
/// share probes, so two checks differing in any field probe separately.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// HC-1: a SYN answered by a SYN-ACK ([`super::tcp`]).
    Tcp,
    /// HC-2: `GET request_path` with `Host: host` (or `<ip>:<port>`),
    /// HC-7's weight header ([`super::http`]).
    Http {
        request_path: String,
        /// None: `<ip>:<port>` (HC-2).
        host: Option<String>,
        /// Expected status codes (default `[200]`).
        response_codes: Vec<u16>,
    },
    /// One datagram out, one reply back ([`super::udp`]).
    Udp {
        /// The datagram sent (never empty).
        request: Vec<u8>,
        /// Bytes the reply must contain; None: any reply passes.
        response: Option<Vec<u8>>,
    },
}
