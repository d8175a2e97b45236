//! `[[health_check]]` tables → [`HealthCheckConfig`] (SPEC §7): the
//! `type` and the fields that belong to it (validated into the prober's
//! own [`ProbeKind`]), the port, timing (HC-3) and thresholds.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::context::Ctx;
use super::model::HealthCheckConfig;
use super::raw::RawHealthCheck;
use super::values::{self, Problem};
use crate::health::kind::ProbeKind;

/// Most bytes a UDP probe sends or expects: one unfragmented datagram
/// on any link a backend sits on.
pub(crate) const MAX_UDP_PAYLOAD: usize = 1024;

#[derive(Copy, Clone, PartialEq, Eq)]
enum Type {
    Tcp,
    Http,
    Udp,
}

pub(crate) fn health_checks_section(
    cx: &mut Ctx<'_>,
    hcs: &[RawHealthCheck],
) -> Vec<HealthCheckConfig> {
    cx.unique(hcs.iter().map(|h| &h.name), "health_check");
    hcs.iter().map(|h| health_check(cx, h)).collect()
}

fn health_check(cx: &mut Ctx<'_>, h: &RawHealthCheck) -> HealthCheckConfig {
    cx.name(&h.name, "health_check");
    let at = format!("health_check {:?}", h.name.get_ref());
    let ty = cx
        .parse(&h.kind, format_args!("{at}.type"), |s| {
            values::choice(
                s,
                &[("TCP", Type::Tcp), ("HTTP", Type::Http), ("UDP", Type::Udp)],
            )
        })
        // An unknown type: judge the fields by the ones present, so they
        // are checked without a second error per field.
        .unwrap_or(if udp_fields(h).next().is_some() {
            Type::Udp
        } else {
            Type::Http
        });
    if ty == Type::Udp && h.port.is_none() {
        cx.err(
            h.kind.span(),
            format_args!("{at}.port"),
            (
                "a UDP health check needs a port".into(),
                "set port to the UDP port the backends answer on, e.g. port = 53".into(),
            ),
        );
    }
    let port = cx.int(
        &h.port,
        80u16,
        (1, 65535),
        format_args!("{at}.port"),
        "port",
    );
    if ty != Type::Http {
        only_for(cx, &at, "HTTP", http_fields(h));
    }
    if ty != Type::Udp {
        only_for(cx, &at, "UDP", udp_fields(h));
    }
    let kind = match ty {
        Type::Tcp => ProbeKind::Tcp,
        Type::Http => http_kind(cx, h, &at),
        Type::Udp => udp_kind(cx, h, &at),
    };
    let (check_interval, timeout) = timing(cx, h, &at);
    let healthy_threshold = cx.int(
        &h.healthy_threshold,
        2u32,
        (1, 10),
        format_args!("{at}.healthy_threshold"),
        "threshold",
    );
    let unhealthy_threshold = cx.int(
        &h.unhealthy_threshold,
        3u32,
        (1, 10),
        format_args!("{at}.unhealthy_threshold"),
        "threshold",
    );
    let initially_healthy = h
        .initial_state
        .as_ref()
        .and_then(|v| {
            cx.parse(v, format_args!("{at}.initial_state"), |t| {
                values::choice(t, &[("HEALTHY", true), ("UNHEALTHY", false)])
            })
        })
        .unwrap_or(false);
    HealthCheckConfig {
        name: h.name.get_ref().clone(),
        kind,
        port,
        check_interval,
        timeout,
        healthy_threshold,
        unhealthy_threshold,
        initially_healthy,
    }
}

