//! Validation of a service's QUIC-LB configurations
//! (`[[backend_service.quic_lb]]`) and its backends' server IDs
//! (`quic_server_id`, `quic_server_ids`).
//!
//! A configuration's lengths are the draft's (`CidLengths::new`), its key
//! 16 bytes in hex; every backend of the service has a server ID of the
//! configuration's length for each configuration, unique within it. No
//! message, hint or `Debug` text carries a key.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use ahash::AHashMap;
use toml::Spanned;

use sluice_core::quic_lb::cid::{server_id_value, CONFIG_IDS, MAX_SERVER_ID};
use sluice_core::quic_lb::CidConfigError;

use super::context::Ctx;
use super::model::*;
use super::raw::{RawBackend, RawQuicLb, RawService};
use super::values::Problem;

/// Hex digits of a key: 16 bytes (AES-128).
const KEY_DIGITS: usize = 32;

/// A service's QUIC-LB configurations and its backends' server IDs.
#[derive(Debug, Default)]
pub(super) struct ServiceQuic {
    pub configs: Vec<QuicLbConfig>,
    /// Per backend of the raw table (by position): its server ID in each
    /// of `configs`, in their order (0 where it is in error).
    pub server_ids: Vec<Box<[ServerId]>>,
}

/// Validates the QUIC-LB part of service `s` (`at` is its field path).
pub(super) fn service_quic(cx: &mut Ctx<'_>, s: &RawService, at: &str) -> ServiceQuic {
    if s.quic_lb.is_empty() {
        without_quic_lb(cx, s, at);
        return ServiceQuic::default();
    }
    let tables = configs(cx, s, at);
    let declared: Vec<i64> = s
        .quic_lb
        .iter()
        .map(|t| *t.get_ref().config_id.get_ref())
        .collect();
    let configs: Vec<QuicLbConfig> = tables.iter().map(|(_, c)| c.clone()).collect();
    let mut found: Vec<Vec<Option<Found<'_>>>> = Vec::with_capacity(s.backend.len());
    let mut server_ids = Vec::with_capacity(s.backend.len());
    for (i, b) in s.backend.iter().enumerate() {
        let per_config = backend_ids(cx, b, BackendAt(at, i), &configs, &declared);
        server_ids.push(
            per_config
                .iter()
                .map(|f| f.as_ref().map_or(0, |f| f.value))
                .collect(),
        );
        found.push(per_config);
    }
    unique(cx, at, &configs, &found);
    shared_plain_and_encrypted(cx, at, &configs, &found);
    ServiceQuic {
        configs,
        server_ids,
    }
}

/// A service without `quic_lb` tables: its backends name no server ID.
fn without_quic_lb(cx: &mut Ctx<'_>, s: &RawService, at: &str) {
    for (i, b) in s.backend.iter().enumerate() {
        let b = b.get_ref();
        let spans = [
            (
                "quic_server_id",
                b.quic_server_id.as_ref().map(Spanned::span),
            ),
            (
                "quic_server_ids",
                b.quic_server_ids.as_ref().map(Spanned::span),
            ),
        ];
        for (field, span) in spans {
            let Some(span) = span else { continue };
            cx.report(span, || {
                (
                    format!("{}.{field}", BackendAt(at, i)),
                    (
                        format!(
                            "{field} is set but the service has no [[backend_service.quic_lb]] table"
                        ),
                        format!(
                            "add a [[backend_service.quic_lb]] table (config_id, server_id_length, \
                             nonce_length) to route QUIC by server ID, or remove {field}"
                        ),
                    ),
                )
            });
        }
    }
}

