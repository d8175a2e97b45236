//! AP-5: reloading the configuration file. The new file is validated
//! first; on any error the running configuration stays. Backends keep
//! their ids, removed ones drain (CT-10).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{self, Config, Diagnostics};
use crate::health::{self, HealthChecker};

use super::rebuild::{ProbeStates, Rebuilt, Rules};
use super::{probe_services, retire, Controller};

/// Why a reload was refused. In every case the running configuration
/// stays as it was; each text says so and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The controller was started from a configuration held in memory.
    #[error("sluice runs without a configuration file path: nothing to reload\n")]
    NoPath,
    /// The file does not validate; the diagnostics name file, line and
    /// field. Printed as `check-config` prints it: the first
    /// [`config::KEPT`] errors and how many more.
    #[error("{}", invalid_text(.path, .diagnostics, config::KEPT, usize::MAX))]
    Invalid {
        path: PathBuf,
        diagnostics: Diagnostics,
    },
    /// Settings only a restart applies differ ([`fixed_at_start_changes`]).
    #[error(
        "{} cannot change on reload (ports, their TAPs, queues, memory and the metrics \
         listener are set up at start); restart sluice for that. The running \
         configuration is unchanged.\n",
        .fields.join(", ")
    )]
    FixedAtStart { fields: Vec<String> },
    /// The new configuration adds more backends than there are free ids.
    #[error(
        "the new configuration adds {missing} backends but only {free} backend ids are \
         free: {held} are held by configured backends, backends still draining \
         (connection_draining_timeout) and ids waiting for their conntrack entries \
         to expire. Reload again once removed backends have drained, or add fewer \
         backends at once. The running configuration is unchanged.\n"
    )]
    BackendIds {
        missing: usize,
        free: usize,
        held: usize,
    },
    /// The first health check of a configuration that had none needs the
    /// prober's thread, which could not start.
    #[error(
        "cannot start the health checker thread for the new configuration's health checks: \
         {0}. The running configuration is unchanged.\n"
    )]
    HealthChecker(#[source] std::io::Error),
}

impl Controller {
    /// AP-5: re-reads the configuration file and applies it. On error the
    /// running configuration stays. Every outcome is counted for
    /// `sluice status` and the metrics.
    pub fn reload(&mut self) -> Result<String, ReloadError> {
        let result = self.reload_file();
        let mut view = self.shared.lock();
        match &result {
            Ok(_) => view.reloads_ok += 1,
            Err(_) => view.reloads_failed += 1,
        }
        view.last_reload = Some(super::shared::LastReload {
            ok: result.is_ok(),
            unix_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            error: result.as_ref().err().map(kept_error),
        });
        result
    }

    fn reload_file(&mut self) -> Result<String, ReloadError> {
        let started = std::time::Instant::now();
        let path = self.path.clone().ok_or(ReloadError::NoPath)?;
        let cfg = load_in_background(&mut self.loader, &path).map_err(|diagnostics| {
            ReloadError::Invalid {
                path: path.clone(),
                diagnostics,
            }
        })?;
        let changes = super::changes::describe(&self.cfg, &cfg);
        let built = self.apply(cfg)?;
        Ok(format!(
            "reloaded {} (generation {}, {} ms, {} of {} services built): {changes}\n",
            path.display(),
            self.generation,
            started.elapsed().as_millis(),
            built.services_built,
            self.cfg.backend_services.len()
        ))
    }

