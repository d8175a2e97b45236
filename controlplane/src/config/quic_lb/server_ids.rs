//! A QUIC-LB service's backends' server IDs (`quic_server_id`,
//! `quic_server_ids`): each of its configuration's length, unique per
//! configuration, and the warning when a plaintext and an encrypted
//! configuration share one.

use std::ops::Range;

use ahash::AHashMap;
use toml::Spanned;

use sluice_core::quic_lb::cid::{server_id_value, MAX_SERVER_ID};

use super::super::context::Ctx;
use super::super::model::*;
use super::super::raw::RawBackend;
use super::super::values::Problem;
use super::{hex, BackendAt};

/// A server ID in hex: its length in bytes and its value.
fn server_id(text: &str, field: &str) -> Result<(usize, ServerId), Problem> {
    let hint = || {
        "write 2 hex digits per byte of the server ID, e.g. \"0a0b01\" for server_id_length = 3"
            .to_string()
    };
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err((format!("{field} {text:?} is not hex"), hint()));
    }
    if !t.len().is_multiple_of(2) {
        return Err((
            format!("{field} {text:?} has an odd number of hex digits"),
            hint(),
        ));
    }
    let len = t.len() / 2;
    if len > MAX_SERVER_ID {
        return Err((
            format!("{field} {text:?} is {len} bytes; server IDs are at most {MAX_SERVER_ID}"),
            hint(),
        ));
    }
    let bytes: Vec<u8> = (0..len)
        .filter_map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok())
        .collect();
    Ok((len, server_id_value(&bytes)))
}

/// Which field of a backend gives a server ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which<'a> {
    /// `quic_server_id`, for every configuration.
    Common,
    /// `quic_server_ids."<key>"`, for its configuration.
    Own(&'a str),
}

impl std::fmt::Display for Which<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Which::Common => f.write_str("quic_server_id"),
            Which::Own(k) => write!(f, "quic_server_ids.{k:?}"),
        }
    }
}

/// A server ID as a backend gives it: its length and value, where it is
/// written, and in which field.
#[derive(Clone, Copy)]
struct Written<'a> {
    len: usize,
    value: ServerId,
    at: &'a Spanned<String>,
    field: Which<'a>,
}

/// A backend's server ID for one configuration, and where it is written.
#[derive(Clone, Debug)]
pub(super) struct Found<'a> {
    pub value: ServerId,
    span: Range<usize>,
    field: Which<'a>,
}

/// Backend `b`'s server ID in each of `configs` (None where it has none
/// or it is in error, reported). `declared` are the config ids of every
/// table, valid or not: what `quic_server_ids` keys may name.
pub(super) fn backend_ids<'a>(
    cx: &mut Ctx<'_>,
    b: &'a Spanned<RawBackend>,
    bat: BackendAt<'_>,
    configs: &[QuicLbConfig],
    declared: &[i64],
) -> Vec<Option<Found<'a>>> {
    let raw = b.get_ref();
    let common = raw
        .quic_server_id
        .as_ref()
        .and_then(|v| written(cx, v, Which::Common, bat));
    let common_in_error = common.is_none() && raw.quic_server_id.is_some();
    let (own, own_in_error) = own_ids(cx, raw, bat, declared);
    let mut out = Vec::with_capacity(configs.len());
    let mut missing: Vec<&QuicLbConfig> = Vec::new();
    for c in configs {
        let id = c.lengths.config_id;
        let chosen = own
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, w)| *w)
            .or(common);
        let Some(w) = chosen else {
            if !own_in_error.contains(&id) && !common_in_error {
                missing.push(c);
            }
            out.push(None);
            continue;
        };
        let want = usize::from(c.lengths.server_id);
        if w.len != want {
            wrong_length(cx, &w, bat, id, want, configs.len() > 1);
            out.push(None);
            continue;
        }
        out.push(Some(Found {
            value: w.value,
            span: w.at.span(),
            field: w.field,
        }));
    }
    if !missing.is_empty() {
        report_missing(cx, b, bat, &missing);
    }
    out
}

/// A server ID field parsed; None when it is in error (reported).
fn written<'a>(
    cx: &mut Ctx<'_>,
    v: &'a Spanned<String>,
    field: Which<'a>,
    bat: BackendAt<'_>,
) -> Option<Written<'a>> {
    let what = match field {
        Which::Common => "quic_server_id",
        Which::Own(_) => "quic_server_ids",
    };
    match server_id(v.get_ref(), what) {
        Ok((len, value)) => Some(Written {
            len,
            value,
            at: v,
            field,
        }),
        Err(p) => {
            cx.err(v.span(), format_args!("{bat}.{field}"), p);
            None
        }
    }
}

/// The entries of a backend's `quic_server_ids` by config id, and the
/// config ids whose entry is in error (reported, as are keys that name no
/// configured config id).
fn own_ids<'a>(
    cx: &mut Ctx<'_>,
    raw: &'a RawBackend,
    bat: BackendAt<'_>,
    declared: &[i64],
) -> (Vec<(u8, Written<'a>)>, Vec<u8>) {
    let mut own = Vec::new();
    let mut in_error = Vec::new();
    let Some(map) = &raw.quic_server_ids else {
        return (own, in_error);
    };
    for (k, v) in map.get_ref() {
        let field = Which::Own(k);
        let id = k
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|id| declared.contains(id))
            .and_then(|id| u8::try_from(id).ok());
        let Some(id) = id else {
            let listed: Vec<String> = declared.iter().map(i64::to_string).collect();
            cx.err(
                map.span(),
                format_args!("{bat}.{field}"),
                (
                    format!(
                        "quic_server_ids names config id {k:?}, which no \
                         [[backend_service.quic_lb]] of the service has"
                    ),
                    format!(
                        "use a configured config_id ({}), or remove the entry",
                        listed.join(", ")
                    ),
                ),
            );
            continue;
        };
        if own.iter().any(|(k, _)| *k == id) || in_error.contains(&id) {
            cx.err(
                v.span(),
                format_args!("{bat}.{field}"),
                (
                    format!("quic_server_ids gives config id {id} twice"),
                    "keep one entry per config id".into(),
                ),
            );
            continue;
        }
        match written(cx, v, field, bat) {
            Some(w) => own.push((id, w)),
            None => in_error.push(id),
        }
    }
    (own, in_error)
}

