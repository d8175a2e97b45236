//! Validation of `[[backend_service]]` tables and their backends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use sluice_core::ServiceId;

use super::context::{name_index, names_listed, Ctx};
use super::encapsulation::encapsulation;
use super::model::*;
use super::raw::*;
use super::values;

/// Maglev table sizes (prime): the accepted range and the default.
const MIN_TABLE: u32 = 251;
const MAX_TABLE: u32 = 655_373;
const DEFAULT_TABLE: u32 = 65_537;

pub(crate) fn services_section(
    cx: &mut Ctx<'_>,
    services: &[Box<RawService>],
    zones: &[RawZone],
    raw_hcs: &[RawHealthCheck],
    hcs: &[HealthCheckConfig],
    ports: &[PortConfig],
    kept: &[Option<Arc<BackendServiceConfig>>],
) -> Vec<Arc<BackendServiceConfig>> {
    cx.unique(services.iter().map(|s| &s.name), "backend_service");
    if let Some(first_extra) = services.get(ServiceId::MAX_SERVICES) {
        cx.err(
            first_extra.name.span(),
            format!("backend_service {:?}", first_extra.name.get_ref()),
            (
                format!(
                    "{} backend services configured; at most {} are supported (the data \
                     plane's service id is 16 bits)",
                    services.len(),
                    ServiceId::MAX_SERVICES
                ),
                "merge services that share backends, or split the configuration over \
                 several appliances"
                    .into(),
            ),
        );
    }
    backend_limit(cx, services, MAX_BACKENDS);
    let names = Names {
        zones,
        zone_index: name_index(zones.iter().map(|z| &z.name)),
        raw_hcs,
        hc_index: name_index(raw_hcs.iter().map(|h| &h.name)),
    };
    services
        .iter()
        .enumerate()
        .map(|(i, s)| match kept.get(i) {
            Some(Some(kept)) => Arc::clone(kept),
            _ => Arc::new(service(cx, s, &names, hcs, ports)),
        })
        .collect()
}

/// The zones and health checks services refer to by name, indexed once
/// for every reference.
struct Names<'a> {
    zones: &'a [RawZone],
    zone_index: ahash::AHashMap<&'a str, usize>,
    raw_hcs: &'a [RawHealthCheck],
    hc_index: ahash::AHashMap<&'a str, usize>,
}

fn service(
    cx: &mut Ctx<'_>,
    s: &RawService,
    names: &Names<'_>,
    hcs: &[HealthCheckConfig],
    ports: &[PortConfig],
) -> BackendServiceConfig {
    cx.name(&s.name, "backend_service");
    let at = format!("backend_service {:?}", s.name.get_ref());
    let encapsulation = encapsulation(cx, s, &at);
    let maglev_table_size = table_size(cx, &s.maglev_table_size, &at);
    let session_affinity = s
        .session_affinity
        .as_ref()
        .and_then(|v| {
            cx.parse(v, format_args!("{at}.session_affinity"), |t| {
                values::choice(t, &SessionAffinity::ALL.map(|a| (a.config_name(), a)))
            })
        })
        .unwrap_or_default();
    let fragments = fragments(cx, s, session_affinity, &at);
    let health_check = s.health_check.as_ref().and_then(|h| {
        let found = names.hc_index.get(h.get_ref().as_str()).copied();
        if found.is_none() {
            let defined = names.raw_hcs.iter().map(|r| r.name.get_ref().as_str());
            cx.err(
                h.span(),
                format_args!("{at}.health_check"),
                (
                    format!("no health_check named {:?}", h.get_ref()),
                    if names.raw_hcs.is_empty() {
                        "define it in a [[health_check]] table, or remove the reference".into()
                    } else {
                        format!("use one of {}, or define it", names_listed(defined))
                    },
                ),
            );
        }
        found
    });
    let locality_lb_policy = locality(cx, s, health_check.and_then(|i| hcs.get(i)), &at);
    let connection_draining_timeout = cx.duration(
        &s.connection_draining_timeout,
        Duration::ZERO,
        format_args!("{at}.connection_draining_timeout"),
    );
    let connection_tracking = tracking(cx, s.connection_tracking.as_ref(), &at);
    let zonal_affinity = zonal(cx, s.zonal_affinity.as_ref(), &at);
    let mut quic = super::quic_lb::service_quic(cx, s, &at);
    let backends = backends(
        cx,
        s,
        &at,
        encapsulation,
        names,
        ports,
        &mut quic.server_ids,
    );
    let failover_policy = match &s.failover_policy {
        Some(f) => Some(FailoverPolicyConfig {
            failover_ratio: cx.ratio(
                &f.failover_ratio,
                format_args!("{at}.failover_policy.failover_ratio"),
            ),
            drop_traffic_if_unhealthy: f.drop_traffic_if_unhealthy.unwrap_or(false),
            connection_drain_on_failover: f.connection_drain_on_failover.unwrap_or(true),
        }),
        None if backends.iter().any(|b| b.pool == Pool::Failover) => {
            Some(FailoverPolicyConfig::default())
        }
        None => None,
    };
    BackendServiceConfig {
        name: s.name.get_ref().clone(),
        encapsulation,
        maglev_table_size,
        session_affinity,
        fragments,
        health_check,
        locality_lb_policy,
        connection_draining_timeout,
        connection_tracking,
        failover_policy,
        zonal_affinity,
        backends,
        quic_lb: quic.configs,
    }
}

