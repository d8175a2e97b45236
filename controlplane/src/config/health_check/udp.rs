//! `type = "UDP"`: one datagram out (`request`/`request_hex`), one reply
//! back, containing `response`/`response_hex` if given.

use toml::Spanned;

use super::kind::CheckType;
use crate::config::context::Ctx;
use crate::config::raw::RawHealthCheck;
use crate::config::values::Problem;

/// Most bytes a UDP probe sends or expects: one unfragmented datagram
/// on any link a backend sits on.
const MAX_UDP_PAYLOAD: usize = 1024;

/// A UDP check's datagram and what its reply must contain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UdpCheck {
    /// The datagram sent (never empty).
    pub request: Vec<u8>,
    /// Bytes the reply must contain; None: any reply passes.
    pub response: Option<Vec<u8>>,
}

impl CheckType for UdpCheck {
    const NAME: &'static str = "UDP";
    const FIELDS: &'static [&'static str] = &["request", "request_hex", "response", "response_hex"];
    const NEEDS_PORT: bool = true;

    fn validate(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> Self {
        let request = payload(cx, at, "request", &h.request, &h.request_hex);
        if h.request.is_none() && h.request_hex.is_none() {
            cx.err(
                h.kind.span(),
                format_args!("{at}.request"),
                (
                    "a UDP health check needs request or request_hex: the datagram it sends"
                        .into(),
                    "add request = \"ping\" (text, sent as UTF-8) or request_hex = \"0a0b\" (bytes)"
                        .into(),
                ),
            );
        }
        let response = payload(cx, at, "response", &h.response, &h.response_hex);
        UdpCheck {
            request: request.unwrap_or_else(|| vec![0]),
            response,
        }
    }
}

/// A UDP payload given as text (`field`) or hex (`field_hex`): one of
/// the two, not empty, at most [`MAX_UDP_PAYLOAD`] bytes.
fn payload(
    cx: &mut Ctx<'_>,
    at: &str,
    field: &str,
    text: &Option<Spanned<String>>,
    hex: &Option<Spanned<String>>,
) -> Option<Vec<u8>> {
    let hex_field = format!("{field}_hex");
    if let (Some(_), Some(h)) = (text, hex) {
        cx.err(
            h.span(),
            format_args!("{at}.{hex_field}"),
            (
                format!("{field} and {hex_field} are both set"),
                format!("keep one: {field} for text, {hex_field} for bytes"),
            ),
        );
    }
    let (name, value, bytes) = match (text, hex) {
        (Some(t), _) => (field, t, Some(t.get_ref().as_bytes().to_vec())),
        (None, Some(h)) => (
            hex_field.as_str(),
            h,
            cx.parse(h, format_args!("{at}.{hex_field}"), |s| {
                hex_bytes(s, &hex_field)
            }),
        ),
        (None, None) => return None,
    };
    let bytes = bytes?;
    let problem: Option<Problem> = if bytes.is_empty() {
        Some((
            format!("{name} is empty"),
            if field == "request" {
                "give at least one byte to send".into()
            } else {
                format!("remove {name} to accept any reply, or give the bytes a reply must contain")
            },
        ))
    } else if bytes.len() > MAX_UDP_PAYLOAD {
        Some((
            format!("{name} is {} bytes long", bytes.len()),
            format!("use at most {MAX_UDP_PAYLOAD} bytes (one unfragmented datagram)"),
        ))
    } else {
        None
    };
    match problem {
        Some(p) => {
            cx.err(value.span(), format_args!("{at}.{name}"), p);
            None
        }
        None => Some(bytes),
    }
}

/// Bytes written as pairs of hex digits; blanks between bytes allowed.
fn hex_bytes(s: &str, field: &str) -> Result<Vec<u8>, Problem> {
    let hint = || "write pairs of hex digits, e.g. \"0a1b2c\" or \"0a 1b 2c\"".to_string();
    let mut out = Vec::new();
    for word in s.split_ascii_whitespace() {
        if let Some(bad) = word.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Err((format!("{field} contains {bad:?}, not a hex digit"), hint()));
        }
        if word.len() % 2 != 0 {
            return Err((
                format!("{field} has an odd number of hex digits in {word:?}"),
                hint(),
            ));
        }
        out.extend(
            (0..word.len())
                .step_by(2)
                .filter_map(|i| u8::from_str_radix(&word[i..i + 2], 16).ok()),
        );
    }
    Ok(out)
}
