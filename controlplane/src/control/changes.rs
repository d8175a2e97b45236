//! What a reload changed, in one line for the log: services, backends,
//! rules and health checks added, removed or changed, by name.

use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::hash::Hash;
use std::net::IpAddr;

use crate::config::{BackendConfig, BackendServiceConfig, Config};

/// `services +api -old ~web; backends +web/10.0.0.3 -web/10.0.0.1; ...`,
/// or `no change` when the two configurations are the same. Items are
/// compared as values, one map lookup each, and only what differs is
/// formatted; backends are compared only within services that differ, so
/// a reload that changes one of 10,000 services looks at that service's
/// backends alone.
pub(super) fn describe(old: &Config, new: &Config) -> String {
    let services = Diff::of(
        old.backend_services.iter().map(|s| (s.name.as_str(), s)),
        new.backend_services.iter().map(|s| (s.name.as_str(), s)),
    );
    let mut backends = Diff::default();
    backends
        .added
        .extend(services.added.iter().flat_map(|(_, s)| service_backends(s)));
    backends.removed.extend(
        services
            .removed
            .iter()
            .flat_map(|(_, s)| service_backends(s)),
    );
    for (_, o, n) in &services.changed {
        backends.merge(Diff::of(service_backends(o), service_backends(n)));
    }
    let rules = Diff::of(
        old.forwarding_rules.iter().map(|r| (r.name.as_str(), r)),
        new.forwarding_rules.iter().map(|r| (r.name.as_str(), r)),
    );
    let checks = Diff::of(
        old.health_checks.iter().map(|h| (h.name.as_str(), h)),
        new.health_checks.iter().map(|h| (h.name.as_str(), h)),
    );
    let parts: Vec<String> = [
        services.line("services"),
        backends.line("backends"),
        rules.line("rules"),
        checks.line("health checks"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "no change".into()
    } else {
        parts.join("; ")
    }
}

/// A service's backends keyed `service/address`.
fn service_backends(
    s: &BackendServiceConfig,
) -> impl Iterator<Item = (BackendKey<'_>, &BackendConfig)> {
    s.backends
        .iter()
        .map(move |b| (BackendKey(&s.name, b.address), b))
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct BackendKey<'a>(&'a str, IpAddr);

impl Display for BackendKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

/// Items only in the new configuration, only in the old, and in both with
/// another value, each with its key.
struct Diff<K, T> {
    added: Vec<(K, T)>,
    removed: Vec<(K, T)>,
    changed: Vec<(K, T, T)>,
}

impl<K, T> Default for Diff<K, T> {
    fn default() -> Self {
        Self {
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash + Display, T: Copy + PartialEq> Diff<K, T> {
    fn of(old: impl Iterator<Item = (K, T)>, new: impl Iterator<Item = (K, T)>) -> Self {
        let mut d = Self::default();
        // Items in the same order on both sides (a reload that changed a
        // few values) are compared in step, without hashing; the maps
        // take what is left from the first key that differs.
        let mut old = old.peekable();
        let mut new = new.peekable();
        while let (Some((ko, vo)), Some((kn, vn))) = (old.peek(), new.peek()) {
            if ko != kn {
                break;
            }
            if vo != vn {
                d.changed.push((*kn, *vo, *vn));
            }
            old.next();
            new.next();
        }
        let old: HashMap<K, T> = old.collect();
        let mut seen = HashSet::with_capacity(old.len());
        for (k, v) in new {
            seen.insert(k);
            match old.get(&k) {
                None => d.added.push((k, v)),
                Some(&o) if o != v => d.changed.push((k, o, v)),
                Some(_) => {}
            }
        }
        d.removed
            .extend(old.into_iter().filter(|(k, _)| !seen.contains(k)));
        d
    }

    fn merge(&mut self, other: Self) {
        self.added.extend(other.added);
        self.removed.extend(other.removed);
        self.changed.extend(other.changed);
    }

    /// `what +added -removed ~changed` (each sorted), None when equal.
    fn line(&self, what: &str) -> Option<String> {
        let sorted = |sign: char, keys: &mut dyn Iterator<Item = K>| {
            let mut texts: Vec<String> = keys.map(|k| format!("{sign}{k}")).collect();
            texts.sort_unstable();
            texts
        };
        let mut items = sorted('+', &mut self.added.iter().map(|(k, _)| *k));
        items.extend(sorted('-', &mut self.removed.iter().map(|(k, _)| *k)));
        items.extend(sorted('~', &mut self.changed.iter().map(|(k, ..)| *k)));
        (!items.is_empty()).then(|| format!("{what} {}", items.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(backends: &str, extra: &str) -> Config {
        let text = format!(
            r#"
[dataplane]
eal_args = ["--no-huge"]
[[dataplane.port]]
name = "p0"
device = "net_null0"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[[backend_service]]
name = "web"
backend = [{backends}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
{extra}"#
        );
        crate::config::load_str(&text, "t.toml").unwrap()
    }

    #[test]
    fn names_what_was_added_removed_and_changed() {
        let a = cfg(
            r#"{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }"#,
            "",
        );
        let b = cfg(
            r#"{ address = "192.0.2.11", mac = "02:00:00:00:00:0b" }"#,
            "[[forwarding_rule]]\nname = \"vip2\"\nvip = \"203.0.113.11\"\nbackend_service = \"web\"\n",
        );
        assert_eq!(describe(&a, &a), "no change");
        assert_eq!(
            describe(&a, &b),
            "services ~web; backends +web/192.0.2.11 -web/192.0.2.10; rules +vip2"
        );
    }

    #[test]
    fn order_alone_is_no_change_and_a_change_after_a_reorder_is_named() {
        let b = r#"{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }"#;
        let rule = |n: &str, v: &str| {
            format!(
                "[[forwarding_rule]]\nname = \"{n}\"\nvip = \"{v}\"\nbackend_service = \"web\"\n"
            )
        };
        let ab = cfg(b, &(rule("a", "203.0.113.1") + &rule("b", "203.0.113.2")));
        let ba = cfg(b, &(rule("b", "203.0.113.2") + &rule("a", "203.0.113.1")));
        let ba2 = cfg(b, &(rule("b", "203.0.113.2") + &rule("a", "203.0.113.3")));
        assert_eq!(describe(&ab, &ba), "no change");
        assert_eq!(describe(&ab, &ba2), "rules ~a");
    }
}