    /// Swaps in a validated configuration. What a running process cannot
    /// change ([`fixed_at_start_changes`]) must stay the same. Everything
    /// that may refuse is checked before anything changes.
    fn apply(&mut self, cfg: Config) -> Result<Rebuilt, ReloadError> {
        let mut fields = fixed_at_start_changes(&self.cfg.dataplane, &cfg.dataplane);
        // The admin listener is bound once, before EAL, where a taken
        // address fails the start by name.
        if self.cfg.metrics.listen != cfg.metrics.listen {
            fields.push("metrics.listen".into());
        }
        if !fields.is_empty() {
            return Err(ReloadError::FixedAtStart { fields });
        }
        let missing = self.ids.missing(&cfg);
        if missing > self.ids.assignable() {
            return Err(ReloadError::BackendIds {
                missing,
                free: self.ids.assignable(),
                held: self.ids.held(),
            });
        }
        // The probes follow the file only if they changed: with 100,000
        // backends checked, the key list, the checker's diff of it, the
        // probe-to-backend map and a copy of every probe's state are most
        // of a one-weight reload.
        let probes = if same_probes(&self.cfg, &cfg) {
            ProbeStates::Published
        } else {
            let keys = health::probe_keys(&cfg);
            match &self.checker {
                Some(c) => c.set_targets(keys),
                None if !keys.is_empty() => {
                    let c = HealthChecker::spawn_with(Some(self.data_path()))
                        .map_err(ReloadError::HealthChecker)?;
                    c.set_targets(keys);
                    self.checker = Some(c);
                }
                None => {}
            }
            self.probe_services = probe_services(&cfg);
            ProbeStates::Copy
        };
        // The same rules in the same order (each names its service by
        // position, so a service moved makes them differ): the published
        // rule table is kept.
        let rules = if self.cfg.forwarding_rules == cfg.forwarding_rules {
            Rules::Published
        } else {
            Rules::Build
        };
        // With the probes as they were, a reload that changed some services
        // in place builds only those.
        let changed = match probes {
            ProbeStates::Published => crate::publish::changed_in_place(&self.cfg, &cfg),
            ProbeStates::Copy => None,
        };
        self.resolve_neighbours_of(&cfg);
        self.id_hold_ms = retire::id_hold_ms(&cfg, self.id_hold_ms);
        self.cfg = Arc::new(cfg);
        Ok(self.rebuild_services_of(probes, rules, changed))
    }
}

/// Whether `old` and `new` need the same probes checking the same
/// backends at the same places: the same health checks, and per service
/// (in order) the same check and the same backend addresses in the same
/// order — what [`health::probe_keys`] and [`probe_services`] are made
/// of. One pass over the backends, no key built.
fn same_probes(old: &Config, new: &Config) -> bool {
    old.health_checks == new.health_checks
        && old.probe_vips == new.probe_vips
        && old.backend_services.len() == new.backend_services.len()
        && old
            .backend_services
            .iter()
            .zip(&new.backend_services)
            .all(|(a, b)| {
                a.health_check == b.health_check
                    && (a.health_check.is_none()
                        || a.backends.len() == b.backends.len()
                            && a.backends
                                .iter()
                                .zip(&b.backends)
                                .all(|(x, y)| x.address == y.address))
            })
}

/// Reads and validates the file on a thread of its own at background
/// priority (`crate::background`), while the control thread waits: the
/// parse of a large file is most of a reload, and a `sluice status`
/// render on the same core then goes first. On this thread if no thread
/// can start.
fn load_in_background(loader: &mut config::Loader, path: &Path) -> Result<Config, Diagnostics> {
    std::thread::scope(|s| {
        let job = std::thread::Builder::new()
            .name("sluice-load".into())
            .spawn_scoped(s, || {
                crate::background::lower_this_thread("the configuration loader");
                loader.load_file(path)
            });
        match job {
            Ok(job) => job
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => {
                crate::warn!("sluice: reload parses on the control thread: {e}");
                // Without the loader's tables: the whole file, parsed here.
                config::load_file(path)
            }
        }
    })
}

/// Errors of a refused file kept for `sluice status` (and its JSON), and
/// the most bytes of them: the status shows why the last reload failed,
/// `sluice check-config FILE` lists the errors.
const KEPT_ERRORS_SHOWN: usize = 10;
const MAX_KEPT_ERROR_BYTES: usize = 4096;

/// A refused reload's text as kept for `sluice status`: a few KB at most,
/// whatever the file, so a status reply or a metrics scrape never carries
/// megabytes of errors.
fn kept_error(e: &ReloadError) -> String {
    match e {
        ReloadError::Invalid { path, diagnostics } => {
            invalid_text(path, diagnostics, KEPT_ERRORS_SHOWN, MAX_KEPT_ERROR_BYTES)
        }
        other => bounded(&other.to_string(), MAX_KEPT_ERROR_BYTES),
    }
}

/// A refused file's errors (the first `shown`, at most `max_bytes` of
/// them) and the count, path and outcome.
fn invalid_text(path: &Path, diagnostics: &Diagnostics, shown: usize, max_bytes: usize) -> String {
    let listed = diagnostics.shown(shown).to_string();
    format!(
        "{}\n{} error(s) in {}; the running configuration is unchanged\n",
        bounded(&listed, max_bytes),
        diagnostics.len(),
        path.display()
    )
}

