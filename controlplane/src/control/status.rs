//! `sluice status`: services and their backends from the published
//! snapshot and the shared view, rendered on whichever thread asks, so a
//! status request over a big configuration never holds up a publish.

use ahash::AHashMap as HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use sluice_core::backend::Pool;
use sluice_core::ids::BackendId;
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;

use crate::config::BackendServiceConfig;
use crate::health::{self, FailureReason};
use crate::publish::ServiceReport;

use super::View;

/// Renders the status report (also used by tests).
pub fn render_status(snap: &ForwardingState, view: &View) -> String {
    render_status_counting(snap, view, &mut 0)
}

/// [`render_status`], adding to `work` the table slots and backends it
/// visits: one pass over each service's table and one over its backends,
/// O(M + N) per service.
pub fn render_status_counting(snap: &ForwardingState, view: &View, work: &mut u64) -> String {
    let mut r = Renderer {
        snap,
        view,
        configured: view
            .config
            .iter()
            .flat_map(|c| &c.backend_services)
            .map(|s| (s.name.as_str(), &**s))
            .collect(),
        owned: vec![0u32; snap.backends.len()],
        work,
        // About what it will hold (a backend's line is ~120 bytes), so a
        // status of 100,000 backends is not copied over and over as it grows.
        out: String::with_capacity(LINE_BYTES * (snap.backends.len() + snap.services.len()) + 4096),
    };
    let _ = writeln!(r.out, "generation {}", snap.generation);
    for (svc, report) in snap.services.iter().zip(view.reports.iter()) {
        r.service(svc, report);
    }
    let _ = writeln!(
        r.out,
        "reloads ok {} failed {}",
        view.reloads_ok, view.reloads_failed
    );
    view.fleet
        .write_status(&mut r.out, snap, view.config.as_ref());
    r.out
}

/// A status line's usual length, for the report's first allocation.
const LINE_BYTES: usize = 128;

/// The status report being written.
struct Renderer<'a> {
    snap: &'a ForwardingState,
    view: &'a View,
    /// The running configuration's services by name.
    configured: HashMap<&'a str, &'a BackendServiceConfig>,
    /// Table slots per backend index, counted per service and taken back
    /// to zero as each backend's line is written.
    owned: Vec<u32>,
    work: &'a mut u64,
    out: String,
}

/// What the configuration says about a service's backends, by address.
struct Labels<'a> {
    zones: HashMap<IpAddr, &'a str>,
    failing: HashMap<IpAddr, FailureReason>,
}

