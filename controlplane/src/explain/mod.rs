//! `sluice explain`: the whole decision for a packet — rule, service,
//! hashed fields and flow hash, table (zone, active pool), Maglev slot,
//! every backend's eligibility, the chosen backend, next hop,
//! encapsulation and MTU outcome.
//!
//! Offline, the snapshot is built by [`crate::publish`] exactly as `sluice
//! run` builds it, under assumed health (every backend healthy); live, it
//! is a copy of the published one ([`live`]). Backends named unhealthy
//! are then turned unhealthy on that copy by the health-change path
//! ([`crate::publish::assume_unhealthy`]). The decision itself is `sluice_core::explain`, which
//! runs the packet path's own functions. [`packet`] turns a flow written
//! on the command line, or a pcap file, into frames; [`render`] prints.

pub mod client;
pub mod live;
pub mod packet;
pub mod render;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use sluice_core::backend::Pool;
use sluice_core::explain::{BackendLine, Balancing, Explanation};
use sluice_core::ids::BackendId;
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;

use crate::config::Config;
use crate::health::{probe_keys, ProbeStatus};
use crate::publish::ServiceReport;
use crate::publish::{
    assume_unhealthy, build_forwarding_state_with, BackendIds, BuildInputs, PolicyMemory,
};

/// A snapshot with what the build decided per service, to explain from.
///
/// One explanation costs the same whatever the number of backends, apart
/// from one walk over the service's backend list to count them by
/// eligibility: the snapshot is shared, not copied; the decision runs on
/// [`Derived::light`]; each table's slot counts are counted once per
/// snapshot; and at most [`LISTED`] backends are listed.
pub struct Explainer<'a> {
    pub cfg: &'a Config,
    pub state: Arc<ForwardingState>,
    pub reports: Arc<Vec<ServiceReport>>,
    /// The backends assumed unhealthy.
    pub unhealthy: HashSet<IpAddr>,
    derived: Arc<Derived>,
}

/// The most backends one explanation lists: all of a service up to this
/// many; beyond, the slot's owner and the first backends that are not
/// eligible, with the whole service counted by eligibility.
pub const LISTED: usize = 64;

/// What explanations from one snapshot share, built once per snapshot
/// (the live path keeps the latest: [`live`]).
pub struct Derived {
    /// The snapshot with every service's backend list left empty: the
    /// decision runs on it. `sluice_core::explain` lists a service's
    /// backends by counting each one's slots in the table (backends ×
    /// slots); the packet path never reads those lists, so the decision is
    /// the same, and the lines come from [`Explainer::backend_lines`].
    light: ForwardingState,
    /// Per (service, table index): each backend index's slots in the table.
    slots: Mutex<HashMap<TableKey, Arc<Vec<u32>>>>,
    /// Per (service, table index, active pool, zonal table): the service
    /// counted by eligibility ([`Explainer::backend_lines`]).
    summaries: Mutex<HashMap<SummaryKey, Arc<Summary>>>,
}

/// A service (index) and one of its tables (index).
type TableKey = (u16, usize);

type SummaryKey = (u16, usize, Option<Pool>, bool);

/// A service of more than [`LISTED`] backends, counted by eligibility.
struct Summary {
    /// The first backends not eligible, in configuration order (at most
    /// [`LISTED`] − 1: the slot's owner is listed first).
    not_eligible: Vec<BackendId>,
    total: usize,
    counts: [usize; Eligibility::ALL.len()],
}

impl Derived {
    /// Derives from `state` (one copy of it, minus the backend lists).
    pub fn of(state: &ForwardingState) -> Self {
        let services = state
            .services
            .iter()
            .map(|s| ServiceState {
                name: s.name.clone(),
                encapsulation: s.encapsulation,
                affinity: s.affinity,
                tracking: s.tracking,
                draining_timeout_ms: s.draining_timeout_ms,
                drain_on_failover: s.drain_on_failover,
                follow_fragments: s.follow_fragments,
                pool_epoch: s.pool_epoch,
                tables: s.tables.clone(),
                backends: Vec::new(),
                quic_lb: s.quic_lb.clone(),
            })
            .collect();
        let light = ForwardingState {
            generation: state.generation,
            rules: state.rules.clone(),
            services,
            backends: state.backends.clone(),
            ports: state.ports.clone(),
            zones: state.zones.clone(),
            lane_backends: state.lane_backends.clone(),
            flow_seed: state.flow_seed,
        };
        Self {
            light,
            slots: Mutex::new(HashMap::new()),
            summaries: Mutex::new(HashMap::new()),
        }
    }
}

/// An `--unhealthy` address that no configured backend has.
#[derive(Debug, thiserror::Error)]
#[error(
    "--unhealthy {0}: no backend of the configuration has this address\n  \
     hint: give the address of a backend of a [[backend_service]] \
     (`sluice status` lists them)"
)]
pub struct NotABackend(pub IpAddr);

