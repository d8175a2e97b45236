//! A `[[backend_service]]`'s `encapsulation` and its tunnel's keys,
//! checked against the registry in `sluice_core::encap`: the choices are
//! the registered names, and each key, its default and range come from the
//! tunnel that declares it (`Tunnel::KEYS`), so a new tunnel needs nothing
//! here beyond its key's field in `raw::RawService`. A MAC key
//! (`KeyKind::Mac`) has no default: leaving it out is an error.

use sluice_core::encap::{mac_value, KeyKind};

use super::context::Ctx;
use super::model::Encapsulation;
use super::raw::{RawService, TunnelKey};
use super::values;

pub(crate) fn encapsulation(cx: &mut Ctx<'_>, s: &RawService, at: &str) -> Encapsulation {
    let choices: Vec<(&str, Encapsulation)> =
        Encapsulation::ALL.iter().map(|e| (e.name(), *e)).collect();
    let chosen = match &s.encapsulation {
        None => Some(Encapsulation::L2),
        Some(v) => cx.parse(v, format!("{at}.encapsulation"), |t| {
            values::choice(t, &choices)
        }),
    };
    let given = s.tunnel_keys();
    // After an unknown `encapsulation` its own error says it all.
    let Some(encap) = chosen else {
        return Encapsulation::L2;
    };
    for (name, value) in given {
        let Some(span) = value.span() else { continue };
        if encap.keys().iter().any(|k| k.name == name) {
            continue;
        }
        let owner = Encapsulation::ALL
            .iter()
            .find(|e| e.keys().iter().any(|k| k.name == name))
            .map_or("", |e| e.name());
        cx.err(
            span,
            format!("{at}.{name}"),
            (
                format!("{name} applies only to encapsulation = \"{owner}\""),
                format!("remove {name}, or set encapsulation = \"{owner}\""),
            ),
        );
    }
    let encap_span = s.encapsulation.as_ref().map(|v| v.span());
    encap.configure(|key| {
        let field = given
            .iter()
            .find(|(name, _)| *name == key.name)
            .map(|(_, v)| *v);
        let path = format!("{at}.{}", key.name);
        match (key.kind, field) {
            (KeyKind::Int { default, min, max }, Some(TunnelKey::Int(v))) => cx.int(
                v,
                u64::from(default),
                (i64::from(min), i64::from(max)),
                path,
                key.name,
            ),
            (KeyKind::Mac, Some(TunnelKey::Text(Some(v)))) => {
                cx.parse(v, path, values::mac).map_or(0, mac_value)
            }
            (KeyKind::Mac, _) => {
                let span = encap_span.clone().unwrap_or_default();
                cx.err(span, path, missing_mac(encap.name(), key.name));
                0
            }
            // A key declared by a tunnel with no field of its kind in the
            // file's model: the unit test below rules it out.
            _ => key.default_value(),
        }
    })
}

/// The error for a tunnel's MAC key left out: it has no default.
fn missing_mac(tunnel: &str, key: &str) -> values::Problem {
    (
        format!("encapsulation = \"{tunnel}\" needs {key}: the MAC address of the backends' {tunnel} device, the inner frames' destination"),
        format!("set {key} = \"02:..\" and give every backend's {tunnel} device that address (ip link add {tunnel}0 type {tunnel} … address <{key}>)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key a tunnel declares has a field in the file's model, and
    /// every tunnel-key field belongs to a tunnel.
    #[test]
    fn every_registered_key_has_a_field() {
        let raw: RawService = toml::from_str("name = \"s\"").unwrap();
        let fields = raw.tunnel_keys();
        let mut names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
        let mut keys: Vec<&str> = Encapsulation::ALL
            .iter()
            .flat_map(|e| e.keys().iter().map(|k| k.name))
            .collect();
        names.sort_unstable();
        keys.sort_unstable();
        assert_eq!(names, keys);
        // Each field is of its key's kind: an integer, or a string for a MAC.
        for key in Encapsulation::ALL.iter().flat_map(|e| e.keys()) {
            let (_, field) = fields.iter().find(|(n, _)| *n == key.name).unwrap();
            let matches = matches!(
                (key.kind, field),
                (KeyKind::Int { .. }, TunnelKey::Int(_)) | (KeyKind::Mac, TunnelKey::Text(_))
            );
            assert!(matches, "{}", key.name);
        }
    }
}