impl Renderer<'_> {
    /// A service's line, then one line per backend.
    fn service(&mut self, svc: &ServiceState, report: &ServiceReport) {
        let pool = report
            .active_pool
            .map_or("none (dropping new connections)", pool_name);
        let _ = writeln!(
            self.out,
            "service {}: active pool {pool}, pool epoch {}, eligible {:?}",
            svc.name, svc.pool_epoch, report.eligible
        );
        let slots = self.count_slots(svc);
        let configured = self.configured.get(svc.name.as_str()).copied();
        let labels = Labels {
            zones: zones(self.view, configured),
            failing: last_failures(self.view, configured),
        };
        for &id in &svc.backends {
            *self.work += 1;
            self.backend(id, slots, &labels);
        }
    }

    /// Counts the slots of `svc`'s table per backend index into `owned`;
    /// the table's size (at least 1).
    fn count_slots(&mut self, svc: &ServiceState) -> usize {
        let table = svc.tables.first();
        // A table names only backends of this snapshot, whose indexes are
        // distinct.
        for &id in table.iter().flat_map(|t| t.slots.iter()) {
            if let Some(n) = self.owned.get_mut(id.index()) {
                *n += 1;
            }
        }
        *self.work += table.map_or(0, |t| t.slots.len() as u64);
        table.map_or(0, |t| t.slots.len()).max(1)
    }

    /// One backend's line: state, weight, zone, pool, share of a table of
    /// `slots` slots, next hop and the latest probe failure.
    fn backend(&mut self, id: BackendId, slots: usize, labels: &Labels<'_>) {
        let Some(b) = self.snap.backend(id) else {
            return;
        };
        let owned = self.owned.get_mut(id.index()).map_or(0, std::mem::take);
        let state = match (b.draining_until, b.healthy) {
            (Some(_), _) => "draining",
            (None, true) => "healthy",
            (None, false) => "unhealthy",
        };
        let port = self
            .snap
            .ports
            .get(usize::from(b.egress.port))
            .map_or("?", |p| p.name.as_str());
        let zone = if labels.zones.is_empty() {
            "-"
        } else {
            labels.zones.get(&b.address).copied().unwrap_or("-")
        };
        let out = &mut self.out;
        // Addresses and integers written without the formatter (one line
        // per backend: most of a status of 100,000).
        out.push_str("  backend ");
        push_address(out, b.address);
        out.push_str(" id ");
        push_decimal(out, u64::from(id.0));
        out.push(' ');
        out.push_str(state);
        out.push_str(" weight ");
        push_decimal(out, u64::from(b.weight));
        out.push_str(" zone ");
        out.push_str(zone);
        out.push_str(" pool ");
        out.push_str(pool_name(b.pool));
        let _ = write!(
            out,
            " share {:.2}% next-hop ",
            100.0 * f64::from(owned) / slots as f64
        );
        match b.egress.next_hop_mac {
            Some(m) => {
                push_mac(out, m);
                out.push_str(" via ");
                out.push_str(port);
            }
            None => out.push_str("unresolved"),
        }
        if let Some(reason) = labels.failing.get(&b.address) {
            let _ = write!(out, " last-failure {}", reason.name());
        }
        out.push('\n');
    }
}

/// `n` in decimal, as `Display` writes it.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// An address as `Display` writes it (IPv4 without the formatter).
fn push_address(out: &mut String, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_decimal(out, u64::from(o));
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// `02:00:00:00:00:0a`, without the formatter (one per backend line).
fn push_mac(out: &mut String, m: [u8; 6]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
}

fn pool_name(p: Pool) -> &'static str {
    match p {
        Pool::Primary => "primary",
        Pool::Failover => "failover",
    }
}

/// The zone name of each backend of `svc` that has one.
fn zones<'a>(view: &'a View, svc: Option<&BackendServiceConfig>) -> HashMap<IpAddr, &'a str> {
    let (Some(cfg), Some(svc)) = (view.config.as_ref(), svc) else {
        return HashMap::new();
    };
    svc.backends
        .iter()
        .filter_map(|b| Some((b.address, cfg.zones.get(b.zone?)?.name.as_str())))
        .collect()
}