/// The valid configurations of `s`, each with its table's position:
/// lengths the draft allows, a well-formed key, distinct config ids, at
/// most [`CONFIG_IDS`] tables.
fn configs(cx: &mut Ctx<'_>, s: &RawService, at: &str) -> Vec<(usize, QuicLbConfig)> {
    if let Some(extra) = s.quic_lb.get(CONFIG_IDS) {
        cx.err(
            extra.span(),
            format_args!("{at} quic_lb[{CONFIG_IDS}]"),
            (
                format!(
                    "{} quic_lb tables; at most {CONFIG_IDS} (one per config_id, 0 to 6)",
                    s.quic_lb.len()
                ),
                "remove the configurations the servers no longer use".into(),
            ),
        );
    }
    let mut out: Vec<(usize, QuicLbConfig)> = Vec::new();
    // Config id → the table that took it first.
    let mut taken: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for (i, t) in s.quic_lb.iter().enumerate() {
        let t = t.get_ref();
        let tat = format!("{at} quic_lb[{i}]");
        let id = *t.config_id.get_ref();
        if let Some(&(first, offset)) = taken.get(&id) {
            let line = cx.line_of(offset);
            cx.err(
                t.config_id.span(),
                format_args!("{tat}.config_id"),
                (
                    format!("config_id {id} is already used by quic_lb[{first}] (line {line})"),
                    "give each [[backend_service.quic_lb]] of a service its own config_id, 0 to 6"
                        .into(),
                ),
            );
            continue;
        }
        taken.insert(id, (i, t.config_id.span().start));
        let lengths = lengths(cx, t, &tat);
        let key = t.key.as_ref().map(|k| {
            let parsed = key(&k.get_ref().0);
            if let Err(p) = &parsed {
                cx.err(k.span(), format_args!("{tat}.key"), p.clone());
            }
            parsed
        });
        match (lengths, key) {
            (Some(lengths), None) => out.push((i, QuicLbConfig { lengths, key: None })),
            (Some(lengths), Some(Ok(k))) => out.push((
                i,
                QuicLbConfig {
                    lengths,
                    key: Some(QuicLbKey(k)),
                },
            )),
            _ => {}
        }
    }
    out
}

/// A table's lengths, checked by the draft's rules (`CidLengths::new`);
/// its first problem is reported at the field it names.
fn lengths(cx: &mut Ctx<'_>, t: &RawQuicLb, tat: &str) -> Option<CidLengths> {
    let (id, sid, nonce) = (&t.config_id, &t.server_id_length, &t.nonce_length);
    // Out of a byte's range is out of every range: the draft's check then
    // names the field (255 is too large for each of them).
    let byte = |v: &Spanned<i64>| u8::try_from(*v.get_ref()).unwrap_or(u8::MAX);
    let err = match CidLengths::new(byte(id), byte(sid), byte(nonce)) {
        Ok(l) => return Some(l),
        Err(e) => e,
    };
    let (field, span, problem): (&str, Range<usize>, Problem) = match err {
        CidConfigError::ConfigId(_) => (
            "config_id",
            id.span(),
            (
                format!("config_id {} is out of range", id.get_ref()),
                "use 0 to 6: 7 (binary 111) marks connection IDs no configuration routes".into(),
            ),
        ),
        CidConfigError::ServerIdLength(_) => (
            "server_id_length",
            sid.span(),
            (
                format!("server_id_length {} is out of range", sid.get_ref()),
                format!("use 1 to {MAX_SERVER_ID} bytes, the length of the servers' server IDs"),
            ),
        ),
        CidConfigError::NonceLength(_) => (
            "nonce_length",
            nonce.span(),
            (
                format!("nonce_length {} is too short", nonce.get_ref()),
                "use at least 4 bytes (the draft's minimum), as the servers do".into(),
            ),
        ),
        CidConfigError::TooLong(..) => (
            "nonce_length",
            nonce.span(),
            (
                format!(
                    "server_id_length {} and nonce_length {} add up to {} bytes; a QUIC \
                     connection ID holds at most 19 after its first octet",
                    sid.get_ref(),
                    nonce.get_ref(),
                    sid.get_ref().saturating_add(*nonce.get_ref())
                ),
                "shorten nonce_length or server_id_length (together at most 19 bytes)".into(),
            ),
        ),
    };
    cx.err(span, format_args!("{tat}.{field}"), problem);
    None
}

