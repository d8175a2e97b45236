//! The immutable forwarding state the workers read (MG-5, AP-2).
//!
//! The control plane builds a complete [`ForwardingState`] off the hot path
//! and publishes it atomically (see [`SnapshotCell`]); a worker loads the
//! current one at most once per burst and never sees a mix of two.
//!
//! Backends are named by stable [`BackendId`]s that survive snapshots, so a
//! conntrack entry can hold an id and look the backend's current health,
//! weight, draining deadline and pool up in whatever snapshot is current
//! (CT-7, CT-8, CT-10, CT-11). Nothing in a snapshot points into another.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::rules::RuleTable;

/// A backend's stable identity, assigned by the control plane: an index
/// (low [`BackendId::INDEX_BITS`] bits) into [`ForwardingState::backends`]
/// and the per-backend counters, and a generation (high bits) that changes
/// each time the index is given to another backend. An entry that recorded
/// an earlier generation of the index matches no backend any more
/// ([`ForwardingState::backend`] compares the whole id), so a reused index
/// never inherits connections. The control plane reuses an index only after
/// every snapshot naming its previous backend is gone, and lets a
/// generation come round again only after every conntrack entry that could
/// hold it has expired (`controlplane::publish::BackendIds`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BackendId(pub u32);

impl BackendId {
    /// Bits of the index: at most 2²⁰ = 1,048,576 backends at once
    /// (configured, draining and waiting for reuse together).
    pub const INDEX_BITS: u32 = 20;
    /// Number of distinct indexes.
    pub const INDEXES: usize = 1 << Self::INDEX_BITS;
    /// Number of generations of one index (2¹²) before it wraps.
    pub const GENERATIONS: u32 = 1 << (32 - Self::INDEX_BITS);

    /// The id of `index` (< [`Self::INDEXES`]) at `generation`
    /// (< [`Self::GENERATIONS`]; higher bits are dropped).
    #[inline]
    pub const fn new(index: u32, generation: u32) -> Self {
        Self((generation << Self::INDEX_BITS) | (index & (Self::INDEXES as u32 - 1)))
    }

    /// Position in [`ForwardingState::backends`] and in per-backend counters.
    #[inline(always)]
    pub const fn index(self) -> usize {
        (self.0 & (Self::INDEXES as u32 - 1)) as usize
    }

    #[inline]
    pub const fn generation(self) -> u32 {
        self.0 >> Self::INDEX_BITS
    }
}

/// Index of a service in [`ForwardingState::services`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ServiceId(pub u16);

impl ServiceId {
    /// Most services a snapshot holds: ids are 16 bits, `u16::MAX` unused.
    pub const MAX_SERVICES: usize = u16::MAX as usize;

    /// The id of the service at `index` in the configuration; None beyond
    /// [`Self::MAX_SERVICES`] (never truncated: a truncated id would send
    /// one service's traffic to another).
    pub fn from_index(index: usize) -> Option<Self> {
        u16::try_from(index)
            .ok()
            .filter(|&i| usize::from(i) < Self::MAX_SERVICES)
            .map(Self)
    }
}

/// IP protocols a forwarding rule can name (FR-1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleProtocol {
    Tcp,
    Udp,
    /// Every IP protocol (TCP, UDP, ESP, GRE, ICMP, ICMPv6, …).
    L3Default,
}

/// An inclusive destination-port range; `ALL` is `0..=65535` and is the only
/// range that matches packets without ports (non-first fragments, ESP, …: FR-4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub const ALL: PortRange = PortRange {
        first: 0,
        last: u16::MAX,
    };

    pub fn is_all(&self) -> bool {
        *self == Self::ALL
    }

    /// Whether a packet with destination port `port` (None: no ports) matches.
    pub fn matches(&self, port: Option<u16>) -> bool {
        match port {
            Some(p) => self.first <= p && p <= self.last,
            None => self.is_all(),
        }
    }

    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Session affinity: which fields feed the hash (SPEC §2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum SessionAffinity {
    /// Hashes like `ClientIpPortProto` (HA-1).
    #[default]
    None,
    ClientIpPortProto,
    ClientIpProto,
    ClientIp,
}

/// Connection tracking mode (SPEC §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum TrackingMode {
    #[default]
    PerConnection,
    PerSession,
}

/// `connection_persistence_on_unhealthy_backends` (CT-8).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum PersistenceOnUnhealthy {
    #[default]
    DefaultForProtocol,
    NeverPersist,
    AlwaysPersist,
}

/// How a packet is delivered to its backend (AP-3): layer-2 DSR or one of
/// the tunnels registered in [`crate::encap`].
pub use crate::encap::Encapsulation;

/// Whether a backend belongs to the primary or the failover pool (FO-1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Pool {
    #[default]
    Primary,
    Failover,
}

