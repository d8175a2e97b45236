//! A `[[backend_service]]`'s `encapsulation` and its tunnel's keys,
//! checked against the registry in `sluice_core::encap`: the choices are
//! the registered names, and each key, its default and range come from the
//! tunnel that declares it (`Tunnel::KEYS`), so a new tunnel needs nothing
//! here beyond its key's field in `raw::RawService`.

use super::context::Ctx;
use super::model::Encapsulation;
use super::raw::RawService;
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
        let Some(v) = value else { continue };
        if encap.keys().iter().any(|k| k.name == name) {
            continue;
        }
        let owner = Encapsulation::ALL
            .iter()
            .find(|e| e.keys().iter().any(|k| k.name == name))
            .map_or("", |e| e.name());
        cx.err(
            v.span(),
            format!("{at}.{name}"),
            (
                format!("{name} applies only to encapsulation = \"{owner}\""),
                format!("remove {name}, or set encapsulation = \"{owner}\""),
            ),
        );
    }
    encap.configure(|key| {
        let value = given
            .iter()
            .find(|(name, _)| *name == key.name)
            .and_then(|(_, v)| v.as_ref());
        cx.int(
            &value.cloned(),
            key.default,
            (i64::from(key.min), i64::from(key.max)),
            format!("{at}.{}", key.name),
            key.name,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key a tunnel declares has a field in the file's model, and
    /// every tunnel-key field belongs to a tunnel.
    #[test]
    fn every_registered_key_has_a_field() {
        let raw: RawService = toml::from_str("name = \"s\"").unwrap();
        let mut fields: Vec<&str> = raw.tunnel_keys().iter().map(|(n, _)| *n).collect();
        let mut keys: Vec<&str> = Encapsulation::ALL
            .iter()
            .flat_map(|e| e.keys().iter().map(|k| k.name))
            .collect();
        fields.sort_unstable();
        keys.sort_unstable();
        assert_eq!(fields, keys);
    }
}