/// `fragments`: `three_tuple` (HA-2, the default) or `follow_flow`, which
/// only changes anything where a flow hashes its 5-tuple (NONE,
/// CLIENT_IP_PORT_PROTO): under the other affinities every fragment
/// already hashes as its flow does.
fn fragments(cx: &mut Ctx<'_>, s: &RawService, affinity: SessionAffinity, at: &str) -> Fragments {
    let Some(v) = s.fragments.as_ref() else {
        return Fragments::default();
    };
    let path = format!("{at}.fragments");
    let chosen = cx
        .parse(v, &path, |t| {
            values::choice(t, &Fragments::ALL.map(|f| (f.config_name(), f)))
        })
        .unwrap_or_default();
    let five_tuple = matches!(
        affinity,
        SessionAffinity::None | SessionAffinity::ClientIpPortProto
    );
    if chosen == Fragments::FollowFlow && !five_tuple {
        cx.err(
            v.span(),
            path,
            (
                format!(
                    "fragments = \"follow_flow\" under session_affinity {}: its flows hash \
                     without ports, as their fragments already do",
                    affinity.config_name()
                ),
                "remove `fragments`, or use session_affinity NONE or CLIENT_IP_PORT_PROTO".into(),
            ),
        );
    }
    chosen
}

fn table_size(cx: &mut Ctx<'_>, v: &Option<Spanned<i64>>, at: &str) -> u32 {
    let path = format!("{at}.maglev_table_size");
    let size: u32 = cx.int(
        v,
        DEFAULT_TABLE,
        (i64::from(MIN_TABLE), i64::from(MAX_TABLE)),
        &path,
        "maglev_table_size",
    );
    if let Some(v) = v.as_ref().filter(|_| !values::is_prime(size)) {
        let (below, above) = values::primes_near(size);
        let near: Vec<String> = [below, above]
            .iter()
            .flatten()
            .map(u32::to_string)
            .collect();
        cx.err(
            v.span(),
            &path,
            (
                format!("maglev_table_size {size} is not prime (MG-1)"),
                format!(
                    "use a prime such as {} (65537 by default, 655373 for many backends)",
                    near.join(" or ")
                ),
            ),
        );
        return DEFAULT_TABLE;
    }
    size
}