impl<'a> Explainer<'a> {
    /// The snapshot `sluice run` would publish for `cfg` once its health
    /// checks said every backend is healthy, then, on that copy, the
    /// backends at `unhealthy` turned unhealthy ([`assume_unhealthy`]).
    /// Ports have their configured MACs (or none: an offline explanation
    /// has no NIC to ask).
    pub fn offline(cfg: &'a Config, unhealthy: &[IpAddr]) -> Result<Self, NotABackend> {
        let health: crate::health::ProbeStatuses = probe_keys(cfg)
            .into_iter()
            .map(|k| {
                let mut s = ProbeStatus::new(k.initial);
                s.state.healthy = true;
                (k, s)
            })
            .collect();
        let mut memory = PolicyMemory::default();
        let (state, reports) = build_forwarding_state_with(
            cfg,
            &[],
            &mut BackendIds::new(),
            &mut memory,
            &BuildInputs::with_health(&health),
            1,
        );
        Self::assuming(cfg, Arc::new(state), Arc::new(reports), unhealthy, None)
    }

    /// Explains from `state` (built from `cfg`, with `reports`) as it
    /// would be with the backends at `unhealthy` unhealthy: a copy,
    /// rebuilt by the health-change path; nothing is published. `derived`
    /// is what an earlier explainer derived from this same `state`, if
    /// any: without `unhealthy`, it is used instead of deriving again.
    pub fn assuming(
        cfg: &'a Config,
        state: Arc<ForwardingState>,
        reports: Arc<Vec<ServiceReport>>,
        unhealthy: &[IpAddr],
        derived: Option<Arc<Derived>>,
    ) -> Result<Self, NotABackend> {
        let unhealthy: HashSet<IpAddr> = unhealthy.iter().copied().collect();
        if !unhealthy.is_empty() {
            let configured: HashSet<IpAddr> = cfg
                .backend_services
                .iter()
                .flat_map(|s| s.backends.iter().map(|b| b.address))
                .collect();
            let mut sorted: Vec<IpAddr> = unhealthy.iter().copied().collect();
            sorted.sort();
            if let Some(a) = sorted.iter().find(|a| !configured.contains(a)) {
                return Err(NotABackend(*a));
            }
        }
        let (state, reports, derived) = if unhealthy.is_empty() {
            let derived = derived.unwrap_or_else(|| Arc::new(Derived::of(&state)));
            (state, reports, derived)
        } else {
            let (state, reports) = assume_unhealthy(&state, &reports, cfg, &unhealthy);
            let derived = Arc::new(Derived::of(&state));
            (Arc::new(state), Arc::new(reports), derived)
        };
        Ok(Self {
            cfg,
            state,
            reports,
            unhealthy,
            derived,
        })
    }

    /// What this explainer derived from its snapshot, for the next
    /// explainer of the same snapshot.
    pub fn derived(&self) -> Arc<Derived> {
        Arc::clone(&self.derived)
    }

    /// The backends assumed unhealthy, in address order.
    pub fn assumed_unhealthy(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.unhealthy.iter().copied().collect();
        v.sort();
        v
    }

    /// The index of the port named `name` (None: no such port).
    pub fn port_index(&self, name: &str) -> Option<u16> {
        self.cfg
            .dataplane
            .ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
    }

    /// The decision for `frame` received on port `rx_port`, listing at
    /// most [`LISTED`] of the service's backends ([`Self::backend_lines`]).
    pub fn explain(&self, frame: &[u8], rx_port: u16) -> Explanation {
        let mut e = sluice_core::explain::explain(frame, rx_port, &self.derived.light);
        if let Some(b) = e.balancing.as_mut() {
            b.backends = self.backend_lines(b).listed;
        }
        e
    }

