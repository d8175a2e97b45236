//! The TOML file as written: every value keeps its source span so semantic
//! errors can point at it. Values are kept as strings / integers here and
//! parsed in `validate`, where a bad value becomes a diagnostic with a hint
//! instead of an opaque serde error that stops at the first problem.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

type S<T> = Spanned<T>;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub dataplane: S<RawDataplane>,
    pub metrics: Option<RawMetrics>,
    pub bgp: Option<S<RawBgp>>,
    #[serde(default)]
    pub zone: Vec<RawZone>,
    #[serde(default)]
    pub health_check: Vec<RawHealthCheck>,
    #[serde(default)]
    // Boxed: the reload's loader moves tables between lists.
    #[allow(clippy::vec_box)]
    pub backend_service: Vec<Box<RawService>>,
    #[serde(default)]
    #[allow(clippy::vec_box)]
    pub forwarding_rule: Vec<Box<RawRule>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDataplane {
    pub eal_args: Option<S<Vec<String>>>,
    pub workers: Option<S<i64>>,
    pub burst_size: Option<S<i64>>,
    pub mbufs: Option<S<i64>>,
    pub conntrack_capacity: Option<S<i64>>,
    pub flow_hash_key: Option<S<String>>,
    pub flow_hash_key_file: Option<S<String>>,
    pub idle: Option<S<String>>,
    pub idle_sleep_max_us: Option<S<i64>>,
    #[serde(default)]
    pub port: Vec<S<RawPort>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPort {
    pub name: S<String>,
    pub device: S<String>,
    pub mac: Option<S<String>>,
    pub address: Option<S<String>>,
    pub address6: Option<S<String>>,
    pub mtu: Option<S<i64>>,
    pub vlan: Option<S<i64>>,
    pub tap: Option<S<String>>,
    pub gateway: Option<S<String>>,
    pub gateway6: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    pub listen: Option<S<String>>,
    pub backend_series_limit: Option<S<i64>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawZone {
    pub name: S<String>,
    #[serde(default)]
    pub client_subnets: Vec<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthCheck {
    pub name: S<String>,
    #[serde(rename = "type")]
    pub kind: S<String>,
    pub port: Option<S<i64>>,
    pub request_path: Option<S<String>>,
    pub host: Option<S<String>>,
    pub response_codes: Option<S<Vec<S<i64>>>>,
    pub request: Option<S<String>>,
    pub request_hex: Option<S<String>>,
    pub response: Option<S<String>>,
    pub response_hex: Option<S<String>>,
    pub check_interval: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub healthy_threshold: Option<S<i64>>,
    pub unhealthy_threshold: Option<S<i64>>,
    pub initial_state: Option<S<String>>,
    pub path: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawService {
    pub name: S<String>,
    pub encapsulation: Option<S<String>>,
    pub gue_port: Option<S<i64>>,
    pub geneve_port: Option<S<i64>>,
    pub geneve_vni: Option<S<i64>>,
    pub vxlan_port: Option<S<i64>>,
    pub vxlan_vni: Option<S<i64>>,
    pub vxlan_mac: Option<S<String>>,
    pub maglev_table_size: Option<S<i64>>,
    pub session_affinity: Option<S<String>>,
    pub fragments: Option<S<String>>,
    pub health_check: Option<S<String>>,
    pub locality_lb_policy: Option<S<String>>,
    pub connection_draining_timeout: Option<S<String>>,
    pub connection_tracking: Option<RawTracking>,
    pub failover_policy: Option<RawFailover>,
    pub zonal_affinity: Option<RawZonal>,
    #[serde(default)]
    pub backend: Vec<S<RawBackend>>,
    /// `[[backend_service.quic_lb]]`: QUIC-LB configurations.
    #[serde(default)]
    pub quic_lb: Vec<S<RawQuicLb>>,
}

impl RawHealthCheck {
    /// The fields that belong to one `type` or another (each type's
    /// `CheckType::FIELDS`), with the span of each one set.
    pub(super) fn type_fields(&self) -> [(&'static str, Option<Range<usize>>); 7] {
        [
            ("request_path", self.request_path.as_ref().map(S::span)),
            ("host", self.host.as_ref().map(S::span)),
            ("response_codes", self.response_codes.as_ref().map(S::span)),
            ("request", self.request.as_ref().map(S::span)),
            ("request_hex", self.request_hex.as_ref().map(S::span)),
            ("response", self.response.as_ref().map(S::span)),
            ("response_hex", self.response_hex.as_ref().map(S::span)),
        ]
    }
}

impl RawService {
    /// The tunnel keys (`sluice_core::encap::Tunnel::KEYS`) by name, each
    /// checked against the service's `encapsulation`.
    pub(super) fn tunnel_keys(&self) -> [(&'static str, TunnelKey<'_>); 6] {
        use TunnelKey::{Int, Text};
        [
            ("gue_port", Int(&self.gue_port)),
            ("geneve_port", Int(&self.geneve_port)),
            ("geneve_vni", Int(&self.geneve_vni)),
            ("vxlan_port", Int(&self.vxlan_port)),
            ("vxlan_vni", Int(&self.vxlan_vni)),
            ("vxlan_mac", Text(&self.vxlan_mac)),
        ]
    }
}

/// A tunnel key's field in the file: an integer or a string (a MAC).
#[derive(Clone, Copy)]
pub(crate) enum TunnelKey<'a> {
    Int(&'a Option<S<i64>>),
    Text(&'a Option<S<String>>),
}

impl TunnelKey<'_> {
    /// Where the key is set, if it is.
    pub(super) fn span(self) -> Option<Range<usize>> {
        match self {
            TunnelKey::Int(v) => v.as_ref().map(S::span),
            TunnelKey::Text(v) => v.as_ref().map(S::span),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTracking {
    pub tracking_mode: Option<S<String>>,
    pub connection_persistence_on_unhealthy_backends: Option<S<String>>,
    pub idle_timeout: Option<S<String>>,
    pub half_open_timeout: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFailover {
    pub failover_ratio: Option<S<Number>>,
    pub drop_traffic_if_unhealthy: Option<bool>,
    pub connection_drain_on_failover: Option<bool>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawZonal {
    pub spillover: Option<S<String>>,
    pub spillover_ratio: Option<S<Number>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBackend {
    pub address: S<String>,
    pub mac: Option<S<String>>,
    pub zone: Option<S<String>>,
    pub failover: Option<bool>,
    pub weight: Option<S<i64>>,
    /// The backend's QUIC-LB server ID in hex, for every configuration.
    pub quic_server_id: Option<S<String>>,
    /// Server IDs by config id, overriding `quic_server_id` for theirs.
    pub quic_server_ids: Option<S<std::collections::BTreeMap<String, S<String>>>>,
}

/// One `[[backend_service.quic_lb]]` table as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuicLb {
    pub config_id: S<i64>,
    pub server_id_length: S<i64>,
    pub nonce_length: S<i64>,
    pub key: Option<S<HiddenText>>,
}

/// A secret as written in the file: its `Debug` does not show it, so no
/// dump of the raw model carries it, and a value of another type is
/// refused without repeating it (serde's message would show a number).
pub(crate) struct HiddenText(pub String);

impl<'de> Deserialize<'de> for HiddenText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d) {
            Ok(toml::Value::String(s)) => Ok(Self(s)),
            _ => Err(serde::de::Error::custom(
                "invalid type: the key must be a string in quotes, \"<32 hex digits>\"",
            )),
        }
    }
}

impl std::fmt::Debug for HiddenText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub name: S<String>,
    pub vip: S<String>,
    pub protocol: Option<S<String>>,
    pub ports: Option<S<PortsValue>>,
    pub backend_service: S<String>,
}

/// Ratios may be written `0` or `0.0`: operators should not have to know
/// TOML's integer/float distinction.
#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(untagged)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

/// `ports = 80` is as natural as `ports = "80"`; accept both.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub(crate) enum PortsValue {
    Int(i64),
    Text(String),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBgp {
    pub asn: Option<S<i64>>,
    pub router_id: Option<S<String>>,
    pub kernel_table: Option<S<i64>>,
    pub hold_time: Option<S<String>>,
    pub bfd: Option<bool>,
    pub bfd_interval: Option<S<String>>,
    pub bfd_multiplier: Option<S<i64>>,
    pub drain_time: Option<S<String>>,
    pub stall_timeout: Option<S<String>>,
    #[serde(default)]
    pub peer: Vec<S<RawPeer>>,
    #[serde(default)]
    pub vip: Vec<S<RawVip>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPeer {
    pub name: S<String>,
    pub address: S<String>,
    pub asn: S<i64>,
    pub password: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVip {
    pub vip: S<String>,
    #[serde(default)]
    pub communities: Vec<S<String>>,
    pub med: Option<S<i64>>,
}
