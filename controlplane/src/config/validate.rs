//! Raw TOML model → validated [`Config`], collecting every error.
//!
//! Each check records a diagnostic and carries on with a placeholder, so one
//! run reports every problem in the file. The typed `Config` is only
//! returned when there is none.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::diagnostics::{Diagnostics, SourceMap};
use super::model::*;
use super::raw::*;
use super::values::{self, Problem};

pub(crate) const MAX_PORTS: usize = sluice_core::stats::MAX_PORTS;
pub(crate) const MIN_TABLE: u32 = 251;
pub(crate) const MAX_TABLE: u32 = 655_373;
pub(crate) const DEFAULT_TABLE: u32 = 65_537;

pub(crate) struct Ctx<'a> {
    pub map: SourceMap<'a>,
    pub diags: Diagnostics,
}

impl Ctx<'_> {
    pub fn err(&mut self, span: Range<usize>, path: &str, (message, hint): Problem) {
        let d = self.map.diagnostic(span, path, message, hint);
        self.diags.push(d);
    }

    /// Parses a spanned string; on failure records the error and gives None.
    pub fn parse<T>(
        &mut self,
        v: &Spanned<String>,
        path: &str,
        f: impl FnOnce(&str) -> Result<T, Problem>,
    ) -> Option<T> {
        match f(v.get_ref()) {
            Ok(t) => Some(t),
            Err(p) => {
                self.err(v.span(), path, p);
                None
            }
        }
    }

    pub fn int<T: TryFrom<i64>>(
        &mut self,
        v: &Option<Spanned<i64>>,
        default: T,
        (lo, hi): (i64, i64),
        path: &str,
        what: &str,
    ) -> T {
        match v {
            None => default,
            Some(v) => match values::int_in(*v.get_ref(), lo, hi, what) {
                Ok(t) => t,
                Err(p) => {
                    self.err(v.span(), path, p);
                    default
                }
            },
        }
    }

    pub fn duration(
        &mut self,
        v: &Option<Spanned<String>>,
        default: Duration,
        path: &str,
    ) -> Duration {
        v.as_ref()
            .and_then(|v| self.parse(v, path, values::duration))
            .unwrap_or(default)
    }

    pub fn ratio(&mut self, v: &Option<Spanned<Number>>, path: &str) -> f64 {
        let Some(v) = v else { return 0.0 };
        let r = v.get_ref().as_f64();
        if !(0.0..=1.0).contains(&r) {
            self.err(
                v.span(),
                path,
                (
                    format!("ratio {r} is outside [0.0, 1.0]"),
                    "use a fraction between 0.0 and 1.0".into(),
                ),
            );
            return 0.0;
        }
        r
    }

    /// GCP resource names: RFC 1035 labels. They become metric labels and
    /// appear in logs, so keep them unambiguous.
    pub fn name(&mut self, v: &Spanned<String>, kind: &str) {
        let s = v.get_ref();
        let ok = s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            self.err(
                v.span(),
                &format!("{kind} {s:?}.name"),
                (
                    format!("invalid name {s:?}"),
                    "names are 1-63 characters: lowercase letters, digits and hyphens, \
                     starting with a letter and not ending with a hyphen"
                        .into(),
                ),
            );
        }
    }

    /// Records duplicate names within one kind of section.
    pub fn unique<'n>(&mut self, names: impl Iterator<Item = &'n Spanned<String>>, kind: &str) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for n in names {
            if let Some(&first) = seen.get(n.get_ref().as_str()) {
                let (line, _) = self.map.line_col(first);
                self.err(
                    n.span(),
                    &format!("{kind} {:?}.name", n.get_ref()),
                    (
                        format!(
                            "duplicate {kind} name {:?} (first defined on line {line})",
                            n.get_ref()
                        ),
                        format!("give each {kind} a unique name"),
                    ),
                );
            } else {
                seen.insert(n.get_ref(), n.span().start);
            }
        }
    }
}

