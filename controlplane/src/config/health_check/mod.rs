//! `[[health_check]]` tables → [`HealthCheckConfig`] (SPEC §7): the
//! fields every check has — port, timing (HC-3), thresholds, initial
//! state — here, and the `type` with the fields that belong to it in one
//! file per type ([`kind`] lists them).

mod http;
mod kind;
mod tcp;
mod udp;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub use http::HttpCheck;
pub use kind::ProbeKind;
pub use tcp::TcpCheck;
pub use udp::UdpCheck;

use super::context::Ctx;
use super::model::{
    BackendServiceConfig, CheckPath, ForwardingRuleConfig, HealthCheckConfig, RuleProtocol,
};
use super::raw::{RawHealthCheck, RawService};
use super::values;
use kind::{Type, TYPES};

pub(crate) fn health_checks_section(
    cx: &mut Ctx<'_>,
    hcs: &[RawHealthCheck],
) -> Vec<HealthCheckConfig> {
    cx.unique(hcs.iter().map(|h| &h.name), "health_check");
    hcs.iter().map(|h| health_check(cx, h)).collect()
}

fn health_check(cx: &mut Ctx<'_>, h: &RawHealthCheck) -> HealthCheckConfig {
    cx.name(&h.name, "health_check");
    let at = format!("health_check {:?}", h.name.get_ref());
    let ty = check_type(cx, h, &at);
    if ty.needs_port && h.port.is_none() {
        cx.err(
            h.kind.span(),
            format_args!("{at}.port"),
            (
                format!("a {} health check needs a port", ty.name),
                format!("set port to the {} port the backends answer on", ty.name),
            ),
        );
    }
    let port = cx.int(
        &h.port,
        80u16,
        (1, 65535),
        format_args!("{at}.port"),
        "port",
    );
    foreign_fields(cx, h, &at, ty);
    let kind = (ty.validate)(cx, h, &at);
    let (check_interval, timeout) = timing(cx, h, &at);
    let healthy_threshold = cx.int(
        &h.healthy_threshold,
        2u32,
        (1, 10),
        format_args!("{at}.healthy_threshold"),
        "threshold",
    );
    let unhealthy_threshold = cx.int(
        &h.unhealthy_threshold,
        3u32,
        (1, 10),
        format_args!("{at}.unhealthy_threshold"),
        "threshold",
    );
    let initially_healthy = h
        .initial_state
        .as_ref()
        .and_then(|v| {
            cx.parse(v, format_args!("{at}.initial_state"), |t| {
                values::choice(t, &[("HEALTHY", true), ("UNHEALTHY", false)])
            })
        })
        .unwrap_or(false);
    let path = h
        .path
        .as_ref()
        .and_then(|v| {
            cx.parse(v, format_args!("{at}.path"), |t| {
                values::choice(
                    t,
                    &[("direct", CheckPath::Direct), ("data", CheckPath::Data)],
                )
            })
        })
        .unwrap_or_default();
    HealthCheckConfig {
        name: h.name.get_ref().clone(),
        kind,
        port,
        check_interval,
        timeout,
        healthy_threshold,
        unhealthy_threshold,
        initially_healthy,
        path,
    }
}