/// `text` cut to whole lines within `max_bytes`, saying how much was cut.
fn bounded(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let within = (0..=max_bytes)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let end = text[..within].rfind('\n').unwrap_or(within);
    format!(
        "{}\n… ({} more bytes not kept)",
        &text[..end],
        text.len() - end
    )
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
    check(
        old.idle != new.idle,
        "dataplane.idle or dataplane.idle_sleep_max_us".into(),
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

    /// AP-5: every refused reload says why, is counted, and leaves the
    /// running configuration; a valid file then reloads.
    #[test]
    fn ap_5_refused_reloads_say_why_and_are_counted() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        std::fs::write(&path, BASE).unwrap();
        let cfg = config::load_file(&path).unwrap();
        let clock = Box::new(|| sluice_core::time::Millis(0));
        let mut c = Controller::new(cfg.clone(), Some(path.clone()), vec![], clock).unwrap();

        std::fs::write(
            &path,
            BASE.replace("[dataplane]", "[dataplane]\nworkers = 2"),
        )
        .unwrap();
        let e = c.reload().unwrap_err();
        assert!(
            matches!(&e, ReloadError::FixedAtStart { fields } if fields == &["dataplane.workers"]),
            "{e}"
        );
        assert!(e
            .to_string()
            .starts_with("dataplane.workers cannot change on reload"));

        std::fs::write(&path, "[dataplane\n").unwrap();
        let e = c.reload().unwrap_err().to_string();
        assert!(
            e.contains(&format!("1 error(s) in {}", path.display())),
            "{e}"
        );
        assert!(e.contains("the running configuration is unchanged"), "{e}");

        std::fs::write(&path, BASE).unwrap();
        let ok = c.reload().unwrap();
        assert!(
            ok.starts_with(&format!("reloaded {}", path.display())),
            "{ok}"
        );
        let view = c.shared.view();
        assert_eq!((view.reloads_ok, view.reloads_failed), (1, 2));

        let clock = Box::new(|| sluice_core::time::Millis(0));
        let mut in_memory = Controller::new(cfg, None, vec![], clock).unwrap();
        assert!(matches!(in_memory.reload(), Err(ReloadError::NoPath)));
        assert_eq!(in_memory.shared.view().reloads_failed, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A refused file with a thousand errors: the reply (and the log)
    /// print the first `config::KEPT`, `sluice status` keeps a few KB;
    /// both say how many more there are and that nothing changed.
    #[test]
    fn refused_reload_text_is_bounded() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        std::fs::write(&path, BASE).unwrap();
        let cfg = config::load_file(&path).unwrap();
        let clock = Box::new(|| sluice_core::time::Millis(0));
        let mut c = Controller::new(cfg, Some(path.clone()), vec![], clock).unwrap();
        let twice = "  { address = \"192.0.2.10\" },\n".repeat(1001);
        let refused = format!("{BASE}[[backend_service]]\nname = \"web\"\nbackend = [\n{twice}]\n");
        std::fs::write(&path, refused).unwrap();

        let reply = c.reload().unwrap_err().to_string();
        assert_eq!(reply.matches(": error: ").count(), config::KEPT, "{reply}");
        assert!(reply.contains("… and 900 more errors"), "{reply}");
        assert!(reply.contains("1000 error(s) in"), "{reply}");
        assert!(
            reply.contains("the running configuration is unchanged"),
            "{reply}"
        );

        let kept = c.shared.view().last_reload.unwrap().error.unwrap();
        assert!(
            kept.len() <= MAX_KEPT_ERROR_BYTES + 200,
            "{} bytes",
            kept.len()
        );
        assert_eq!(
            kept.matches(": error: ").count(),
            KEPT_ERRORS_SHOWN,
            "{kept}"
        );
        assert!(kept.contains("… and 990 more errors"), "{kept}");
        assert!(
            kept.ends_with("the running configuration is unchanged\n"),
            "{kept}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Text past the bound is cut at a line, saying how much is cut.
    #[test]
    fn bounded_cuts_whole_lines() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(
            bounded("line one\nline two\n", 12),
            "line one\n… (10 more bytes not kept)"
        );
        assert_eq!(bounded("ééé", 3), "é\n… (4 more bytes not kept)");
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
            .replace(
                "[dataplane]",
                "[dataplane]\nworkers = 2\nidle = \"adaptive\"",
            ));
        assert_eq!(
            fixed_at_start_changes(&old, &new),
            [
                "dataplane.workers",
                "dataplane.idle or dataplane.idle_sleep_max_us",
                "dataplane.port \"uplink\".address",
                "dataplane.port \"uplink\".tap",
            ]
        );
    }

    /// The probe targets of a reload are rebuilt only when what they are
    /// made of changed (HC-1 probes per checked backend): a weight, a
    /// rule or an unchecked service's backends leave them; a checked
    /// address, its order, a check's parameter or a service's check do not.
    #[test]
    fn same_probes_only_when_checked_addresses_and_checks_agree() {
        let file = |web: &str, dns: &str, interval: &str| {
            format!(
                "{BASE}
[[health_check]]
name = \"tcp\"
type = \"TCP\"
port = 80
check_interval = \"{interval}\"
[[backend_service]]
name = \"web\"
health_check = \"tcp\"
backend = [ {web} ]
[[backend_service]]
name = \"dns\"
backend = [ {dns} ]
"
            )
        };
        let a = "{ address = \"192.0.2.10\", mac = \"02:00:00:00:00:10\" }";
        let a3 = "{ address = \"192.0.2.10\", mac = \"02:00:00:00:00:10\", weight = 3 }";
        let b = "{ address = \"192.0.2.11\", mac = \"02:00:00:00:00:11\" }";
        let c = "{ address = \"192.0.2.12\", mac = \"02:00:00:00:00:12\" }";
        let load = |t: String| config::load_str(&t, "test.toml").unwrap_or_else(|d| panic!("{d}"));
        let old = load(file(&format!("{a}, {b}"), c, "5s"));
        let same = |t: String| same_probes(&old, &load(t));
        assert!(same(file(&format!("{a}, {b}"), c, "5s")));
        assert!(same(file(&format!("{a3}, {b}"), c, "5s")), "a weight");
        assert!(
            same(file(&format!("{a}, {b}"), &format!("{c}, {b}"), "5s")),
            "unchecked"
        );
        assert!(!same(file(&format!("{b}, {a}"), c, "5s")), "order");
        assert!(!same(file(&format!("{a}, {c}"), c, "5s")), "an address");
        assert!(!same(file(a, c, "5s")), "a backend fewer");
        assert!(!same(file(&format!("{a}, {b}"), c, "6s")), "the check");
        let unchecked = file(&format!("{a}, {b}"), c, "5s").replace("health_check = \"tcp\"\n", "");
        assert!(!same(unchecked), "the service's check");
    }

    /// A reload whose forwarding rules are the same (FR-1) keeps the
    /// published rule table; one that changes a rule, or moves the
    /// service a rule names, builds it again with the change.
    #[test]
    fn the_rule_table_is_kept_while_the_rules_are_the_same() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        let file = |weight: u16, port: u16, swapped: bool| {
            let a = format!(
                "[[backend_service]]\nname = \"a\"\nbackend = [{{ address = \"192.0.2.10\", \
                 mac = \"02:00:00:00:00:0a\", weight = {weight} }}]\n"
            );
            let b = "[[backend_service]]\nname = \"b\"\nbackend = [{ address = \"192.0.2.11\", \
                     mac = \"02:00:00:00:00:0b\" }]\n";
            let services = if swapped {
                format!("{b}{a}")
            } else {
                format!("{a}{b}")
            };
            format!(
                "{BASE}{services}[[forwarding_rule]]\nname = \"r\"\nvip = \"203.0.113.10\"\n\
                 protocol = \"TCP\"\nports = \"{port}\"\nbackend_service = \"a\"\n"
            )
        };
        std::fs::write(&path, file(1, 80, false)).unwrap();
        let cfg = config::load_file(&path).unwrap();
        let clock = Box::new(|| sluice_core::time::Millis(0));
        let mut c = Controller::new(cfg, Some(path.clone()), vec![], clock).unwrap();
        fn c_rules(c: &Controller) -> Arc<sluice_core::rules::RuleTable> {
            Arc::clone(&c.snapshots().load().rules)
        }
        let first = c_rules(&c);

        std::fs::write(&path, file(2, 80, false)).unwrap();
        c.reload().unwrap();
        assert!(
            Arc::ptr_eq(&first, &c_rules(&c)),
            "a weight: the table is kept"
        );

        std::fs::write(&path, file(2, 8080, false)).unwrap();
        c.reload().unwrap();
        let changed = c_rules(&c);
        assert!(!Arc::ptr_eq(&first, &changed), "a port: built again");
        let ports: Vec<u16> = changed.rules().map(|r| r.ports.first).collect();
        assert_eq!(ports, [8080]);

        std::fs::write(&path, file(2, 8080, true)).unwrap();
        c.reload().unwrap();
        let moved = c_rules(&c);
        assert!(
            !Arc::ptr_eq(&changed, &moved),
            "the service moved: built again"
        );
        let service: Vec<u16> = moved.rules().map(|r| r.service.0).collect();
        assert_eq!(service, [1], "the rule names service a at its new place");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