/// Why the latest probe failed, for each backend of `svc` whose latest
/// probe failed (none without a health check).
fn last_failures(
    view: &View,
    svc: Option<&BackendServiceConfig>,
) -> HashMap<IpAddr, FailureReason> {
    let (Some(cfg), Some(svc)) = (view.config.as_ref(), svc) else {
        return HashMap::new();
    };
    let Some(hc) = svc.health_check.map(|i| &cfg.health_checks[i]) else {
        return HashMap::new();
    };
    if view.health.is_empty() {
        return HashMap::new();
    }
    let si = cfg
        .backend_services
        .iter()
        .position(|s| s.name == svc.name)
        .unwrap_or_default();
    svc.backends
        .iter()
        .filter_map(|b| {
            let st = health::backend_status(&view.health, cfg, si, hc, b.address)?;
            Some((b.address, st.last_failure?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config;

    /// `sluice status` is one pass over each table and one over each
    /// service's backends: 2,000 backends over 65,537 slots visit
    /// M + N items, not N × M (131 million, as when each backend's share was
    /// counted over the whole table).
    #[test]
    fn status_work_is_linear_in_table_and_backends() {
        let c = config::load_str(&crate::synthetic::big_config(1, 2000, 65537), "t")
            .unwrap_or_else(|d| panic!("{d}"));
        let mut ids = crate::publish::BackendIds::new();
        let snap = crate::publish::build_forwarding_state(&c, &[], &mut ids, 1);
        let view = View {
            reports: Arc::new(vec![ServiceReport::default()]),
            config: Some(Arc::new(c)),
            ..View::default()
        };
        let mut work = 0;
        let text = render_status_counting(&snap, &view, &mut work);
        assert_eq!(work, 65_537 + 2_000);
        let shares: f64 = text
            .lines()
            .filter_map(|l| {
                l.split(" share ")
                    .nth(1)?
                    .split('%')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum();
        assert_eq!(text.matches("  backend ").count(), 2000);
        assert!((shares - 100.0).abs() < 0.5, "shares add up: {shares}");
    }

    /// HC-1: a backend's line names why its latest probe failed, found by
    /// address and check: two checks of equal parameters share probes
    /// (the second service's backend finds the first check's), a check
    /// on another port does not, and a probe that passed names nothing.
    #[test]
    fn a_backend_line_names_its_latest_probe_failure() {
        let text = r#"
[dataplane]
eal_args = ["--no-huge"]
[[dataplane.port]]
name = "p0"
device = "net_null0"
address = "192.0.2.1/24"
[[health_check]]
name = "a"
type = "TCP"
port = 80
[[health_check]]
name = "b"
type = "TCP"
port = 80
[[health_check]]
name = "c"
type = "TCP"
port = 81
[[backend_service]]
name = "one"
health_check = "a"
backend = [{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }, { address = "192.0.2.11", mac = "02:00:00:00:00:0b" }]
[[backend_service]]
name = "two"
health_check = "b"
backend = [{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }]
[[backend_service]]
name = "three"
health_check = "c"
backend = [{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }]
"#;
        let c = config::load_str(text, "t").unwrap_or_else(|d| panic!("{d}"));
        let mut ids = crate::publish::BackendIds::new();
        let snap = crate::publish::build_forwarding_state(&c, &[], &mut ids, 1);
        let mut health = health::ProbeStatuses::default();
        let status = |failure| {
            let mut s = health::ProbeStatus::new(health::InitialState::Healthy);
            s.last_failure = failure;
            s
        };
        let addr = |a: [u8; 4]| IpAddr::from(a);
        let (a, c3) = (&c.health_checks[0], &c.health_checks[2]);
        health.insert(
            health::probe_key(a, addr([192, 0, 2, 10])),
            status(Some(FailureReason::Timeout)),
        );
        health.insert(health::probe_key(a, addr([192, 0, 2, 11])), status(None));
        health.insert(
            health::probe_key(c3, addr([192, 0, 2, 10])),
            status(Some(FailureReason::Refused)),
        );
        let view = View {
            reports: Arc::new(vec![ServiceReport::default(); 3]),
            config: Some(Arc::new(c)),
            health: Arc::new(health),
            ..View::default()
        };
        let out = render_status(&snap, &view);
        let lines: Vec<&str> = out.lines().filter(|l| l.contains(" backend ")).collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[0].ends_with(" last-failure timeout"), "{out}");
        assert!(!lines[1].contains("last-failure"), "{out}");
        assert!(lines[2].ends_with(" last-failure timeout"), "{out}");
        assert!(lines[3].ends_with(" last-failure refused"), "{out}");
    }

    #[test]
    fn addresses_and_integers_are_written_as_the_formatter_writes_them() {
        for n in [0u64, 7, 10, 255, 4_294_967_295, u64::MAX] {
            let mut out = String::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string());
        }
        for a in [
            "0.0.0.0",
            "10.0.1.255",
            "255.255.255.255",
            "2001:db8::1",
            "::ffff:10.0.0.1",
        ] {
            let a: IpAddr = a.parse().unwrap();
            let mut out = String::new();
            push_address(&mut out, a);
            assert_eq!(out, a.to_string());
        }
    }

    #[test]
    fn a_mac_is_written_as_the_formatter_writes_it() {
        for m in [
            [0u8; 6],
            [2, 0, 0, 0, 0, 0x0a],
            [0xff, 0xab, 0x10, 0x01, 0x9c, 0xe7],
        ] {
            let mut out = String::new();
            push_mac(&mut out, m);
            let expected = m
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            assert_eq!(out, expected);
        }
    }
}
