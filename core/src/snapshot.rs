//! The immutable forwarding state the workers read (MG-5, AP-2).
//!
//! The control plane builds a complete [`ForwardingState`] off the hot path
//! and publishes it atomically (see [`SnapshotCell`]); a worker loads the
//! current one at most once per burst and never sees a mix of two.
//!
//! A snapshot is the aggregate: it holds the rules, services, backends,
//! ports, zones, prebuilt outer headers and flow seed, each defined in a
//! module of its own below this one. Backends are named by stable
//! [`BackendId`]s that survive snapshots, so a conntrack entry can hold an
//! id and look the backend's current health, weight, draining deadline and
//! pool up in whatever snapshot is current (CT-7, CT-8, CT-10, CT-11).
//! Nothing in a snapshot points into another.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::backend::BackendState;
use crate::flow::FlowSeed;
use crate::ids::{BackendId, ServiceId};
use crate::lane_backend::{LaneBackend, LaneBackends};
use crate::outer_header::OuterHeader;
use crate::port::PortState;
use crate::rules::RuleTable;
use crate::service::ServiceState;
use crate::zones::ZoneMap;

/// Everything a worker needs to forward, immutable once published.
#[derive(Clone, Debug, Default)]
pub struct ForwardingState {
    /// Increments with every publish; exported as a metric.
    pub generation: u64,
    /// Shared between snapshots: a publish that keeps the rules (a health
    /// flip, a neighbour change) copies a reference, not 100,000 rules.
    pub rules: Arc<RuleTable>,
    /// Indexed by [`ServiceId`].
    pub services: Vec<ServiceState>,
    /// Indexed by [`BackendId::index`]; `None` for indexes not in use.
    pub backends: Vec<Option<BackendState>>,
    /// Indexed by DPDK port index, in config order.
    pub ports: Vec<PortState>,
    pub zones: ZoneMap,
    /// What the established lane reads of each backend, with its
    /// prebuilt outer header (built from the fields above by
    /// [`ForwardingState::build_lane_backends`]; empty: the lane takes no
    /// packet, and every packet the general encapsulation path).
    pub lane_backends: LaneBackends,
    /// The flow hash's seed (MG-2; a fleet key's when one is configured).
    pub flow_seed: FlowSeed,
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

    /// The lane records of `services`' backends made again from the
    /// snapshot as it stands, their headers kept: after a publication
    /// that changed only those services' health, weights or pools, which
    /// change no header. Costs what those backends cost, not the table.
    pub fn refresh_lane_backends(&mut self, services: impl IntoIterator<Item = usize>) {
        let mut records = std::mem::take(&mut self.lane_backends);
        for service in services.into_iter().filter_map(|si| self.services.get(si)) {
            for backend in service.backends.iter().filter_map(|&id| self.backend(id)) {
                records.refresh(backend, service);
            }
        }
        self.lane_backends = records;
    }

    /// Every backend's [`LaneBackend`] as the snapshot stands, with its
    /// prebuilt outer header (its service's encapsulation out of its
    /// egress port). A snapshot that is changed afterwards builds them
    /// again, or refreshes those of the services whose health or pools
    /// alone changed ([`ForwardingState::refresh_lane_backends`]).
    pub fn build_lane_backends(&self) -> LaneBackends {
        let record = |b: &BackendState| {
            let service = self.service(b.service)?;
            let header = self
                .ports
                .get(usize::from(b.egress.port))
                .and_then(|port| OuterHeader::build(service.encapsulation, b, port));
            Some(LaneBackend::new(b, service, header))
        };
        self.backends
            .iter()
            .map(|b| b.as_ref().and_then(record))
            .collect()
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
    use crate::affinity::SessionAffinity;
    use crate::backend::{Egress, Pool};
    use crate::encap::Encapsulation;
    use crate::service::ConnectionTracking;

    /// A snapshot finds a backend only under the generation it holds now.
    #[test]
    fn backend_lookup_compares_the_generation() {
        let id = BackendId::new(70_000, 3);
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

    /// MG-5: readers racing a writer that swaps 10,000 times always see a
    /// complete snapshot (generation and its services agree), and the version
    /// they poll moves on every publish.
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
                        follow_fragments: false,
                        pool_epoch: i as u32,
                        tables: vec![],
                        backends: vec![],
                        quic_lb: None,
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
