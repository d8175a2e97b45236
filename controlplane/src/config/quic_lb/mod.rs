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

use toml::Spanned;

use sluice_core::quic_lb::cid::{CONFIG_IDS, MAX_SERVER_ID};
use sluice_core::quic_lb::CidConfigError;

use super::context::Ctx;
use super::model::*;
use super::raw::{RawQuicLb, RawService};
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
    let mut found: Vec<Vec<Option<server_ids::Found<'_>>>> = Vec::with_capacity(s.backend.len());
    let mut server_ids = Vec::with_capacity(s.backend.len());
    for (i, b) in s.backend.iter().enumerate() {
        let per_config = server_ids::backend_ids(cx, b, BackendAt(at, i), &configs, &declared);
        server_ids.push(
            per_config
                .iter()
                .map(|f| f.as_ref().map_or(0, |f| f.value))
                .collect(),
        );
        found.push(per_config);
    }
    server_ids::unique(cx, at, &configs, &found);
    server_ids::shared_plain_and_encrypted(cx, at, &configs, &found);
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
pub(super) struct BackendAt<'a>(&'a str, usize);

impl std::fmt::Display for BackendAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} backend[{}]", self.0, self.1)
    }
}

mod server_ids;
#[cfg(test)]
mod tests;