pub(crate) fn validate(raw: RawConfig, text: &str, origin: &str) -> Result<Config, Diagnostics> {
    let mut cx = Ctx {
        map: SourceMap::new(text),
        diags: Diagnostics::new(origin),
    };
    let dataplane = dataplane_section(&mut cx, &raw.dataplane);
    super::frames::check(&mut cx, raw.dataplane.get_ref(), &dataplane);
    let metrics = metrics_section(&mut cx, raw.metrics.as_ref());
    let zones = zones_section(&mut cx, &raw.zone);
    let health_checks = health_checks_section(&mut cx, &raw.health_check);
    let backend_services = super::service::services_section(
        &mut cx,
        &raw.backend_service,
        &raw.zone,
        &raw.health_check,
        &health_checks,
        &dataplane.ports,
    );
    let forwarding_rules = super::rules::rules_section(
        &mut cx,
        &raw.forwarding_rule,
        &raw.backend_service,
        &dataplane.ports,
    );
    let mut diags = cx.diags;
    if !diags.is_empty() {
        diags.sort();
        return Err(diags);
    }
    Ok(Config {
        dataplane,
        metrics,
        zones,
        health_checks,
        backend_services,
        forwarding_rules,
    })
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
    super::interfaces::unique_taps(
        cx,
        d.port.iter().filter_map(|p| {
            let p = p.get_ref();
            Some((p.name.get_ref().as_str(), p.tap.as_ref()?))
        }),
    );
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
            &format!("{at}.device"),
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
        .and_then(|m| cx.parse(m, &format!("{at}.mac"), values::mac));
    let mut ipv4 = None;
    let mut ipv6 = None;
    if let Some(a) = &p.address {
        match cx.parse(a, &format!("{at}.address"), |s| values::cidr(s, true)) {
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
    let mtu = cx.int(
        &p.mtu,
        1500u16,
        (min_mtu, 9216),
        &format!("{at}.mtu"),
        "mtu",
    );
    let vlan = p
        .vlan
        .as_ref()
        .and_then(|v| match values::vlan_id(*v.get_ref()) {
            Ok(id) => Some(id),
            Err(problem) => {
                cx.err(v.span(), &format!("{at}.vlan"), problem);
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
    MetricsConfig { listen }
}

fn zones_section(cx: &mut Ctx<'_>, zones: &[RawZone]) -> Vec<ZoneConfig> {
    cx.unique(zones.iter().map(|z| &z.name), "zone");
    let mut seen: Vec<(Cidr, String, usize)> = Vec::new();
    let mut out = Vec::new();
    for z in zones {
        cx.name(&z.name, "zone");
        let zname = z.name.get_ref();
        let mut subnets = Vec::new();
        for (i, s) in z.client_subnets.iter().enumerate() {
            let path = format!("zone {zname:?} client_subnets[{i}]");
            let Some(c) = cx.parse(s, &path, |t| values::cidr(t, false)) else {
                continue;
            };
            if let Some((other, oz, off)) =
                seen.iter().find(|(o, oz, _)| o.overlaps(&c) && oz != zname)
            {
                let (line, _) = cx.map.line_col(*off);
                let msg = format!("{c} overlaps {other} of zone {oz:?} (line {line})");
                cx.err(
                    s.span(),
                    &path,
                    (
                        msg,
                        "a client address must belong to at most one zone".into(),
                    ),
                );
            }
            seen.push((c, zname.clone(), s.span().start));
            subnets.push(c);
        }
        out.push(ZoneConfig {
            name: zname.clone(),
            client_subnets: subnets,
        });
    }
    out
}

fn health_checks_section(cx: &mut Ctx<'_>, hcs: &[RawHealthCheck]) -> Vec<HealthCheckConfig> {
    cx.unique(hcs.iter().map(|h| &h.name), "health_check");
    hcs.iter().map(|h| health_check(cx, h)).collect()
}

fn health_check(cx: &mut Ctx<'_>, h: &RawHealthCheck) -> HealthCheckConfig {
    cx.name(&h.name, "health_check");
    let at = format!("health_check {:?}", h.name.get_ref());
    let http = cx
        .parse(&h.kind, &format!("{at}.type"), |s| {
            values::choice(s, &[("TCP", false), ("HTTP", true)])
        })
        .unwrap_or(true);
    let port = cx.int(&h.port, 80u16, (1, 65535), &format!("{at}.port"), "port");
    let kind = if http {
        let request_path = match &h.request_path {
            Some(p) if !p.get_ref().starts_with('/') => {
                cx.err(
                    p.span(),
                    &format!("{at}.request_path"),
                    (
                        format!("request_path {:?} does not start with '/'", p.get_ref()),
                        format!("write an absolute path, e.g. \"/{}\"", p.get_ref()),
                    ),
                );
                "/".into()
            }
            Some(p) => p.get_ref().clone(),
            None => "/".into(),
        };
        let response_codes = match &h.response_codes {
            None => vec![200],
            Some(codes) => {
                if codes.get_ref().is_empty() {
                    cx.err(
                        codes.span(),
                        &format!("{at}.response_codes"),
                        (
                            "empty list".into(),
                            "list at least one status code, e.g. [200]".into(),
                        ),
                    );
                }
                codes
                    .get_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let path = format!("{at}.response_codes[{i}]");
                        cx.int(&Some(c.clone()), 200u16, (100, 599), &path, "status code")
                    })
                    .collect()
            }
        };
        HealthCheckKind::Http {
            request_path,
            host: h.host.as_ref().map(|s| s.get_ref().clone()),
            response_codes,
        }
    } else {
        for (field, span) in [
            ("request_path", h.request_path.as_ref().map(|v| v.span())),
            ("host", h.host.as_ref().map(|v| v.span())),
            (
                "response_codes",
                h.response_codes.as_ref().map(|v| v.span()),
            ),
        ] {
            if let Some(span) = span {
                cx.err(
                    span,
                    &format!("{at}.{field}"),
                    (
                        format!("{field} applies only to HTTP health checks"),
                        format!("remove {field}, or set type = \"HTTP\""),
                    ),
                );
            }
        }
        HealthCheckKind::Tcp
    };
    let check_interval = cx.duration(
        &h.check_interval,
        Duration::from_secs(5),
        &format!("{at}.check_interval"),
    );
    let timeout = cx.duration(&h.timeout, Duration::from_secs(5), &format!("{at}.timeout"));
    for (v, d, field) in [
        (&h.check_interval, check_interval, "check_interval"),
        (&h.timeout, timeout, "timeout"),
    ] {
        if let Some(v) = v.as_ref().filter(|_| d.is_zero()) {
            cx.err(
                v.span(),
                &format!("{at}.{field}"),
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
            &format!("{at}.timeout"),
            (
                format!("timeout ({timeout:?}) is longer than check_interval ({check_interval:?})"),
                "make timeout less than or equal to check_interval (HC-3)".into(),
            ),
        );
    }
    let healthy_threshold = cx.int(
        &h.healthy_threshold,
        2u32,
        (1, 10),
        &format!("{at}.healthy_threshold"),
        "threshold",
    );
    let unhealthy_threshold = cx.int(
        &h.unhealthy_threshold,
        3u32,
        (1, 10),
        &format!("{at}.unhealthy_threshold"),
        "threshold",
    );
    let initially_healthy = h
        .initial_state
        .as_ref()
        .and_then(|v| {
            cx.parse(v, &format!("{at}.initial_state"), |t| {
                values::choice(t, &[("HEALTHY", true), ("UNHEALTHY", false)])
            })
        })
        .unwrap_or(false);
    HealthCheckConfig {
        name: h.name.get_ref().clone(),
        kind,
        port,
        check_interval,
        timeout,
        healthy_threshold,
        unhealthy_threshold,
        initially_healthy,
    }
}

/// Tunnelled encapsulations need an outer source address of the backend's
/// family on some port.
pub(crate) fn tunnel_source_exists(ports: &[PortConfig], backend: IpAddr) -> bool {
    ports.iter().any(|p| p.address_for(backend).is_some())
}
