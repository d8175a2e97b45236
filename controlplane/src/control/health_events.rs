//! Health events: a probe's result changed. Only the services the probe
//! checks are rebuilt, on a copy of the last snapshot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::health::{self, ProbeKey, ProbeStatuses};
use crate::publish::{rebuild_services, HealthChange};

use super::Controller;

impl Controller {
    /// The probes whose state changed since the last step, and when each
    /// health flip among the changes was recorded; flips are logged.
    pub(super) fn take_health_events(&self) -> (Vec<ProbeKey>, Vec<Instant>) {
        let events: Vec<health::Event> = self
            .checker
            .as_ref()
            .map(|c| c.events.try_iter().collect())
            .unwrap_or_default();
        self.log_health_flips(&events);
        let flips = events
            .iter()
            .filter(|e| e.change.health)
            .map(|e| e.at)
            .collect();
        (events.into_iter().map(|e| e.key).collect(), flips)
    }

    /// Health flips recorded at `flips` are in the snapshot published at
    /// `published` (`sluice_health_event_publish_seconds`).
    pub(super) fn flips_published(&self, flips: &[Instant], published: Instant) {
        if flips.is_empty() {
            return;
        }
        let mut v = self.shared.lock();
        for &flipped in flips {
            v.health_publish.observe(flipped, published);
        }
        drop(v);
        let oldest = flips
            .iter()
            .min()
            .map_or(Duration::ZERO, |&f| published.saturating_duration_since(f));
        crate::debug!(
            generation = self.generation,
            "sluice: health: {} flip(s) published, the oldest {:.1} ms after its verdict",
            flips.len(),
            oldest.as_secs_f64() * 1e3
        );
    }

    /// A copy of every probe's state (None without health checks).
    pub(super) fn probe_status(&self) -> Option<ProbeStatuses> {
        self.checker
            .as_ref()
            .map(|c| c.status.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Counters (probes, latency) move without state changes; they are
    /// copied for the metrics now and then, not every 10 ms tick.
    pub(super) fn refresh_probe_counters(&mut self) {
        let Some(health) = self.probe_status() else {
            return;
        };
        self.view_refreshed = Instant::now();
        self.shared.lock().health = Arc::new(health);
    }

    /// One log line per probe whose healthy flag flipped: healthy at info,
    /// unhealthy at warning priority, with the backend, the services
    /// whose backend lists name it and (unhealthy) the reason as fields.
    fn log_health_flips(&self, events: &[health::Event]) {
        let Some(checker) = &self.checker else { return };
        if !events.iter().any(|e| e.change.health) {
            return;
        }
        let status = checker.status.lock().unwrap_or_else(|p| p.into_inner());
        for e in events.iter().filter(|e| e.change.health) {
            let Some(s) = status.get(&e.key) else {
                continue;
            };
            let services = self.services_of(&e.key);
            // A data-path probe is one VIP's: the line says which.
            let via = match e.key.route {
                health::Route::Direct => String::new(),
                health::Route::Data { vip } => format!(" through VIP {vip}"),
            };
            if s.state.healthy {
                crate::info!(
                    backend = %e.key.addr,
                    service = %services,
                    "sluice: health: backend {}{via} is healthy (weight {}, {} consecutive successes)",
                    e.key.addr,
                    s.state.weight,
                    s.state.consecutive_successes
                );
            } else {
                let reason = s.last_failure.map_or("none", |r| r.name());
                crate::warn!(
                    backend = %e.key.addr,
                    service = %services,
                    reason,
                    "sluice: health: backend {}{via} is unhealthy (reason {reason}, {} consecutive failures)",
                    e.key.addr,
                    s.state.consecutive_failures
                );
            }
        }
    }

    /// The names of the services the probe `key` checks a backend of,
    /// comma-separated, each once.
    fn services_of(&self, key: &ProbeKey) -> String {
        let mut names: Vec<&str> = Vec::new();
        for &(service, _) in self.probe_services.get(key).into_iter().flatten() {
            let name = self.cfg.backend_services[service].name.as_str();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names.join(",")
    }

    /// Health events for the probes `keys`: rebuilds and publishes only
    /// the services those probes check (nothing when the running
    /// configuration has none of them); returns when it published. Work:
    /// the events' backends, then eligibility and table per touched
    /// service.
    pub(super) fn publish_health(&mut self, keys: &[ProbeKey]) -> Option<Instant> {
        let status_map = Arc::clone(&self.checker.as_ref()?.status);
        let started = Instant::now();
        let changes = {
            let status = status_map.lock().unwrap_or_else(|p| p.into_inner());
            health_changes(&self.probe_services, &status, keys)
        };
        if changes.is_empty() {
            return None;
        }
        let prev = self.cell.load();
        let prev_reports = Arc::clone(&self.shared.view().reports);
        self.generation += 1;
        let (state, reports) = rebuild_services(
            &prev,
            &prev_reports,
            &self.cfg,
            &mut self.memory,
            &changes,
            self.generation,
        );
        drop(prev);
        self.retired.push(self.cell.publish(state));
        let published = Instant::now();
        self.retire();
        super::log_pool_changes(&prev_reports, &reports);
        let mut v = self.shared.lock();
        // After the publish: the readers' copy of the probe states, which
        // must agree with the snapshot (`sluice_backend_healthy`), takes
        // the published probes' states. In place: it is copied whole only
        // if a reader still holds it, not on every flip of 100,000 probes.
        copy_statuses(&status_map, keys, Arc::make_mut(&mut v.health));
        v.reports = Arc::new(reports);
        v.last_build_seconds = published.duration_since(started).as_secs_f64();
        drop(v);
        self.digests_due = true;
        Some(published)
    }
}

/// `keys`' statuses from the checker's `status` into `copy` (a probe the
/// checker no longer has leaves it).
fn copy_statuses(status: &health::StatusMap, keys: &[ProbeKey], copy: &mut ProbeStatuses) {
    let status = status.lock().unwrap_or_else(|p| p.into_inner());
    for key in keys {
        match status.get(key) {
            Some(s) => {
                copy.insert(key.clone(), s.clone());
            }
            None => {
                copy.swap_remove(key);
            }
        }
    }
}

/// The backends (service index, position) each probe checks; a
/// process-local map (the fast keyed hasher: rebuilt on every reload, one
/// entry per probe).
pub type ProbeServices = ahash::AHashMap<ProbeKey, Vec<(usize, usize)>>;

/// The backends (service index, position) each health probe of `cfg`
/// checks.
pub fn probe_services(cfg: &Config) -> ProbeServices {
    let mut out = ProbeServices::default();
    for (si, s) in cfg.backend_services.iter().enumerate() {
        let Some(hc) = s.health_check.map(|i| &cfg.health_checks[i]) else {
            continue;
        };
        for (position, b) in s.backends.iter().enumerate() {
            for key in health::backend_probe_keys(cfg, si, hc, b.address) {
                out.entry(key).or_default().push((si, position));
            }
        }
    }
    out
}

/// The backend changes that health events for the probes `keys` make:
/// one per (service, position) in `probe_services` that a probe checks,
/// with the probe's state in `status` (a probe without one is skipped).
pub fn health_changes(
    probe_services: &ProbeServices,
    status: &ProbeStatuses,
    keys: &[ProbeKey],
) -> Vec<HealthChange> {
    let mut changes = Vec::new();
    for key in keys {
        let Some(s) = status.get(key) else { continue };
        for &(service, position) in probe_services.get(key).into_iter().flatten() {
            changes.push(HealthChange {
                service,
                position,
                healthy: s.state.healthy,
                weight: s.state.weight,
            });
        }
    }
    changes
}