fn locality(
    cx: &mut Ctx<'_>,
    s: &RawService,
    hc: Option<&HealthCheckConfig>,
    at: &str,
) -> LocalityLbPolicy {
    let Some(v) = &s.locality_lb_policy else {
        return LocalityLbPolicy::Maglev;
    };
    let path = format!("{at}.locality_lb_policy");
    let policy = cx
        .parse(v, &path, |t| {
            values::choice(
                t,
                &[
                    ("MAGLEV", LocalityLbPolicy::Maglev),
                    ("WEIGHTED_MAGLEV", LocalityLbPolicy::WeightedMaglev),
                ],
            )
        })
        .unwrap_or_default();
    let hc_missing = s.health_check.is_none();
    if policy == LocalityLbPolicy::WeightedMaglev
        && (hc_missing || hc.is_some_and(|h| !h.is_http()))
    {
        cx.err(
            v.span(),
            &path,
            (
                "WEIGHTED_MAGLEV needs an HTTP health check to learn weights (HC-7)".into(),
                "set health_check to a health_check with type = \"HTTP\", or use MAGLEV".into(),
            ),
        );
    }
    policy
}

fn tracking(cx: &mut Ctx<'_>, t: Option<&RawTracking>, at: &str) -> ConnectionTrackingConfig {
    let mut out = ConnectionTrackingConfig::default();
    let Some(t) = t else { return out };
    let at = format!("{at}.connection_tracking");
    if let Some(v) = &t.tracking_mode {
        out.tracking_mode = cx
            .parse(v, format_args!("{at}.tracking_mode"), |s| {
                values::choice(s, &TrackingMode::ALL.map(|m| (m.config_name(), m)))
            })
            .unwrap_or_default();
    }
    if let Some(v) = &t.connection_persistence_on_unhealthy_backends {
        let path = format!("{at}.connection_persistence_on_unhealthy_backends");
        out.persistence = cx
            .parse(v, &path, |s| {
                values::choice(
                    s,
                    &[
                        (
                            "DEFAULT_FOR_PROTOCOL",
                            PersistenceOnUnhealthy::DefaultForProtocol,
                        ),
                        ("NEVER_PERSIST", PersistenceOnUnhealthy::NeverPersist),
                        ("ALWAYS_PERSIST", PersistenceOnUnhealthy::AlwaysPersist),
                    ],
                )
            })
            .unwrap_or_default();
        if out.persistence == PersistenceOnUnhealthy::AlwaysPersist
            && out.tracking_mode == TrackingMode::PerSession
        {
            cx.err(
                v.span(),
                &path,
                (
                    "ALWAYS_PERSIST cannot be combined with tracking_mode = \"PER_SESSION\" (CT-8)".into(),
                    "use DEFAULT_FOR_PROTOCOL or NEVER_PERSIST, or tracking_mode = \"PER_CONNECTION\"".into(),
                ),
            );
        }
    }
    out.idle_timeout = cx.duration(
        &t.idle_timeout,
        out.idle_timeout,
        format_args!("{at}.idle_timeout"),
    );
    if let Some(v) = t
        .idle_timeout
        .as_ref()
        .filter(|_| out.idle_timeout.is_zero())
    {
        cx.err(
            v.span(),
            format_args!("{at}.idle_timeout"),
            (
                "idle_timeout must be positive (CT-5)".into(),
                "use e.g. \"60s\" (the default)".into(),
            ),
        );
    }
    half_open_timeout(cx, t, &mut out, &at);
    out
}

