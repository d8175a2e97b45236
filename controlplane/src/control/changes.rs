//! What a reload changed, in one line for the log: services, backends,
//! rules and health checks added, removed or changed, by name.

use std::collections::BTreeMap;

use crate::config::{BackendConfig, Config};

/// `services +api -old ~web; backends +web/10.0.0.3 -web/10.0.0.1; ...`,
/// or `no change` when the two configurations are the same. Items are
/// compared as values, one map lookup each: a reload of 10,000 services
/// formats none of them.
pub fn describe(old: &Config, new: &Config) -> String {
    let mut parts = Vec::new();
    part(
        &mut parts,
        "services",
        &named(&old.backend_services, |s| s.name.clone()),
        &named(&new.backend_services, |s| s.name.clone()),
    );
    part(&mut parts, "backends", &backends(old), &backends(new));
    part(
        &mut parts,
        "rules",
        &named(&old.forwarding_rules, |r| r.name.clone()),
        &named(&new.forwarding_rules, |r| r.name.clone()),
    );
    part(
        &mut parts,
        "health checks",
        &named(&old.health_checks, |h| h.name.clone()),
        &named(&new.health_checks, |h| h.name.clone()),
    );
    if parts.is_empty() {
        "no change".into()
    } else {
        parts.join("; ")
    }
}

/// Every backend by `service/address`.
fn backends(c: &Config) -> BTreeMap<String, &BackendConfig> {
    c.backend_services
        .iter()
        .flat_map(|s| {
            s.backends
                .iter()
                .map(move |b| (format!("{}/{}", s.name, b.address), b))
        })
        .collect()
}

fn named<T>(items: &[T], name: impl Fn(&T) -> String) -> BTreeMap<String, &T> {
    items.iter().map(|i| (name(i), i)).collect()
}

/// `what +added -removed ~changed`, nothing when equal.
fn part<T: PartialEq>(
    out: &mut Vec<String>,
    what: &str,
    old: &BTreeMap<String, &T>,
    new: &BTreeMap<String, &T>,
) {
    let mut items = Vec::new();
    items.extend(
        new.keys()
            .filter(|k| !old.contains_key(*k))
            .map(|k| format!("+{k}")),
    );
    items.extend(
        old.keys()
            .filter(|k| !new.contains_key(*k))
            .map(|k| format!("-{k}")),
    );
    items.extend(
        new.iter()
            .filter(|(k, v)| old.get(*k).is_some_and(|o| o != *v))
            .map(|(k, _)| format!("~{k}")),
    );
    if !items.is_empty() {
        out.push(format!("{what} {}", items.join(" ")));
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
}