/// Coarse time used by the dataplane: milliseconds since the process's clock
/// origin. One clock read per burst (CT-5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Millis(pub u64);

/// Connection tracking settings of a service (SPEC §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConnectionTracking {
    pub mode: TrackingMode,
    pub persistence: PersistenceOnUnhealthy,
    /// CT-5, default 60 s.
    pub idle_timeout_ms: u64,
    /// CT-5 for half-open entries: how long an entry written by a SYN
    /// lives until a later packet of its connection arrives; default 5 s.
    pub half_open_timeout_ms: u64,
}

impl Default for ConnectionTracking {
    fn default() -> Self {
        Self {
            mode: TrackingMode::default(),
            persistence: PersistenceOnUnhealthy::default(),
            idle_timeout_ms: 60_000,
            half_open_timeout_ms: 5_000,
        }
    }
}

/// A complete Maglev lookup table: `slots[hash % slots.len()]` is the owner.
/// Empty when the eligible set is empty (new flows are dropped: EL-4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaglevTable {
    pub slots: Box<[BackendId]>,
}

impl MaglevTable {
    /// The owner of `hash`'s slot.
    ///
    /// The slot is `(low32(hash) × M) >> 32` (Lemire's multiply-shift
    /// reduction) rather than `hash % M`: one multiply instead of a 64-bit
    /// division on every packet, equally uniform for M ≪ 2³², and just as
    /// deterministic across machines (MG-2). The high 32 bits of the hash are
    /// left for other uses (GUE source port).
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<BackendId> {
        self.slots.get(self.slot_index(hash)?).copied()
    }

    /// Index of `hash`'s slot (None for an empty table).
    #[inline]
    pub fn slot_index(&self, hash: u64) -> Option<usize> {
        let n = self.slots.len() as u64;
        if n == 0 {
            return None;
        }
        Some((((hash & 0xffff_ffff) * n) >> 32) as usize)
    }

    /// Hints the cache that `hash`'s slot is about to be read.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        if let Some(slot) = self.slot_index(hash).and_then(|i| self.slots.get(i)) {
            sluice_platform::prefetch_read(slot);
        }
    }
}

/// A backend service as the dataplane needs it.
#[derive(Clone, Debug)]
pub struct ServiceState {
    pub name: String,
    pub encapsulation: Encapsulation,
    pub affinity: SessionAffinity,
    pub tracking: ConnectionTracking,
    /// CT-10: how long entries on a removed backend keep working.
    pub draining_timeout_ms: u64,
    /// CT-11: when false, a pool flip invalidates every entry of the service.
    pub drain_on_failover: bool,
    /// Incremented by the control plane at every primary↔failover flip.
    pub pool_epoch: u32,
    /// `tables[0]`: clients in no zone (or zonal affinity off);
    /// `tables[1 + z]`: clients in zone `z` of [`ForwardingState::zones`].
    /// Shared between snapshots while their inputs do not change: a
    /// publish that touches one service builds only that service's tables.
    pub tables: Vec<Arc<MaglevTable>>,
    /// The service's current backends, including draining ones.
    pub backends: Vec<BackendId>,
}

impl ServiceState {
    /// The table for a new flow from `client` (ZA-3): the client's zone
    /// table when the service has zonal tables (zonal affinity on), else the
    /// no-zone table. The zone lookup is skipped for services without them.
    #[inline]
    pub fn table_for_client(&self, zones: &ZoneMap, client: IpAddr) -> Option<&MaglevTable> {
        if self.tables.len() > 1 {
            self.table_for(zones.zone_of(client))
        } else {
            self.tables.first().map(Arc::as_ref)
        }
    }

    /// The table for a client in `zone` (None: no zone / affinity off).
    #[inline]
    pub fn table_for(&self, zone: Option<u16>) -> Option<&MaglevTable> {
        match zone {
            Some(z) => self
                .tables
                .get(1 + usize::from(z))
                .or_else(|| self.tables.first())
                .map(Arc::as_ref),
            None => self.tables.first().map(Arc::as_ref),
        }
    }
}

/// Where to send packets for a backend: egress port and next-hop MAC.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Egress {
    pub port: u16,
    /// None while the next hop is unresolved (packets dropped, counted).
    pub next_hop_mac: Option<[u8; 6]>,
}

/// One backend of one service, keyed by its stable id.
#[derive(Clone, Debug)]
pub struct BackendState {
    pub id: BackendId,
    pub service: ServiceId,
    pub address: IpAddr,
    pub healthy: bool,
    /// 0–1000 (HC-7); 1 when unweighted.
    pub weight: u16,
    pub pool: Pool,
    /// CT-10: Some(deadline) once removed from the config; entries keep
    /// working until the deadline, new connections never come here.
    pub draining_until: Option<Millis>,
    pub egress: Egress,
}

