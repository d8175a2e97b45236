//! Raw TOML model → validated [`Config`], collecting every error.
//!
//! Each check records a diagnostic and carries on with a placeholder, so one
//! run reports every problem in the file. The typed `Config` is only
//! returned when there is none.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use toml::Spanned;

use super::context::Ctx;
use super::diagnostics::{Diagnostics, SourceMap};
use super::model::*;
use super::overlap::{overlaps, Interval};
use super::raw::*;
use super::values::{self, Problem};

pub(crate) const MAX_PORTS: usize = sluice_core::stats::MAX_PORTS;

pub(crate) fn validate(raw: &RawConfig, text: &str, origin: &str) -> Result<Config, Diagnostics> {
    validate_keeping(raw, text, origin, &Kept::default())
}

/// [`validate`] with the warnings about the file when it is accepted
/// (`check-config` prints them).
pub(crate) fn validate_warning(
    raw: &RawConfig,
    text: &str,
    origin: &str,
) -> Result<(Config, Diagnostics), Diagnostics> {
    validate_all(raw, text, origin, &Kept::default())
}

/// Validated items a validation may take as they are instead of
/// validating their tables again, by position in `raw`'s lists (None:
/// validate it). [`super::Loader`] offers an item of its last load when
/// the table's text is the same and so is everything outside the
/// services and rules (zones, health checks, ports: what an item's
/// validation reads besides its own table); a rule is taken only if its
/// service is still at the position it names. Checks across items
/// (unique names, limits, FR-2 overlaps) run over every item whatever
/// was kept.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub services: Vec<Option<Arc<BackendServiceConfig>>>,
    pub rules: Vec<Option<Arc<ForwardingRuleConfig>>>,
}

/// [`validate`], taking the items `kept` offers.
pub(crate) fn validate_keeping(
    raw: &RawConfig,
    text: &str,
    origin: &str,
    kept: &Kept,
) -> Result<Config, Diagnostics> {
    validate_all(raw, text, origin, kept).map(|(config, _)| config)
}

/// [`validate_keeping`] with the warnings. Items taken from `kept` are
/// not validated again, so their warnings are not found again either:
/// only a whole validation ([`validate_warning`]) gives them all.
fn validate_all(
    raw: &RawConfig,
    text: &str,
    origin: &str,
    kept: &Kept,
) -> Result<(Config, Diagnostics), Diagnostics> {
    let mut cx = Ctx {
        map: SourceMap::new(text),
        diags: Diagnostics::new(origin),
        warnings: Diagnostics::warnings(origin),
    };
    let dataplane = dataplane_section(&mut cx, &raw.dataplane);
    super::frames::check(&mut cx, raw.dataplane.get_ref(), &dataplane);
    let metrics = metrics_section(&mut cx, raw.metrics.as_ref());
    let zones = zones_section(&mut cx, &raw.zone);
    let health_checks = super::health_check::health_checks_section(&mut cx, &raw.health_check);
    let backend_services = super::service::services_section(
        &mut cx,
        &raw.backend_service,
        &raw.zone,
        &raw.health_check,
        &health_checks,
        &dataplane.ports,
        &kept.services,
    );
    let forwarding_rules = super::rules::rules_section(
        &mut cx,
        &raw.forwarding_rule,
        &raw.backend_service,
        &dataplane.ports,
        &kept.rules,
    );
    super::quic_lb::udp_rules(
        &mut cx,
        &raw.backend_service,
        &backend_services,
        &forwarding_rules,
    );
    let bgp = super::bgp::bgp_section(
        &mut cx,
        raw.bgp.as_ref(),
        &dataplane.ports,
        &forwarding_rules,
    );
    let probe_vips = super::health_check::probe_vips(
        &mut cx,
        &raw.backend_service,
        &health_checks,
        &backend_services,
        &forwarding_rules,
    );
    if !cx.diags.is_empty() {
        return Err(cx.diags);
    }
    let config = Config {
        dataplane,
        metrics,
        zones,
        health_checks,
        backend_services,
        forwarding_rules,
        bgp,
        probe_vips,
    };
    Ok((config, cx.warnings))
}

