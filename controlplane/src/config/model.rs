//! The validated configuration: plain typed values, every default filled in,
//! every reference checked. The rest of the control plane uses only these
//! types; nothing here can be invalid.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

pub use sluice_core::affinity::SessionAffinity;
pub use sluice_core::backend::Pool;
pub use sluice_core::encap::Encapsulation;
pub use sluice_core::quic_lb::{CidLengths, ServerId};
pub use sluice_core::rules::{PortRange, RuleProtocol};
pub use sluice_core::service::{PersistenceOnUnhealthy, TrackingMode};

/// An address with a prefix length: a subnet (`10.1.0.0/16`) or an
/// interface address (`192.0.2.1/24`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    fn mask_bits(&self) -> (u128, u128) {
        match self.addr {
            IpAddr::V4(a) => {
                let bits = u128::from(u32::from(a));
                let mask = if self.prefix == 0 {
                    0
                } else {
                    (u32::MAX << (32 - u32::from(self.prefix))) as u128
                };
                (bits, mask)
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix))
                };
                (bits, mask)
            }
        }
    }

    /// The subnet's first and last address, as numbers of its family.
    pub(crate) fn range(&self) -> (u128, u128) {
        let (bits, mask) = self.mask_bits();
        let family = if self.addr.is_ipv4() {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        let first = bits & mask;
        (first, first | (!mask & family))
    }

    /// Whether `ip` lies in this subnet (same family only).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let same_family = matches!(
            (self.addr, ip),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
        );
        if !same_family {
            return false;
        }
        let (net, mask) = self.mask_bits();
        let other = Cidr {
            addr: ip,
            prefix: 0,
        }
        .mask_bits()
        .0;
        net & mask == other & mask
    }

    pub fn overlaps(&self, other: &Cidr) -> bool {
        if self.prefix <= other.prefix {
            self.contains(other.addr)
        } else {
            other.contains(self.addr)
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The whole appliance configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub dataplane: DataplaneConfig,
    pub metrics: MetricsConfig,
    pub zones: Vec<ZoneConfig>,
    pub health_checks: Vec<HealthCheckConfig>,
    /// Shared: a reload that leaves a table's text as it was keeps its
    /// item (`super::Loader`), so what is derived from an item can be
    /// kept by identity (`Arc::ptr_eq`) across reloads.
    pub backend_services: Vec<Arc<BackendServiceConfig>>,
    pub forwarding_rules: Vec<Arc<ForwardingRuleConfig>>,
    /// `[bgp]`: VIP announcement through BIRD (None: not announced).
    pub bgp: Option<BgpConfig>,
    /// Per service (by index): the VIPs its data-path health check probes
    /// — those of its rules that take the check's protocol and port —
    /// empty for a service without one. Derived from the services and
    /// rules at every validation.
    pub probe_vips: Vec<Vec<IpAddr>>,
}

impl Config {
    pub fn service(&self, name: &str) -> Option<&BackendServiceConfig> {
        self.backend_services
            .iter()
            .find(|s| s.name == name)
            .map(|s| &**s)
    }

    pub fn health_check(&self, name: &str) -> Option<&HealthCheckConfig> {
        self.health_checks.iter().find(|h| h.name == name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DataplaneConfig {
    /// Passed to `rte_eal_init` after the program name, verbatim.
    pub eal_args: Vec<String>,
    /// Number of packet worker lcores (≥ 1).
    pub workers: u16,
    /// Packets per RX/TX burst (1–512, default 32).
    pub burst_size: u16,
    /// Mbufs in the packet pool; 0 = sized automatically. Raise it for
    /// drivers that hold many buffers (net_pcap's `infinite_rx` preloads
    /// the whole capture).
    pub mbufs: u32,
    /// Conntrack entries per worker (SPEC §3), reserved at start
    /// (64 bytes + 4 bytes of signature each; rounded up to a power of two).
    pub conntrack_capacity: u32,
    /// MG-2: the fleet secret the flow hash is keyed with
    /// (`flow_hash_key` or `flow_hash_key_file`); None: the unkeyed hash.
    pub flow_hash_key: Option<FlowHashKey>,
    /// How workers poll while no packets arrive (`idle`,
    /// `idle_sleep_max_us`).
    pub idle: dataplane::worker::IdlePolling,
    /// In config order; the index is the DPDK port index the dataplane uses.
    pub ports: Vec<PortConfig>,
}

impl DataplaneConfig {
    /// What the packet pool must serve (`crate::mbuf_pool` sizes it).
    pub fn pool_demand(&self) -> crate::mbuf_pool::Demand<'_> {
        crate::mbuf_pool::Demand {
            ports: self
                .ports
                .iter()
                .map(|p| crate::mbuf_pool::PortDemand {
                    device: &p.device,
                    mtu: p.mtu,
                    tap: p.tap.is_some(),
                })
                .collect(),
            workers: self.workers,
            burst_size: self.burst_size,
            mbufs: self.mbufs,
        }
    }
}

/// A fleet key for the flow hash (16 to 64 bytes). Its `Debug` does not
/// show it, so no log or error message carries the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct FlowHashKey(pub Vec<u8>);

impl std::fmt::Debug for FlowHashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlowHashKey(<{} bytes>)", self.0.len())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PortConfig {
    pub name: String,
    /// A DPDK vdev string (`net_pcap0,rx_pcap=…`) or a PCI address.
    pub device: String,
    /// Overrides the port's own MAC address when set.
    pub mac: Option<[u8; 6]>,
    /// The appliance's IPv4 address on this port, with its subnet.
    pub ipv4: Option<Cidr>,
    /// The appliance's IPv6 address on this port, with its subnet.
    pub ipv6: Option<Cidr>,
    pub mtu: u16,
    /// Trunk port: the 802.1Q VLAN ID (1..=4094) of every frame the port
    /// sends and receives; its TAP carries the same traffic untagged.
    /// None: frames leave untagged (and any tag is accepted on receive).
    pub vlan: Option<u16>,
    /// AP-4: name of the kernel TAP interface of this port's exception
    /// path (ARP/ND, ICMP and health checks to the appliance's addresses).
    /// None: no exception path; such packets are dropped and counted.
    pub tap: Option<String>,
    /// Default routes the control plane installs on the TAP (AP-4): the
    /// next hop for backends outside the port's subnets. One per family.
    pub gateways: Vec<IpAddr>,
}

impl PortConfig {
    /// Whether `ip` is on this port's directly attached subnet.
    pub fn on_link(&self, ip: IpAddr) -> bool {
        self.ipv4
            .iter()
            .chain(self.ipv6.iter())
            .any(|c| c.contains(ip))
    }

    /// The port's address of `ip`'s family, if it has one.
    pub fn address_for(&self, ip: IpAddr) -> Option<IpAddr> {
        match ip {
            IpAddr::V4(_) => self.ipv4.map(|c| c.addr),
            IpAddr::V6(_) => self.ipv6.map(|c| c.addr),
        }
    }
}

#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// Default `127.0.0.1:9064`.
    pub listen: SocketAddr,
    /// Per-backend series are exported while the configuration has at
    /// most this many backends; above it only per-service aggregates
    /// (default [`Self::DEFAULT_BACKEND_SERIES_LIMIT`]).
    pub backend_series_limit: usize,
}

impl MetricsConfig {
    /// `[metrics] backend_series_limit`'s default.
    pub const DEFAULT_BACKEND_SERIES_LIMIT: usize = 10_000;
}

#[derive(Clone, Debug, PartialEq)]
pub struct ZoneConfig {
    pub name: String,
    pub client_subnets: Vec<Cidr>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HealthCheckConfig {
    pub name: String,
    /// The validated `type` and its fields: what the prober runs.
    pub kind: super::health_check::ProbeKind,
    pub port: u16,
    /// HC-3 defaults: 5 s, 5 s, 2, 3.
    pub check_interval: Duration,
    pub timeout: Duration,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    /// State of a backend before its first verdict (`initial_state`,
    /// default UNHEALTHY: a new backend proves itself before it gets
    /// traffic; see `health::InitialState`).
    pub initially_healthy: bool,
    /// Which way probes travel (`path`).
    pub path: CheckPath,
}

/// Which way a health check's probes travel.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CheckPath {
    /// `"direct"`: from the appliance's address to the backend's own,
    /// through the kernel (HC-8).
    #[default]
    Direct,
    /// `"data"`: as a client's packets to each VIP of the service travel —
    /// from a port's address to the VIP, encapsulated by the service's
    /// encapsulation through the data port to the backend, whose answer
    /// must come back from the VIP to the appliance.
    Data,
}

impl HealthCheckConfig {
    pub fn is_http(&self) -> bool {
        matches!(self.kind, super::health_check::ProbeKind::Http(_))
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum LocalityLbPolicy {
    #[default]
    Maglev,
    /// HC-7: weights from the `X-Load-Balancing-Endpoint-Weight` header.
    WeightedMaglev,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ConnectionTrackingConfig {
    pub tracking_mode: TrackingMode,
    pub persistence: PersistenceOnUnhealthy,
    /// CT-5, default 60 s.
    pub idle_timeout: Duration,
    /// CT-5 for half-open entries (written by a SYN, no later packet yet),
    /// default 5 s; at most `idle_timeout`.
    pub half_open_timeout: Duration,
}

impl Default for ConnectionTrackingConfig {
    fn default() -> Self {
        Self {
            tracking_mode: TrackingMode::PerConnection,
            persistence: PersistenceOnUnhealthy::DefaultForProtocol,
            idle_timeout: Duration::from_secs(60),
            half_open_timeout: Duration::from_secs(5),
        }
    }
}

/// FO-1, FO-2, EL-3…EL-6, CT-11.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FailoverPolicyConfig {
    pub failover_ratio: f64,
    pub drop_traffic_if_unhealthy: bool,
    pub connection_drain_on_failover: bool,
}

impl Default for FailoverPolicyConfig {
    fn default() -> Self {
        Self {
            failover_ratio: 0.0,
            drop_traffic_if_unhealthy: false,
            connection_drain_on_failover: true,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Spillover {
    #[default]
    ZonalAffinityDisabled,
    ZonalAffinityStayWithinZone,
    ZonalAffinitySpillCrossZone,
}

/// ZA-1.
#[derive(Copy, Clone, Debug, PartialEq, Default)]
pub struct ZonalAffinityConfig {
    pub spillover: Spillover,
    pub spillover_ratio: f64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendConfig {
    pub address: IpAddr,
    /// Next-hop MAC for this backend (None: unresolved, packets dropped as
    /// `next_hop_unresolved` until neighbour resolution exists).
    pub mac: Option<[u8; 6]>,
    /// Index into [`Config::zones`].
    pub zone: Option<usize>,
    pub pool: Pool,
    /// 0–1000, default 1 (MG-3).
    pub weight: u16,
    /// Its QUIC-LB server ID in each of its service's
    /// [`BackendServiceConfig::quic_lb`] configurations, in their order
    /// (each of that configuration's length); empty when the service has
    /// none.
    pub quic_server_ids: Box<[ServerId]>,
}

/// One `[[backend_service.quic_lb]]`: a QUIC-LB configuration the
/// service's QUIC servers share (draft-ietf-quic-load-balancers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicLbConfig {
    /// Config id (the config rotation bits) and the server ID and nonce
    /// lengths, as the draft allows them.
    pub lengths: CidLengths,
    /// None: server IDs in the clear.
    pub key: Option<QuicLbKey>,
}

/// A QUIC-LB configuration's AES-128 key. Its `Debug` does not show it,
/// so no log, error or dump of the configuration carries it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct QuicLbKey(pub [u8; 16]);

impl std::fmt::Debug for QuicLbKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuicLbKey(<hidden>)")
    }
}

/// `fragments`: where the fragments of a TCP or UDP datagram go.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Fragments {
    /// HA-2: by the 3-tuple hash, as every fragment carries it.
    #[default]
    ThreeTuple,
    /// Where the datagram's 5-tuple hashes, as its unfragmented packets
    /// go, the ports learnt from its first fragment.
    FollowFlow,
}

impl Fragments {
    pub const ALL: [Fragments; 2] = [Fragments::ThreeTuple, Fragments::FollowFlow];

    /// Its value in the configuration.
    pub fn config_name(self) -> &'static str {
        match self {
            Fragments::ThreeTuple => "three_tuple",
            Fragments::FollowFlow => "follow_flow",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct BackendServiceConfig {
    pub name: String,
    pub encapsulation: Encapsulation,
    /// A prime, 251 ≤ M ≤ 655373, default 65537 (MG-1).
    pub maglev_table_size: u32,
    pub session_affinity: SessionAffinity,
    /// Where a TCP or UDP datagram's fragments go (HA-2's default, or
    /// with their flow).
    pub fragments: Fragments,
    /// Index into [`Config::health_checks`].
    pub health_check: Option<usize>,
    pub locality_lb_policy: LocalityLbPolicy,
    /// CT-10, default 0.
    pub connection_draining_timeout: Duration,
    pub connection_tracking: ConnectionTrackingConfig,
    /// `Some` when the section is present or any backend is a failover
    /// backend: its presence switches eligibility from EL-1/2 to EL-3…6.
    pub failover_policy: Option<FailoverPolicyConfig>,
    pub zonal_affinity: ZonalAffinityConfig,
    pub backends: Vec<BackendConfig>,
    /// QUIC-LB configurations, at most one per config id (empty: the
    /// service's UDP packets are balanced like any other).
    pub quic_lb: Vec<QuicLbConfig>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardingRuleConfig {
    pub name: String,
    pub vip: IpAddr,
    pub protocol: RuleProtocol,
    pub ports: PortRange,
    /// Index into [`Config::backend_services`].
    pub backend_service: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str, p: u8) -> Cidr {
        Cidr {
            addr: s.parse().unwrap(),
            prefix: p,
        }
    }

    #[test]
    fn cidr_contains_and_overlaps() {
        assert!(c("10.1.0.0", 16).contains("10.1.200.3".parse().unwrap()));
        assert!(!c("10.1.0.0", 16).contains("10.2.0.1".parse().unwrap()));
        assert!(!c("10.1.0.0", 16).contains("::1".parse().unwrap()));
        assert!(c("0.0.0.0", 0).contains("8.8.8.8".parse().unwrap()));
        assert!(c("2001:db8::", 32).contains("2001:db8:1::5".parse().unwrap()));
        assert!(c("10.0.0.0", 8).overlaps(&c("10.1.0.0", 16)));
        assert!(c("10.1.0.0", 16).overlaps(&c("10.0.0.0", 8)));
        assert!(!c("10.1.0.0", 16).overlaps(&c("10.2.0.0", 16)));
    }
}

/// The validated `[bgp]` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpConfig {
    /// The appliance's own AS number.
    pub asn: u32,
    /// BGP router id; default: the first port's IPv4 address.
    pub router_id: Ipv4Addr,
    /// The kernel routing table sluice keeps one route per announceable VIP
    /// in, and BIRD learns (`protocol kernel { kernel table N; learn; }`).
    pub kernel_table: u32,
    /// BGP hold time, whole seconds (0 or 3 to 65535; default 9).
    pub hold_time: u16,
    /// BFD on every session (None: off).
    pub bfd: Option<BfdConfig>,
    /// After SIGTERM: the VIPs are withdrawn, then sluice keeps forwarding
    /// for this long before it stops (default 5 s).
    pub drain_time: Duration,
    /// A control loop or worker that makes no progress for this long has
    /// every VIP withdrawn until it runs again (default 3 s).
    pub stall_timeout: Duration,
    pub peers: Vec<BgpPeer>,
    /// Per-VIP attributes of the announcement, in file order.
    pub vips: Vec<VipAnnouncement>,
}

impl BgpConfig {
    /// The attributes configured for `vip` (none: announced plain).
    pub fn vip(&self, vip: IpAddr) -> Option<&VipAnnouncement> {
        self.vips.iter().find(|v| v.vip == vip)
    }

    /// Whether some peer carries routes of `vip`'s family.
    pub fn has_peer_for(&self, vip: IpAddr) -> bool {
        self.peers
            .iter()
            .any(|p| p.address.is_ipv4() == vip.is_ipv4())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfdConfig {
    /// Transmit and receive interval (default 300 ms).
    pub interval: Duration,
    /// Missed packets before the session is down (default 3).
    pub multiplier: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpPeer {
    pub name: String,
    pub address: IpAddr,
    pub asn: u32,
    /// TCP MD5 signature secret (RFC 2385); never shown in `Debug`.
    pub password: Option<Secret>,
    /// The appliance's address on the peer's subnet: the session's source.
    pub local: IpAddr,
    /// The TAP of the port the peer is on (the session's interface).
    pub tap: String,
}

/// A secret from the configuration file. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipAnnouncement {
    pub vip: IpAddr,
    pub communities: Vec<Community>,
    /// MULTI_EXIT_DISC sent with the route.
    pub med: Option<u32>,
}

/// A BGP community: standard (RFC 1997, `ASN:VALUE`) or large (RFC 8092,
/// `GLOBAL:DATA1:DATA2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Community {
    Standard(u16, u16),
    Large(u32, u32, u32),
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Community::Standard(a, b) => write!(f, "{a}:{b}"),
            Community::Large(a, b, c) => write!(f, "{a}:{b}:{c}"),
        }
    }
}