/// A dataplane port as the encapsulator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortState {
    pub name: String,
    pub mac: [u8; 6],
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub mtu: u16,
    /// Trunk port: the 802.1Q VLAN every frame it sends carries and every
    /// frame it receives must carry as its outer tag (see [`crate::vlan`]).
    pub vlan: Option<u16>,
}

/// Client subnets of one zone (SPEC §6), for the per-zone table variants.
#[derive(Clone, Debug, Default)]
pub struct ZoneMap {
    pub zones: Vec<Zone>,
}

#[derive(Clone, Debug)]
pub struct Zone {
    pub name: String,
    pub subnets: Vec<(IpAddr, u8)>,
}

impl ZoneMap {
    /// The zone of a client address (SPEC §6: "compatible" clients), by a
    /// linear scan: a handful of subnets, looked up only for new flows of
    /// services that have zonal tables (see [`ServiceState::table_for_client`]).
    pub fn zone_of(&self, client: IpAddr) -> Option<u16> {
        self.zones
            .iter()
            .position(|z| {
                z.subnets
                    .iter()
                    .any(|&(net, len)| in_subnet(client, net, len))
            })
            .map(|i| i as u16)
    }
}

fn in_subnet(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Everything a worker needs to forward, immutable once published.
#[derive(Clone, Debug, Default)]
pub struct ForwardingState {
    /// Increments with every publish; exported as a metric.
    pub generation: u64,
    pub rules: RuleTable,
    /// Indexed by [`ServiceId`].
    pub services: Vec<ServiceState>,
    /// Indexed by [`BackendId::index`]; `None` for indexes not in use.
    pub backends: Vec<Option<BackendState>>,
    /// Indexed by DPDK port index, in config order.
    pub ports: Vec<PortState>,
    pub zones: ZoneMap,
    /// Each backend's prebuilt outer header (built from the fields above
    /// by [`crate::outer_header::OuterHeaders::build`]; empty: every packet
    /// takes the general encapsulation path).
    pub outer_headers: crate::outer_header::OuterHeaders,
    /// The flow hash's seed (MG-2; a fleet key's when one is configured).
    pub flow_seed: crate::flow::FlowSeed,
}

impl ForwardingState {
    #[inline]
    pub fn backend(&self, id: BackendId) -> Option<&BackendState> {
        // The whole id: an earlier generation of the index is another
        // backend, long gone.
        self.backends
            .get(id.index())
            .and_then(Option::as_ref)
            .filter(|b| b.id == id)
    }

    #[inline]
    pub fn service(&self, id: ServiceId) -> Option<&ServiceState> {
        self.services.get(usize::from(id.0))
    }
}

/// The atomically swapped pointer to the current snapshot (MG-5).
///
/// Workers poll [`SnapshotCell::version`] once per burst — a plain load of a
/// cache line that only changes on publish — and call [`SnapshotCell::load`]
/// only when it moved, so the steady state writes nothing shared (no
/// reference-count traffic per burst).
///
/// Snapshots are freed on the control thread, never on a worker:
/// [`SnapshotCell::publish`] returns the previous snapshot, and the caller
/// keeps it in a retire list until it holds the last reference
/// (`Arc::strong_count == 1`); a worker dropping its clone then only
/// decrements the count.
#[derive(Debug)]
pub struct SnapshotCell {
    current: ArcSwap<ForwardingState>,
    version: AtomicU64,
}

impl SnapshotCell {
    pub fn new(initial: ForwardingState) -> Self {
        Self {
            current: ArcSwap::from_pointee(initial),
            version: AtomicU64::new(0),
        }
    }

    /// Changes at every publish. Cheap enough to read once per burst.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The current snapshot.
    #[inline]
    pub fn load(&self) -> Arc<ForwardingState> {
        self.current.load_full()
    }

    /// Publishes `next`; returns the previous snapshot so the caller (the
    /// control thread) is where it is freed.
    pub fn publish(&self, next: ForwardingState) -> Arc<ForwardingState> {
        let old = self.current.swap(Arc::new(next));
        self.version.fetch_add(1, Ordering::Release);
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service index past the id space gets no id, where
    /// `index as u16` gave service 65,536 the id of service 0.
    #[test]
    fn service_ids_are_never_truncated() {
        assert_eq!(ServiceId::from_index(0), Some(ServiceId(0)));
        assert_eq!(ServiceId::from_index(65_534), Some(ServiceId(65_534)));
        assert_eq!(ServiceId::from_index(65_535), None);
        assert_eq!(ServiceId::from_index(65_536), None);
        assert_eq!(ServiceId::from_index(usize::MAX), None);
    }

    /// MG-5: readers racing a writer that swaps 10,000 times always see a
    /// complete snapshot (generation and its services agree), and the version
    /// they poll moves on every publish.
    /// ZA-3: clients in a zone subnet get their zone's table, others (and
    /// every client of a service without zonal tables) the no-zone table.
    #[test]
    fn za_3_table_for_client_by_zone_subnet() {
        let zones = ZoneMap {
            zones: vec![
                Zone {
                    name: "a".into(),
                    subnets: vec![("10.1.0.0".parse().unwrap(), 16)],
                },
                Zone {
                    name: "b".into(),
                    subnets: vec![
                        ("10.2.0.0".parse().unwrap(), 16),
                        ("2001:db8:b::".parse().unwrap(), 48),
                    ],
                },
            ],
        };
        let t = |id: u32| {
            Arc::new(MaglevTable {
                slots: vec![BackendId(id)].into(),
            })
        };
        let mut svc = ServiceState {
            name: "s".into(),
            encapsulation: Encapsulation::L2,
            affinity: SessionAffinity::None,
            tracking: ConnectionTracking::default(),
            draining_timeout_ms: 0,
            drain_on_failover: true,
            pool_epoch: 0,
            tables: vec![t(0), t(1), t(2)],
            backends: vec![],
        };
        let owner = |svc: &ServiceState, ip: &str| {
            svc.table_for_client(&zones, ip.parse().unwrap())
                .and_then(|t| t.lookup(0))
        };
        assert_eq!(owner(&svc, "10.1.2.3"), Some(BackendId(1)));
        assert_eq!(owner(&svc, "10.2.0.9"), Some(BackendId(2)));
        assert_eq!(owner(&svc, "2001:db8:b:1::1"), Some(BackendId(2)));
        assert_eq!(owner(&svc, "192.0.2.7"), Some(BackendId(0)), "no zone");
        svc.tables.truncate(1);
        assert_eq!(owner(&svc, "10.1.2.3"), Some(BackendId(0)), "affinity off");
    }

    /// An id is an index and a generation; a snapshot finds a backend only
    /// under the generation it holds now.
    #[test]
    fn backend_lookup_compares_the_generation() {
        let id = BackendId::new(70_000, 3);
        assert_eq!((id.index(), id.generation()), (70_000, 3));
        assert_eq!(BackendId(5), BackendId::new(5, 0));
        let max = BackendId::new(BackendId::INDEXES as u32 - 1, BackendId::GENERATIONS - 1);
        assert_eq!(max.0, u32::MAX);
        let mut st = ForwardingState {
            backends: vec![None; 70_001],
            ..Default::default()
        };
        st.backends[70_000] = Some(BackendState {
            id,
            service: ServiceId(0),
            address: "192.0.2.1".parse().unwrap(),
            healthy: true,
            weight: 1,
            pool: Pool::Primary,
            draining_until: None,
            egress: Egress::default(),
        });
        assert!(st.backend(id).is_some());
        assert!(
            st.backend(BackendId::new(70_000, 2)).is_none(),
            "older generation"
        );
        assert!(st.backend(BackendId::new(70_000, 4)).is_none());
    }

    #[test]
    fn mg_5_readers_see_whole_snapshots_under_swaps() {
        fn snap(generation: u64) -> ForwardingState {
            ForwardingState {
                generation,
                services: (0..(generation % 7) as usize)
                    .map(|i| ServiceState {
                        name: format!("{generation}"),
                        encapsulation: Encapsulation::L2,
                        affinity: SessionAffinity::None,
                        tracking: ConnectionTracking::default(),
                        draining_timeout_ms: 0,
                        drain_on_failover: true,
                        pool_epoch: i as u32,
                        tables: vec![],
                        backends: vec![],
                    })
                    .collect(),
                ..Default::default()
            }
        }
        let cell = Arc::new(SnapshotCell::new(snap(0)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let cell = Arc::clone(&cell);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    let mut last_gen = 0;
                    // At least one read even if the writer finishes before
                    // this thread is first scheduled (loaded CI machines).
                    while seen == 0 || !stop.load(Ordering::Relaxed) {
                        let s = cell.load();
                        assert_eq!(s.services.len() as u64, s.generation % 7);
                        for svc in &s.services {
                            assert_eq!(svc.name, s.generation.to_string());
                        }
                        assert!(s.generation >= last_gen, "snapshots went backwards");
                        last_gen = s.generation;
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        let mut retired = Vec::new();
        for g in 1..=10_000 {
            let before = cell.version();
            retired.push(cell.publish(snap(g)));
            assert_eq!(cell.version(), before + 1);
            retired.retain(|old| Arc::strong_count(old) > 1);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert_eq!(cell.load().generation, 10_000);
    }
}