fn dataplane_section(cx: &mut Ctx<'_>, dp: &Spanned<RawDataplane>) -> DataplaneConfig {
    let d = dp.get_ref();
    let workers = cx.int(&d.workers, 1u16, (1, 128), "dataplane.workers", "workers");
    let burst_size = cx.int(
        &d.burst_size,
        32u16,
        (1, dataplane::dpdk::MAX_BURST as i64),
        "dataplane.burst_size",
        "burst_size",
    );
    // 0 = sized by sluice from ports, workers and descriptors.
    let mbufs = cx.int(
        &d.mbufs,
        0u32,
        (0, 16 * 1024 * 1024),
        "dataplane.mbufs",
        "mbufs",
    );
    // Connections per worker. The shard reserves 1.25 × that in slots,
    // rounded up to a power of two (`Shard::slots_for`): at most 2^27
    // slots of 68 bytes, 8.5 GiB.
    let conntrack_capacity = cx.int(
        &d.conntrack_capacity,
        1_048_576u32,
        (1024, 100_000_000),
        "dataplane.conntrack_capacity",
        "conntrack_capacity",
    );
    let flow_hash_key = flow_hash_key(cx, d);
    let idle = super::idle::idle_polling(cx, d);
    if d.port.is_empty() || d.port.len() > MAX_PORTS {
        cx.err(
            dp.span(),
            "dataplane.port",
            (
                format!(
                    "{} ports configured; 1 to {MAX_PORTS} are supported",
                    d.port.len()
                ),
                "declare each dataplane port in its own [[dataplane.port]] table".into(),
            ),
        );
    }
    cx.unique(d.port.iter().map(|p| &p.get_ref().name), "dataplane.port");
    let ports = d.port.iter().map(|p| port(cx, p)).collect();
    let taps = || {
        d.port.iter().filter_map(|p| {
            let p = p.get_ref();
            Some((p.name.get_ref().as_str(), p.tap.as_ref()?))
        })
    };
    super::interfaces::unique_taps(cx, taps());
    DataplaneConfig {
        eal_args: d
            .eal_args
            .as_ref()
            .map(|a| a.get_ref().clone())
            .unwrap_or_default(),
        workers,
        burst_size,
        mbufs,
        conntrack_capacity,
        flow_hash_key,
        idle,
        ports,
    }
}

/// Largest key file read (a key is at most 128 hex digits).
const MAX_KEY_FILE: u64 = 4096;

/// MG-2: the optional fleet key of the flow hash, inline in hex or in a
/// file (hex, whitespace ignored; a relative path is relative to the
/// configuration file). Diagnostics never show the key.
fn flow_hash_key(cx: &mut Ctx<'_>, d: &RawDataplane) -> Option<FlowHashKey> {
    match (&d.flow_hash_key, &d.flow_hash_key_file) {
        (Some(k), Some(_)) => {
            cx.err(
                k.span(),
                "dataplane.flow_hash_key",
                (
                    "both flow_hash_key and flow_hash_key_file are set".into(),
                    "keep one; flow_hash_key_file keeps the secret out of the configuration".into(),
                ),
            );
            None
        }
        (Some(k), None) => cx
            .parse(k, "dataplane.flow_hash_key", values::hex_key)
            .map(FlowHashKey),
        (None, Some(f)) => {
            let base = std::path::Path::new(cx.diags.origin()).parent();
            let path = match base {
                Some(dir) => dir.join(f.get_ref()),
                None => f.get_ref().into(),
            };
            let read = || -> Result<Vec<u8>, Problem> {
                let meta = std::fs::metadata(&path).map_err(|e| {
                    (
                        format!("cannot read the key file {}: {e}", path.display()),
                        "create it (e.g. `openssl rand -hex 32 > FILE; chmod 600 FILE`) or fix the path".into(),
                    )
                })?;
                if !meta.is_file() || meta.len() > MAX_KEY_FILE {
                    return Err((
                        format!(
                            "the key file {} is not a regular file of at most {MAX_KEY_FILE} bytes",
                            path.display()
                        ),
                        "point flow_hash_key_file at a file holding the key in hex".into(),
                    ));
                }
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    (
                        format!("cannot read the key file {}: {e}", path.display()),
                        "check the file's permissions".into(),
                    )
                })?;
                values::hex_key(&text).map_err(|(m, h)| (format!("{}: {m}", path.display()), h))
            };
            match read() {
                Ok(k) => Some(FlowHashKey(k)),
                Err(p) => {
                    cx.err(f.span(), "dataplane.flow_hash_key_file", p);
                    None
                }
            }
        }
        (None, None) => None,
    }
}

