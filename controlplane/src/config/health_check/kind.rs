//! The kinds of health check: each `type` of a `[[health_check]]` is one
//! [`CheckType`] (its configuration name, the fields only it takes, how
//! they validate), and [`ProbeKind`] holds the validated fields of one —
//! what the prober runs (`crate::health::drivers` keeps one driver per
//! variant). Both are declared by the one list at the bottom.

use super::http::HttpCheck;
use super::tcp::TcpCheck;
use super::udp::UdpCheck;
use crate::config::context::Ctx;
use crate::config::raw::RawHealthCheck;

/// One `type` of health check and its own fields, validated.
pub(crate) trait CheckType: Sized {
    /// The `type` value in the configuration.
    const NAME: &'static str;
    /// The fields only this type takes (named as in
    /// `RawHealthCheck::type_fields`); setting one under another type is
    /// an error.
    const FIELDS: &'static [&'static str];
    /// `port` has no useful default for this type.
    const NEEDS_PORT: bool = false;
    /// Its fields, checked (errors go to `cx`, under `at.<field>`).
    fn validate(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> Self;
}

/// A `type` as the validation uses it: [`CheckType`]'s constants, and
/// its validation producing the [`ProbeKind`].
#[derive(Clone, Copy)]
pub(super) struct Type {
    pub name: &'static str,
    pub fields: &'static [&'static str],
    pub needs_port: bool,
    pub validate: fn(&mut Ctx<'_>, &RawHealthCheck, &str) -> ProbeKind,
}

macro_rules! probe_kinds {
    ($($variant:ident($check:ident)),* $(,)?) => {
        /// One probe kind and its validated fields. Part of the key that
        /// lets services share probes, so two checks differing in any
        /// field probe separately.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum ProbeKind {
            $($variant($check),)*
        }

        /// Every `type`, in the order an unknown one's hint lists them.
        pub(super) const TYPES: &[Type] = &[$(Type {
            name: <$check as CheckType>::NAME,
            fields: <$check as CheckType>::FIELDS,
            needs_port: <$check as CheckType>::NEEDS_PORT,
            validate: |cx, h, at| ProbeKind::$variant(<$check as CheckType>::validate(cx, h, at)),
        },)*];
    };
}

probe_kinds! {
    Tcp(TcpCheck),
    Http(HttpCheck),
    Udp(UdpCheck),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field a type declares has a field in the file's model, and
    /// every type-specific field of the model belongs to a type.
    #[test]
    fn every_declared_field_is_in_the_model() {
        let raw: RawHealthCheck = toml::from_str("name = \"h\"\ntype = \"TCP\"").unwrap();
        let mut fields: Vec<&str> = raw.type_fields().iter().map(|(n, _)| *n).collect();
        let mut declared: Vec<&str> = TYPES
            .iter()
            .flat_map(|t| t.fields.iter().copied())
            .collect();
        fields.sort_unstable();
        declared.sort_unstable();
        declared.dedup();
        assert_eq!(fields, declared);
    }
}