/// Per service, the VIPs its data-path check probes: those of its rules
/// that take the check's protocol (UDP for a UDP check, TCP otherwise)
/// and port. A service whose data-path check no rule takes is an error:
/// its backends could never pass.
pub(crate) fn probe_vips(
    cx: &mut Ctx<'_>,
    raw: &[Box<RawService>],
    checks: &[HealthCheckConfig],
    services: &[Arc<BackendServiceConfig>],
    rules: &[Arc<ForwardingRuleConfig>],
) -> Vec<Vec<IpAddr>> {
    let mut out = vec![Vec::new(); services.len()];
    for (si, (svc, vips)) in services.iter().zip(&mut out).enumerate() {
        let Some(hc) = svc.health_check.and_then(|i| checks.get(i)) else {
            continue;
        };
        if hc.path != CheckPath::Data {
            continue;
        }
        let protocol = match hc.kind {
            ProbeKind::Udp(_) => RuleProtocol::Udp,
            ProbeKind::Tcp(_) | ProbeKind::Http(_) => RuleProtocol::Tcp,
        };
        for r in rules.iter().filter(|r| r.backend_service == si) {
            let takes = matches!(r.protocol, RuleProtocol::L3Default) || r.protocol == protocol;
            if takes && r.ports.matches(Some(hc.port)) && !vips.contains(&r.vip) {
                vips.push(r.vip);
            }
        }
        if vips.is_empty() {
            let span = raw
                .get(si)
                .and_then(|s| s.health_check.as_ref())
                .map_or(0..0, |v| v.span());
            let proto = if protocol == RuleProtocol::Udp {
                "UDP"
            } else {
                "TCP"
            };
            cx.err(
                span,
                format_args!("backend_service {:?}.health_check", svc.name),
                (
                    format!(
                        "health check {:?} probes through the data path (path = \"data\"), \
                         but no forwarding rule of this service takes {proto} port {}",
                        hc.name, hc.port
                    ),
                    format!(
                        "add a forwarding rule for {proto} port {} to this service, set the \
                         check's port to one its rules take, or use path = \"direct\"",
                        hc.port
                    ),
                ),
            );
        }
    }
    out
}

/// The check's `type`. An unknown one is an error, and the fields are
/// then judged as the type that takes the first field set (TCP when none
/// is), so they are checked without a second error per field.
fn check_type(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> Type {
    let choices: Vec<(&str, Type)> = TYPES.iter().map(|t| (t.name, *t)).collect();
    cx.parse(&h.kind, format_args!("{at}.type"), |s| {
        values::choice(s, &choices)
    })
    .unwrap_or_else(|| {
        let first_set = h.type_fields().into_iter().find(|(_, v)| v.is_some());
        first_set
            .and_then(|(field, _)| TYPES.iter().find(|t| t.fields.contains(&field)))
            .unwrap_or(&TYPES[0])
            .to_owned()
    })
}

/// An error for each field set that `ty` does not take, naming the types
/// that do.
fn foreign_fields(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str, ty: Type) {
    for (field, span) in h.type_fields() {
        let Some(span) = span.filter(|_| !ty.fields.contains(&field)) else {
            continue;
        };
        let owners: Vec<&str> = TYPES
            .iter()
            .filter(|t| t.fields.contains(&field))
            .map(|t| t.name)
            .collect();
        let owner = owners.join(" or ");
        let first = owners.first().copied().unwrap_or_default();
        cx.err(
            span,
            format_args!("{at}.{field}"),
            (
                format!("{field} applies only to {owner} health checks"),
                format!("remove {field}, or set type = \"{first}\""),
            ),
        );
    }
}

/// `check_interval` and `timeout` (HC-3): positive, timeout ≤ interval.
fn timing(cx: &mut Ctx<'_>, h: &RawHealthCheck, at: &str) -> (Duration, Duration) {
    let check_interval = cx.duration(
        &h.check_interval,
        Duration::from_secs(5),
        format_args!("{at}.check_interval"),
    );
    let timeout = cx.duration(
        &h.timeout,
        Duration::from_secs(5),
        format_args!("{at}.timeout"),
    );
    for (v, d, field) in [
        (&h.check_interval, check_interval, "check_interval"),
        (&h.timeout, timeout, "timeout"),
    ] {
        if let Some(v) = v.as_ref().filter(|_| d.is_zero()) {
            cx.err(
                v.span(),
                format_args!("{at}.{field}"),
                (
                    format!("{field} must be positive"),
                    "use at least \"1s\"".into(),
                ),
            );
        }
    }
    if timeout > check_interval {
        let span = h
            .timeout
            .as_ref()
            .or(h.check_interval.as_ref())
            .map_or(h.name.span(), |v| v.span());
        cx.err(
            span,
            format_args!("{at}.timeout"),
            (
                format!("timeout ({timeout:?}) is longer than check_interval ({check_interval:?})"),
                "make timeout less than or equal to check_interval (HC-3)".into(),
            ),
        );
    }
    (check_interval, timeout)
}