fn port(cx: &mut Ctx<'_>, p: &Spanned<RawPort>) -> PortConfig {
    let p = p.get_ref();
    cx.name(&p.name, "dataplane.port");
    let at = format!("dataplane.port {:?}", p.name.get_ref());
    if p.device.get_ref().trim().is_empty() {
        cx.err(
            p.device.span(),
            format!("{at}.device"),
            (
                "empty device".into(),
                "give a DPDK vdev string (\"net_pcap0,iface=eth0\") or a PCI address \
                 (\"0000:03:00.0\")"
                    .into(),
            ),
        );
    }
    let mac = p
        .mac
        .as_ref()
        .and_then(|m| cx.parse(m, format!("{at}.mac"), values::mac));
    let mut ipv4 = None;
    let mut ipv6 = None;
    if let Some(a) = &p.address {
        match cx.parse(a, format!("{at}.address"), |s| values::cidr(s, true)) {
            Some(c) if c.addr.is_ipv4() => ipv4 = Some(c),
            Some(c) => ipv6 = Some(c),
            None => {}
        }
    }
    if let Some(a) = &p.address6 {
        let path = format!("{at}.address6");
        match cx.parse(a, &path, |s| values::cidr(s, true)) {
            Some(c) if c.addr.is_ipv6() && ipv6.is_none() => ipv6 = Some(c),
            Some(c) if c.addr.is_ipv6() => cx.err(
                a.span(),
                &path,
                (
                    "the port has two IPv6 addresses (address and address6)".into(),
                    "put the IPv4 address in `address` and the IPv6 one in `address6`".into(),
                ),
            ),
            Some(_) => cx.err(
                a.span(),
                &path,
                (
                    "address6 must be an IPv6 address".into(),
                    "put the IPv4 address in `address`".into(),
                ),
            ),
            None => {}
        }
    }
    let min_mtu = if ipv6.is_some() { 1280 } else { 576 };
    let mtu = cx.int(&p.mtu, 1500u16, (min_mtu, 9216), format!("{at}.mtu"), "mtu");
    let vlan = p
        .vlan
        .as_ref()
        .and_then(|v| match values::vlan_id(*v.get_ref()) {
            Ok(id) => Some(id),
            Err(problem) => {
                cx.err(v.span(), format!("{at}.vlan"), problem);
                None
            }
        });
    let tap = p
        .tap
        .as_ref()
        .and_then(|t| super::interfaces::tap_name(cx, t, &at));
    let mut gateways = Vec::new();
    for (field, raw) in [("gateway", &p.gateway), ("gateway6", &p.gateway6)] {
        let Some(raw) = raw else { continue };
        let path = format!("{at}.{field}");
        let Some(gw) = cx.parse(raw, &path, values::ip) else {
            continue;
        };
        let subnet = if gw.is_ipv4() { ipv4 } else { ipv6 };
        let problem = if tap.is_none() {
            Some((
                format!("{field} needs the port's exception path"),
                "the route is installed on the port's TAP: add `tap = \"<name>\"`".to_string(),
            ))
        } else if gateways
            .iter()
            .any(|g: &IpAddr| g.is_ipv4() == gw.is_ipv4())
        {
            Some((
                "the port has two gateways of one family".into(),
                "give the IPv4 gateway in `gateway` and the IPv6 one in `gateway6`".into(),
            ))
        } else if !subnet.is_some_and(|c| c.contains(gw)) {
            Some((
                format!("gateway {gw} is not inside the port's address subnet of its family"),
                "a gateway must be on the link: use an address inside `address`/`address6`".into(),
            ))
        } else {
            None
        };
        match problem {
            Some(pr) => cx.err(raw.span(), &path, pr),
            None => gateways.push(gw),
        }
    }
    PortConfig {
        name: p.name.get_ref().clone(),
        device: p.device.get_ref().clone(),
        mac,
        ipv4,
        ipv6,
        mtu,
        vlan,
        tap,
        gateways,
    }
}