/// How long an entry written by a SYN lives without a later packet of its
/// connection: positive, and no longer than `idle_timeout` (the entry
/// would outlive an established one; a SYN flood would hold the table).
fn half_open_timeout(
    cx: &mut Ctx<'_>,
    t: &RawTracking,
    out: &mut ConnectionTrackingConfig,
    at: &str,
) {
    let path = format!("{at}.half_open_timeout");
    let Some(v) = &t.half_open_timeout else {
        out.half_open_timeout = out.half_open_timeout.min(out.idle_timeout);
        return;
    };
    let Some(d) = cx.parse(v, &path, values::duration) else {
        return;
    };
    if d.is_zero() {
        cx.err(
            v.span(),
            &path,
            (
                "half_open_timeout must be positive".into(),
                "use e.g. \"5s\" (the default)".into(),
            ),
        );
    } else if d > out.idle_timeout {
        cx.err(
            v.span(),
            &path,
            (
                format!(
                    "half_open_timeout ({}) is longer than idle_timeout ({})",
                    values::show_duration(d),
                    values::show_duration(out.idle_timeout)
                ),
                "a SYN-only entry must not outlive an established one: lower half_open_timeout (default \"5s\") or raise idle_timeout".into(),
            ),
        );
    } else {
        out.half_open_timeout = d;
    }
}

fn zonal(cx: &mut Ctx<'_>, z: Option<&RawZonal>, at: &str) -> ZonalAffinityConfig {
    let mut out = ZonalAffinityConfig::default();
    let Some(z) = z else { return out };
    if let Some(v) = &z.spillover {
        out.spillover = cx
            .parse(v, format_args!("{at}.zonal_affinity.spillover"), |s| {
                values::choice(
                    s,
                    &[
                        ("ZONAL_AFFINITY_DISABLED", Spillover::ZonalAffinityDisabled),
                        (
                            "ZONAL_AFFINITY_STAY_WITHIN_ZONE",
                            Spillover::ZonalAffinityStayWithinZone,
                        ),
                        (
                            "ZONAL_AFFINITY_SPILL_CROSS_ZONE",
                            Spillover::ZonalAffinitySpillCrossZone,
                        ),
                    ],
                )
            })
            .unwrap_or_default();
    }
    out.spillover_ratio = cx.ratio(
        &z.spillover_ratio,
        format_args!("{at}.zonal_affinity.spillover_ratio"),
    );
    out
}

fn backends(
    cx: &mut Ctx<'_>,
    s: &RawService,
    at: &str,
    encap: Encapsulation,
    names: &Names<'_>,
    ports: &[PortConfig],
    quic_server_ids: &mut [Box<[ServerId]>],
) -> Vec<BackendConfig> {
    let mut seen: HashMap<std::net::IpAddr, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, b) in s.backend.iter().enumerate() {
        let b = b.get_ref();
        let bat = BackendAt(at, i);
        let address = cx.parse(&b.address, format_args!("{bat}.address"), values::ip);
        let mac = b
            .mac
            .as_ref()
            .and_then(|m| cx.parse(m, format_args!("{bat}.mac"), values::mac));
        let zone = b.zone.as_ref().and_then(|z| {
            let found = names.zone_index.get(z.get_ref().as_str()).copied();
            if found.is_none() {
                let defined = names.zones.iter().map(|r| r.name.get_ref().as_str());
                cx.err(
                    z.span(),
                    format!("{bat}.zone"),
                    (
                        format!("no zone named {:?}", z.get_ref()),
                        if names.zones.is_empty() {
                            "define it in a [[zone]] table, or remove the reference".into()
                        } else {
                            format!("use one of {}, or define it", names_listed(defined))
                        },
                    ),
                );
            }
            found
        });
        let weight = cx.int(
            &b.weight,
            1u16,
            (0, 1000),
            format_args!("{bat}.weight"),
            "weight",
        );
        let Some(address) = address else { continue };
        if let Some(&first) = seen.get(&address) {
            cx.report(b.address.span(), || {
                (
                    format!("{bat}.address"),
                    (
                        format!("backend {address} is listed twice (also backend[{first}])"),
                        "list each backend address once per service".into(),
                    ),
                )
            });
        } else {
            seen.insert(address, i);
        }
        if encap.is_tunnel() && !tunnel_source_exists(ports, address) {
            let fam = if address.is_ipv4() { "IPv4" } else { "IPv6" };
            let field = if address.is_ipv4() {
                "address"
            } else {
                "address6"
            };
            cx.err(
                b.address.span(),
                format!("{bat}.address"),
                (
                    format!("no dataplane port has an {fam} address to use as the tunnel source for {address}"),
                    format!("set `{field}` on a [[dataplane.port]], or use encapsulation = \"l2\""),
                ),
            );
        }
        out.push(BackendConfig {
            address,
            mac,
            zone,
            pool: if b.failover.unwrap_or(false) {
                Pool::Failover
            } else {
                Pool::Primary
            },
            weight,
            quic_server_ids: quic_server_ids
                .get_mut(i)
                .map(std::mem::take)
                .unwrap_or_default(),
        });
    }
    out
}