/// The HTTP-only fields that are set, with their spans.
fn http_fields(h: &RawHealthCheck) -> impl Iterator<Item = (&'static str, Range<usize>)> + '_ {
    [
        ("request_path", h.request_path.as_ref().map(|v| v.span())),
        ("host", h.host.as_ref().map(|v| v.span())),
        (
            "response_codes",
            h.response_codes.as_ref().map(|v| v.span()),
        ),
    ]
    .into_iter()
    .filter_map(|(f, s)| Some((f, s?)))
}

/// The UDP-only fields that are set, with their spans.
fn udp_fields(h: &RawHealthCheck) -> impl Iterator<Item = (&'static str, Range<usize>)> + '_ {
    [
        ("request", &h.request),
        ("request_hex", &h.request_hex),
        ("response", &h.response),
        ("response_hex", &h.response_hex),
    ]
    .into_iter()
    .filter_map(|(f, v)| Some((f, v.as_ref()?.span())))
}

/// An error for each field set that belongs to type `owner` only.
fn only_for(
    cx: &mut Ctx<'_>,
    at: &str,
    owner: &str,
    fields: impl Iterator<Item = (&'static str, Range<usize>)>,
) {
    for (field, span) in fields {
        cx.err(
            span,
            format_args!("{at}.{field}"),
            (
                format!("{field} applies only to {owner} health checks"),
                format!("remove {field}, or set type = \"{owner}\""),
            ),
        );
    }
}

fn http_kind(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> ProbeKind {
    let request_path = match &h.request_path {
        Some(p) if !p.get_ref().starts_with('/') => {
            cx.err(
                p.span(),
                format_args!("{at}.request_path"),
                (
                    format!("request_path {:?} does not start with '/'", p.get_ref()),
                    format!("write an absolute path, e.g. \"/{}\"", p.get_ref()),
                ),
            );
            "/".into()
        }
        Some(p) => p.get_ref().clone(),
        None => "/".into(),
    };
    let response_codes = match &h.response_codes {
        None => vec![200],
        Some(codes) => {
            if codes.get_ref().is_empty() {
                cx.err(
                    codes.span(),
                    format_args!("{at}.response_codes"),
                    (
                        "empty list".into(),
                        "list at least one status code, e.g. [200]".into(),
                    ),
                );
            }
            codes
                .get_ref()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let path = format!("{at}.response_codes[{i}]");
                    cx.int(&Some(c.clone()), 200u16, (100, 599), &path, "status code")
                })
                .collect()
        }
    };
    ProbeKind::Http {
        request_path,
        host: h.host.as_ref().map(|s| s.get_ref().clone()),
        response_codes,
    }
}

fn udp_kind(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> ProbeKind {
    let request = payload(cx, at, "request", &h.request, &h.request_hex);
    if h.request.is_none() && h.request_hex.is_none() {
        cx.err(
            h.kind.span(),
            format_args!("{at}.request"),
            (
                "a UDP health check needs request or request_hex: the datagram it sends".into(),
                "add request = \"ping\" (text, sent as UTF-8) or request_hex = \"0a0b\" (bytes)"
                    .into(),
            ),
        );
    }
    let response = payload(cx, at, "response", &h.response, &h.response_hex);
    ProbeKind::Udp {
        request: request.unwrap_or_else(|| vec![0]),
        response,
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

/// `check_interval` and `timeout` (HC-3): positive, timeout ≤ interval.
fn timing(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> (Duration, Duration) {
    let check_interval = cx.duration(
        &h.check_interval,
        Duration::from_secs(5),
        format_args!("{at}.check_interval"),
    );
    let timeout = cx.duration(
        &h.timeout,
        Duration::from_secs(5),
        format_args!("{at}.timeout"),
    );
    for (v, d, field) in [
        (&h.check_interval, check_interval, "check_interval"),
        (&h.timeout, timeout, "timeout"),
    ] {
        if let Some(v) = v.as_ref().filter(|_| d.is_zero()) {
            cx.err(
                v.span(),
                format_args!("{at}.{field}"),
                (
                    format!("{field} must be positive"),
                    "use at least \"1s\"".into(),
                ),
            );
        }
    }
    if timeout > check_interval {
        let span = h
            .timeout
            .as_ref()
            .or(h.check_interval.as_ref())
            .map_or(h.name.span(), |v| v.span());
        cx.err(
            span,
            format_args!("{at}.timeout"),
            (
                format!("timeout ({timeout:?}) is longer than check_interval ({check_interval:?})"),
                "make timeout less than or equal to check_interval (HC-3)".into(),
            ),
        );
    }
    (check_interval, timeout)
}