    /// The service's backends for `b`'s table: every one counted by
    /// eligibility, and the ones to list — all of them up to [`LISTED`],
    /// else the slot's owner and the first not eligible, in configuration
    /// order. Beyond [`LISTED`], the counts and the backends not eligible
    /// are found once per snapshot, table and active pool, so a request
    /// only looks up the lines it lists.
    pub fn backend_lines(&self, b: &Balancing) -> BackendLines {
        let Some(service) = self.state.service(b.service) else {
            return BackendLines::default();
        };
        let slots = self.slot_counts(b);
        let line = |id: BackendId| {
            let state = self.state.backend(id)?;
            let slots_in_table = slots.get(id.index()).map_or(0, |&n| n as usize);
            Some(BackendLine {
                state: state.clone(),
                slots_in_table,
            })
        };
        let active = self
            .reports
            .get(usize::from(b.service.0))
            .and_then(|r| r.active_pool);
        let zonal = b.zone.is_some();
        let count = |ids: &mut dyn Iterator<Item = BackendId>, keep: usize| {
            let mut out = BackendLines::default();
            for l in ids.filter_map(line) {
                let kind = eligibility(&l, active, zonal);
                out.counts[kind as usize] += 1;
                out.total += 1;
                if out.listed.len() < keep && kind != Eligibility::Eligible {
                    out.listed.push(l);
                }
            }
            out
        };
        if service.backends.len() <= LISTED {
            let mut out = count(&mut service.backends.iter().copied(), 0);
            out.listed = service.backends.iter().copied().filter_map(line).collect();
            out.all_listed = true;
            return out;
        }
        let key = (b.service.0, b.table, active, zonal);
        let summary = {
            let mut cache = self
                .derived
                .summaries
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let summary = cache.entry(key).or_insert_with(|| {
                let all = count(&mut service.backends.iter().copied(), LISTED - 1);
                Arc::new(Summary {
                    not_eligible: all.listed.iter().map(|l| l.state.id).collect(),
                    total: all.total,
                    counts: all.counts,
                })
            });
            Arc::clone(summary)
        };
        let listed = b
            .slot_owner
            .into_iter()
            .chain(summary.not_eligible.iter().copied())
            .filter_map(line)
            .collect();
        BackendLines {
            listed,
            all_listed: false,
            total: summary.total,
            counts: summary.counts,
        }
    }

    /// Each backend index's slots in `b`'s table, counted once per
    /// snapshot and table.
    fn slot_counts(&self, b: &Balancing) -> Arc<Vec<u32>> {
        let key = (b.service.0, b.table);
        let mut cache = self.derived.slots.lock().unwrap_or_else(|p| p.into_inner());
        let counts = cache.entry(key).or_insert_with(|| {
            let mut counts = vec![0u32; self.state.backends.len()];
            let table = self
                .state
                .service(b.service)
                .and_then(|s| s.tables.get(b.table));
            for id in table.into_iter().flat_map(|t| t.slots.iter()) {
                if let Some(n) = counts.get_mut(id.index()) {
                    *n += 1;
                }
            }
            Arc::new(counts)
        });
        Arc::clone(counts)
    }
}

/// A service's backends as one explanation shows them.
#[derive(Debug, Default)]
pub struct BackendLines {
    /// The backends listed (at most [`LISTED`]).
    pub listed: Vec<BackendLine>,
    /// Whether `listed` is every backend of the service.
    pub all_listed: bool,
    /// The service's backends in all.
    pub total: usize,
    /// How many backends are in each [`Eligibility`] (by discriminant).
    pub counts: [usize; Eligibility::ALL.len()],
}

/// Why a backend can or cannot take a new flow from a client (EL-1,
/// EL-2, FO-1, ZA-3, CT-10), the first reason that applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eligibility {
    /// It has slots in the client's table.
    Eligible,
    /// Removed from the configuration; its connections keep working.
    Draining,
    Unhealthy,
    WeightZero,
    /// In the pool that is not active.
    InactivePool,
    /// Not in the client's zone table.
    OtherZone,
    /// Healthy, weighted and in the active pool, yet without a slot.
    NotInTable,
}

impl Eligibility {
    pub const ALL: [Eligibility; 7] = [
        Eligibility::Eligible,
        Eligibility::Draining,
        Eligibility::Unhealthy,
        Eligibility::WeightZero,
        Eligibility::InactivePool,
        Eligibility::OtherZone,
        Eligibility::NotInTable,
    ];

    /// The JSON key of its count.
    pub fn key(self) -> &'static str {
        match self {
            Eligibility::Eligible => "eligible",
            Eligibility::Draining => "draining",
            Eligibility::Unhealthy => "unhealthy",
            Eligibility::WeightZero => "weight_0",
            Eligibility::InactivePool => "inactive_pool",
            Eligibility::OtherZone => "other_zone",
            Eligibility::NotInTable => "not_in_table",
        }
    }
}

/// `line`'s [`Eligibility`] under the service's `active` pool; `zonal`:
/// the client's table is a zone's.
pub fn eligibility(line: &BackendLine, active: Option<Pool>, zonal: bool) -> Eligibility {
    let s = &line.state;
    if line.slots_in_table > 0 {
        Eligibility::Eligible
    } else if s.draining_until.is_some() {
        Eligibility::Draining
    } else if !s.healthy {
        Eligibility::Unhealthy
    } else if s.weight == 0 {
        Eligibility::WeightZero
    } else if active.is_some_and(|p| p != s.pool) {
        Eligibility::InactivePool
    } else if zonal {
        Eligibility::OtherZone
    } else {
        Eligibility::NotInTable
    }
}