/// A server ID of another length than its configuration's.
fn wrong_length(
    cx: &mut Ctx<'_>,
    w: &Written<'_>,
    bat: BackendAt<'_>,
    id: u8,
    want: usize,
    several: bool,
) {
    let (field, len, text) = (w.field, w.len, w.at.get_ref());
    let own_hint = if field == Which::Common && several {
        format!(", or give config_id {id} its own with quic_server_ids = {{ \"{id}\" = \"…\" }}")
    } else {
        String::new()
    };
    cx.err(
        w.at.span(),
        format_args!("{bat}.{field}"),
        (
            format!(
                "{field} {text:?} is {len} bytes; quic_lb config_id {id} has \
                 server_id_length = {want}"
            ),
            format!(
                "write {} hex digits, the server ID the servers encode for config_id \
                 {id}{own_hint}",
                2 * want
            ),
        ),
    );
}

/// A backend without a server ID for the configurations `missing`.
fn report_missing(
    cx: &mut Ctx<'_>,
    b: &Spanned<RawBackend>,
    bat: BackendAt<'_>,
    missing: &[&QuicLbConfig],
) {
    cx.report(b.span(), || {
        let ids: Vec<String> = missing
            .iter()
            .map(|c| c.lengths.config_id.to_string())
            .collect();
        let digits = 2 * usize::from(missing[0].lengths.server_id);
        (
            bat.to_string(),
            (
                format!("no QUIC-LB server ID for config_id {}", ids.join(", ")),
                format!(
                    "add quic_server_id = \"<{digits} hex digits>\" (every config) or \
                     quic_server_ids = {{ \"{}\" = \"<{digits} hex digits>\" }}",
                    ids[0]
                ),
            ),
        )
    });
}

/// Server IDs are unique per configuration within the service: a
/// connection ID names one server.
pub(super) fn unique(
    cx: &mut Ctx<'_>,
    at: &str,
    configs: &[QuicLbConfig],
    found: &[Vec<Option<Found<'_>>>],
) {
    for (k, c) in configs.iter().enumerate() {
        let mut first: AHashMap<ServerId, (usize, usize)> = AHashMap::with_capacity(found.len());
        for (i, per_config) in found.iter().enumerate() {
            let Some(f) = per_config.get(k).and_then(Option::as_ref) else {
                continue;
            };
            let Some(&(j, offset)) = first.get(&f.value) else {
                first.insert(f.value, (i, f.span.start));
                continue;
            };
            let line = cx.line_of(offset);
            cx.report(f.span.clone(), || {
                (
                    format!("{}.{}", BackendAt(at, i), f.field),
                    (
                        format!(
                            "server ID {} of config_id {} is also backend[{j}]'s (line {line})",
                            hex(f.value, c.lengths.server_id),
                            c.lengths.config_id
                        ),
                        "give each backend of the service its own server ID in each \
                         configuration: a connection ID names one server"
                            .into(),
                    ),
                )
            });
        }
    }
}

/// Warns, once per pair, when a plaintext and an encrypted configuration
/// give a backend the same server ID: the draft asks for separate
/// allocations, since the plaintext ID names the server to any observer.
pub(super) fn shared_plain_and_encrypted(
    cx: &mut Ctx<'_>,
    at: &str,
    configs: &[QuicLbConfig],
    found: &[Vec<Option<Found<'_>>>],
) {
    for (p, plain) in configs.iter().enumerate() {
        if plain.key.is_some() {
            continue;
        }
        for (e, enc) in configs.iter().enumerate() {
            if enc.key.is_none() || enc.lengths.server_id != plain.lengths.server_id {
                continue;
            }
            let shared = |per_config: &Vec<Option<Found<'_>>>| match (
                per_config.get(p),
                per_config.get(e),
            ) {
                (Some(Some(a)), Some(Some(b))) => a.value == b.value,
                _ => false,
            };
            let mut backends = found.iter().enumerate().filter(|(_, f)| shared(f));
            let Some((i, first)) = backends.next() else {
                continue;
            };
            let more = backends.count();
            let Some(f) = first[e].as_ref() else { continue };
            let span = f.span.clone();
            cx.warn(span, || {
                let also = match more {
                    0 => String::new(),
                    1 => " (and 1 more backend does)".into(),
                    n => format!(" (and {n} more backends do)"),
                };
                (
                    format!("{}.{}", BackendAt(at, i), f.field),
                    (
                        format!(
                            "backend[{i}] has the same server ID {} in plaintext config_id {} and \
                             encrypted config_id {}{also}",
                            hex(f.value, enc.lengths.server_id),
                            plain.lengths.config_id,
                            enc.lengths.config_id
                        ),
                        format!(
                            "allocate server IDs separately for plaintext and encrypted \
                             configurations (the draft asks it: a plaintext ID names its server \
                             to any observer): give config_id {} its own with quic_server_ids",
                            enc.lengths.config_id
                        ),
                    ),
                )
            });
        }
    }
}