/// A key in hex. The problems never repeat it, nor any of its characters.
fn key(text: &str) -> Result<[u8; 16], Problem> {
    let hint = || {
        format!(
            "give {KEY_DIGITS} hex digits (16 random bytes, e.g. from `openssl rand -hex 16`): \
             the key the servers use for this config_id"
        )
    };
    let t = text.trim();
    if !t.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(("the key is not hex (0-9, a-f)".into(), hint()));
    }
    if t.len() != KEY_DIGITS {
        return Err((
            format!(
                "the key has {} hex digits; a QUIC-LB key is 16 bytes ({KEY_DIGITS} hex digits)",
                t.len()
            ),
            hint(),
        ));
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16)
            .map_err(|_| ("the key is not hex (0-9, a-f)".to_string(), hint()))?;
    }
    Ok(out)
}

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
struct Found<'a> {
    value: ServerId,
    span: Range<usize>,
    field: Which<'a>,
}

/// Backend `b`'s server ID in each of `configs` (None where it has none
/// or it is in error, reported). `declared` are the config ids of every
/// table, valid or not: what `quic_server_ids` keys may name.
fn backend_ids<'a>(
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
fn unique(cx: &mut Ctx<'_>, at: &str, configs: &[QuicLbConfig], found: &[Vec<Option<Found<'_>>>]) {
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
fn shared_plain_and_encrypted(
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

/// Every service with QUIC-LB configurations has a forwarding rule that
/// carries UDP to it (protocol UDP or L3_DEFAULT): QUIC runs over UDP.
pub(super) fn udp_rules(
    cx: &mut Ctx<'_>,
    raw: &[Box<RawService>],
    services: &[Arc<BackendServiceConfig>],
    rules: &[Arc<ForwardingRuleConfig>],
) {
    if services.iter().all(|s| s.quic_lb.is_empty()) {
        return;
    }
    let mut udp = vec![false; services.len()];
    for r in rules {
        if matches!(r.protocol, RuleProtocol::Udp | RuleProtocol::L3Default) {
            if let Some(u) = udp.get_mut(r.backend_service) {
                *u = true;
            }
        }
    }
    for (i, (s, r)) in services.iter().zip(raw).enumerate() {
        if s.quic_lb.is_empty() || udp[i] {
            continue;
        }
        let Some(first) = r.quic_lb.first() else {
            continue;
        };
        let others: Vec<&str> = rules
            .iter()
            .filter(|r| r.backend_service == i)
            .map(|r| r.name.as_str())
            .collect();
        let has = if others.is_empty() {
            "no forwarding_rule sends packets to it".to_string()
        } else {
            format!("its rules ({}) carry TCP only", others.join(", "))
        };
        cx.err(
            first.span(),
            format_args!("backend_service {:?}.quic_lb", s.name),
            (
                "quic_lb needs a UDP forwarding rule".into(),
                format!(
                    "{has}: add a [[forwarding_rule]] with protocol = \"UDP\" (or \"L3_DEFAULT\") \
                     and backend_service = {:?} for the QUIC port, or remove the quic_lb tables",
                    s.name
                ),
            ),
        );
    }
}

/// A server ID as written: 2 hex digits per byte of its length.
pub(crate) fn hex(value: ServerId, len: u8) -> String {
    let len = usize::from(len);
    let bytes = value.to_be_bytes();
    bytes[bytes.len() - len..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The field path of a service's backend `i`, formatted only for an error.
#[derive(Clone, Copy)]
struct BackendAt<'a>(&'a str, usize);

impl std::fmt::Display for BackendAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} backend[{}]", self.0, self.1)
    }
}

#[cfg(test)]
mod tests;