fn metrics_section(cx: &mut Ctx<'_>, m: Option<&RawMetrics>) -> MetricsConfig {
    let default: SocketAddr = ([127, 0, 0, 1], 9064).into();
    let listen = m
        .and_then(|m| m.listen.as_ref())
        .and_then(|l| {
            cx.parse(l, "metrics.listen", |s| {
                s.parse::<SocketAddr>().map_err(|_| {
                    (
                        format!("invalid listen address {s:?}"),
                        "write IP:PORT, e.g. \"127.0.0.1:9064\" or \"[::1]:9064\"".into(),
                    )
                })
            })
        })
        .unwrap_or(default);
    let backend_series_limit = cx.int(
        &m.and_then(|m| m.backend_series_limit.clone()),
        MetricsConfig::DEFAULT_BACKEND_SERIES_LIMIT,
        (0, i64::from(u32::MAX)),
        "metrics.backend_series_limit",
        "backend_series_limit",
    );
    MetricsConfig {
        listen,
        backend_series_limit,
    }
}

fn zones_section(cx: &mut Ctx<'_>, zones: &[RawZone]) -> Vec<ZoneConfig> {
    cx.unique(zones.iter().map(|z| &z.name), "zone");
    let mut subnets: Vec<ZoneSubnet> = Vec::new();
    let mut out = Vec::new();
    for (zone, z) in zones.iter().enumerate() {
        cx.name(&z.name, "zone");
        let zname = z.name.get_ref();
        let mut client_subnets = Vec::new();
        for (i, s) in z.client_subnets.iter().enumerate() {
            let path = format!("zone {zname:?} client_subnets[{i}]");
            let Some(c) = cx.parse(s, &path, |t| values::cidr(t, false)) else {
                continue;
            };
            subnets.push(ZoneSubnet {
                zone,
                index: i,
                cidr: c,
                span: s.span(),
            });
            client_subnets.push(c);
        }
        out.push(ZoneConfig {
            name: zname.clone(),
            client_subnets,
        });
    }
    for family in [true, false] {
        let of_family: Vec<&ZoneSubnet> = subnets
            .iter()
            .filter(|s| s.cidr.addr.is_ipv4() == family)
            .collect();
        zone_overlaps(cx, zones, &of_family);
    }
    out
}

/// One valid entry of a zone's `client_subnets`.
struct ZoneSubnet {
    zone: usize,
    index: usize,
    cidr: Cidr,
    span: std::ops::Range<usize>,
}

/// A client address belongs to at most one zone: each subnet that
/// overlaps an earlier subnet of another zone is reported once, naming
/// the earliest. `subnets` are of one family, in file order.
fn zone_overlaps(cx: &mut Ctx<'_>, zones: &[RawZone], subnets: &[&ZoneSubnet]) {
    let items: Vec<Interval> = subnets
        .iter()
        .map(|s| {
            let (lo, hi) = s.cidr.range();
            Interval {
                lo,
                hi,
                group: s.zone,
            }
        })
        .collect();
    for (i, o) in overlaps(&items).into_iter().enumerate() {
        let Some(first) = o.earliest_other_group.filter(|&e| e < i) else {
            continue;
        };
        let (s, other) = (subnets[i], subnets[first]);
        let line = cx.line_of(other.span.start);
        cx.report(s.span.clone(), || {
            let zname = zones[s.zone].name.get_ref();
            let oz = zones[other.zone].name.get_ref();
            (
                format!("zone {zname:?} client_subnets[{}]", s.index),
                (
                    format!(
                        "{} overlaps {} of zone {oz:?} (line {line})",
                        s.cidr, other.cidr
                    ),
                    "a client address must belong to at most one zone".into(),
                ),
            )
        });
    }
}
