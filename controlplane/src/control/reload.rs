//! AP-5: reloading the configuration file. The new file is validated
//! first; on any error the running configuration stays. Backends keep
//! their ids, removed ones drain (CT-10).

use std::sync::Arc;

use crate::config::{self, Config};
use crate::health::{self, HealthChecker};

use super::{probe_services, retire, Controller};

impl Controller {
    /// AP-5: re-reads the configuration file. On error the running
    /// configuration stays and the diagnostics are returned.
    pub fn reload(&mut self) -> Result<String, String> {
        let Some(path) = self.path.clone() else {
            return Err("sluice runs without a configuration file path".into());
        };
        match config::load_file(&path) {
            Ok(cfg) => {
                self.apply(cfg)?;
                self.count_reload(true);
                Ok(format!(
                    "reloaded {} (generation {})\n",
                    path.display(),
                    self.generation
                ))
            }
            Err(diags) => {
                self.count_reload(false);
                Err(format!(
                    "{diags}\n{} error(s) in {}; the running configuration is unchanged\n",
                    diags.len(),
                    path.display()
                ))
            }
        }
    }

    /// Counts a reload, applied or refused, for `sluice status`.
    fn count_reload(&self, applied: bool) {
        let mut view = self.shared.lock();
        if applied {
            view.reloads_ok += 1;
        } else {
            view.reloads_failed += 1;
        }
    }

    /// Swaps in a validated configuration. What a running process cannot
    /// change ([`fixed_at_start_changes`]) must stay the same.
    pub fn apply(&mut self, cfg: Config) -> Result<(), String> {
        let fixed = fixed_at_start_changes(&self.cfg.dataplane, &cfg.dataplane);
        if !fixed.is_empty() {
            self.count_reload(false);
            return Err(format!(
                "{} cannot change on reload (ports, their TAPs, queues and memory are set up \
                 at start); restart sluice for that. The running configuration is unchanged.\n",
                fixed.join(", ")
            ));
        }
        let keys = health::probe_keys(&cfg);
        match &self.checker {
            Some(c) => c.set_targets(keys),
            None if !keys.is_empty() => {
                let c = HealthChecker::spawn().map_err(|e| e.to_string())?;
                c.set_targets(keys);
                self.checker = Some(c);
            }
            None => {}
        }
        let missing = self.ids.missing(&cfg);
        if missing > self.ids.assignable() {
            self.count_reload(false);
            return Err(format!(
                "the new configuration adds {missing} backends but only {} backend ids are \
                 free: {} are held by configured backends, backends still draining \
                 (connection_draining_timeout) and ids waiting for their conntrack entries \
                 to expire. Reload again once removed backends have drained, or add fewer \
                 backends at once. The running configuration is unchanged.\n",
                self.ids.assignable(),
                self.ids.held()
            ));
        }
        self.resolve_neighbours_of(&cfg);
        self.id_hold_ms = retire::id_hold_ms(&cfg, self.id_hold_ms);
        self.probe_services = probe_services(&cfg);
        self.cfg = Arc::new(cfg);
        self.rebuild();
        Ok(())
    }
}

/// The `[dataplane]` settings that differ between `old` and `new` although
/// only a restart applies them (EAL, lcores, mempool, conntrack shards,
/// ports and their TAPs are set up once); named as in the file.
pub fn fixed_at_start_changes(
    old: &config::DataplaneConfig,
    new: &config::DataplaneConfig,
) -> Vec<String> {
    let mut changed = Vec::new();
    let mut check = |differs: bool, what: String| {
        if differs {
            changed.push(what);
        }
    };
    check(old.eal_args != new.eal_args, "dataplane.eal_args".into());
    check(old.workers != new.workers, "dataplane.workers".into());
    check(
        old.burst_size != new.burst_size,
        "dataplane.burst_size".into(),
    );
    check(old.mbufs != new.mbufs, "dataplane.mbufs".into());
    check(
        old.conntrack_capacity != new.conntrack_capacity,
        "dataplane.conntrack_capacity".into(),
    );
    if old.ports.len() != new.ports.len() {
        check(true, "the number of dataplane ports".into());
        return changed;
    }
    for (o, n) in old.ports.iter().zip(&new.ports) {
        let at = |field: &str| format!("dataplane.port {:?}.{field}", o.name);
        check(o.name != n.name, at("name"));
        check(o.device != n.device, at("device"));
        check(o.mac != n.mac, at("mac"));
        check(o.ipv4 != n.ipv4, at("address"));
        check(o.ipv6 != n.ipv6, at("address6"));
        check(o.mtu != n.mtu, at("mtu"));
        check(o.tap != n.tap, at("tap"));
        check(o.gateways != n.gateways, at("gateway"));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"
tap = "sl-up"
"#;

    fn dp(text: &str) -> config::DataplaneConfig {
        config::load_str(text, "test.toml").unwrap().dataplane
    }

    /// AP-5: a reload that changes what only a restart applies is refused
    /// and names every such field; backends, rules and the like may change.
    #[test]
    fn ap_5_reload_names_settings_fixed_at_start() {
        let old = dp(BASE);
        assert!(fixed_at_start_changes(&old, &dp(BASE)).is_empty());
        let new = dp(&BASE
            .replace("192.0.2.1/24", "192.0.2.2/24")
            .replace("sl-up", "sl-other")
            .replace("[dataplane]", "[dataplane]\nworkers = 2"));
        assert_eq!(
            fixed_at_start_changes(&old, &new),
            [
                "dataplane.workers",
                "dataplane.port \"uplink\".address",
                "dataplane.port \"uplink\".tap",
            ]
        );
    }
}