/// The field path of a service's backend `i`, formatted only for an error.
#[derive(Clone, Copy)]
struct BackendAt<'a>(&'a str, usize);

impl std::fmt::Display for BackendAt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} backend[{}]", self.0, self.1)
    }
}

/// Backends a configuration may have, over all services: each holds a
/// backend id (one of 2²⁰, `BackendId::INDEXES`) while configured and
/// again while it drains after removal, so a reload may replace every
/// backend at once and still find ids.
pub(crate) const MAX_BACKENDS: usize = sluice_core::ids::BackendId::INDEXES / 2;

/// Refuses more than `limit` backends in all, at the first one too many.
fn backend_limit(cx: &mut Ctx<'_>, services: &[Box<RawService>], limit: usize) {
    let mut total = 0usize;
    for s in services {
        for (i, b) in s.backend.iter().enumerate() {
            total += 1;
            if total == limit + 1 {
                let total: usize = services.iter().map(|s| s.backend.len()).sum();
                cx.err(
                    b.span(),
                    format!("backend_service {:?} backend[{i}]", s.name.get_ref()),
                    (
                        format!(
                            "{total} backends in all; at most {limit} are supported (each \
                             needs a backend id while configured and while draining)"
                        ),
                        format!(
                            "remove {} backends or split them over several sluice instances",
                            total - limit
                        ),
                    ),
                );
                return;
            }
        }
    }
}

/// Tunnelled encapsulations need an outer source address of the backend's
/// family on some port.
fn tunnel_source_exists(ports: &[PortConfig], backend: IpAddr) -> bool {
    ports.iter().any(|p| p.address_for(backend).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::diagnostics::{Diagnostics, SourceMap};

    /// More backends than the id space allows are refused by file, line,
    /// field and fix, at the first one over the limit.
    #[test]
    fn backends_over_the_limit_are_refused_at_the_first_one_too_many() {
        let text = "[dataplane]\n[[backend_service]]\nname = \"a\"\nbackend = [\n  { address = \"10.0.0.1\" },\n  { address = \"10.0.0.2\" },\n]\n[[backend_service]]\nname = \"b\"\nbackend = [\n  { address = \"10.0.0.3\" },\n  { address = \"10.0.0.4\" },\n]\n";
        let raw: crate::config::raw::RawConfig = toml::from_str(text).unwrap();
        let mut cx = Ctx {
            map: SourceMap::new(text),
            diags: Diagnostics::new("big.toml"),
            warnings: Diagnostics::warnings("big.toml"),
        };
        backend_limit(&mut cx, &raw.backend_service, 4);
        assert!(cx.diags.is_empty(), "{}", cx.diags);
        backend_limit(&mut cx, &raw.backend_service, 3);
        let shown = cx.diags.to_string();
        assert!(shown.contains("big.toml:12:"), "{shown}");
        assert!(
            shown.contains("backend_service \"b\" backend[1]"),
            "{shown}"
        );
        assert!(shown.contains("4 backends in all; at most 3"), "{shown}");
        assert!(shown.contains("remove 1 backends"), "{shown}");
        assert_eq!(MAX_BACKENDS, 524_288);
    }
}
