//! A service's QUIC-LB routing (`ServiceState::quic_lb`): per
//! configuration, its codec and the map from server ID to backend.
//!
//! The map names every backend the service lists: the configured ones
//! and those draining after removal (CT-10), whose connections go on
//! until their deadline (the packet path checks it). A removed backend
//! keeps the server IDs it had, in the configurations that still exist
//! with the same server ID length; when a configured backend has the same
//! server ID in the same configuration, the configured one wins (a new
//! server took the ID over), and of two draining backends with one ID
//! the one removed last.
//!
//! Like the Maglev tables (`table_cache`), a service's routing is kept
//! between builds while its inputs do not change — its configurations,
//! its listed backends' ids and server IDs, and which of them are in the
//! pool that is not active — so a build that does not touch the service
//! shares the last snapshot's `Arc`, and a health change rebuilds only
//! on a pool flip of its own service ([`QuicMemory::repool`]).

use std::collections::HashMap;
use std::sync::Arc;

use ahash::AHashMap;

use sluice_core::backend::BackendState;
use sluice_core::ids::BackendId;
use sluice_core::quic_lb::{CidCodec, ConfigRoute, QuicLbRouting, Server, ServerId};
use sluice_core::service::ServiceState;
use sluice_core::time::Millis;

use crate::config::{BackendConfig, BackendServiceConfig, Pool, QuicLbConfig};
use crate::policy::BackendView;

/// The routing of each QUIC-LB service of the last build, and the server
/// IDs of removed backends while they drain.
#[derive(Debug, Default)]
pub(super) struct QuicMemory {
    entries: AHashMap<String, Entry>,
    /// A removed backend's server IDs, as its last configured build had
    /// them (kept while it drains).
    draining: HashMap<BackendId, Box<[DrainingId]>>,
    /// Routings built (cache misses), for tests.
    built: u64,
}

/// A removed backend's server ID in one configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DrainingId {
    config_id: u8,
    /// The configuration's server ID length then: an ID of another
    /// length is no ID of the configuration that replaced it.
    len: u8,
    value: ServerId,
}

/// One service's routing and what it was built from.
#[derive(Debug)]
struct Entry {
    configs: Vec<QuicLbConfig>,
    /// Configured backends in order: id, in the inactive pool.
    members: Vec<(BackendId, bool)>,
    /// Their server IDs, `configs.len()` per member, in member order.
    server_ids: Vec<ServerId>,
    /// Draining backends by id: id, in the inactive pool.
    draining: Vec<(BackendId, bool)>,
    routing: Arc<QuicLbRouting>,
}

/// The backends the service lists, as the routing sees them.
pub(super) struct Listed<'a> {
    /// `ServiceState::backends`: the configured backends with an id (in
    /// order, as `configured`), then the draining ones.
    pub ids: &'a [BackendId],
    pub configured: &'a [(&'a BackendConfig, BackendView)],
    /// The removed backends still draining (`PolicyMemory::draining`).
    pub removed: &'a HashMap<BackendId, (String, BackendState)>,
}

impl QuicMemory {
    /// `svc`'s routing for the backends it lists, under `active`, the
    /// service's last active pool: the last build's when its inputs are
    /// the same, else built. None for a service without QUIC-LB.
    pub(super) fn routing(
        &mut self,
        svc: &BackendServiceConfig,
        listed: &Listed<'_>,
        active: Option<Pool>,
    ) -> Option<Arc<QuicLbRouting>> {
        if svc.quic_lb.is_empty() {
            self.entries.remove(&svc.name);
            return None;
        }
        let inactive = inactive_in(svc, active);
        let n = listed.configured.len().min(listed.ids.len());
        let (members, rest) = listed.ids.split_at(n);
        let configured = &listed.configured[..n];
        let mut draining: Vec<(BackendId, bool)> = rest
            .iter()
            .filter_map(|id| Some((*id, inactive(listed.removed.get(id)?.1.pool))))
            .collect();
        draining.sort_unstable_by_key(|&(id, _)| id);
        self.remember_draining(&svc.name, &draining);
        if let Some(e) = self.entries.get(&svc.name) {
            if e.same(svc, members, configured, &draining, &inactive) {
                return Some(Arc::clone(&e.routing));
            }
        }
        let k = svc.quic_lb.len();
        let mut server_ids = Vec::with_capacity(n * k);
        for (b, _) in configured {
            // Validation gives every backend one per configuration.
            server_ids.extend((0..k).map(|i| b.quic_server_ids.get(i).copied().unwrap_or(0)));
        }
        let entry = Entry {
            configs: svc.quic_lb.clone(),
            members: members
                .iter()
                .zip(configured)
                .map(|(&id, (b, _))| (id, inactive(b.pool)))
                .collect(),
            server_ids,
            routing: Arc::default(),
            draining,
        };
        let routing = Arc::new(entry.build(&self.draining, listed.removed));
        self.built += 1;
        self.entries.insert(
            svc.name.clone(),
            Entry {
                routing: Arc::clone(&routing),
                ..entry
            },
        );
        Some(routing)
    }

    /// The routing of `next`, the service `old` rebuilt for a health
    /// change: `old`'s unless the active pool flipped (the epoch moved),
    /// else a copy with each backend's `inactive_pool` as the new active
    /// pool makes it. Members, ids and server IDs do not change with
    /// health.
    pub(super) fn repool(
        &mut self,
        svc: &BackendServiceConfig,
        old: &ServiceState,
        next: &ServiceState,
        active: Option<Pool>,
        backends: &[Option<BackendState>],
    ) -> Option<Arc<QuicLbRouting>> {
        let routing = old.quic_lb.as_ref()?;
        if next.pool_epoch == old.pool_epoch {
            return Some(Arc::clone(routing));
        }
        let inactive = inactive_in(svc, active);
        let pool_of = |id: BackendId| match backends.get(id.index()) {
            Some(Some(b)) if b.id == id => Some(b.pool),
            _ => None,
        };
        let mut copy = QuicLbRouting::clone(routing);
        for route in copy.configs.iter_mut().flatten() {
            for server in route.servers.values_mut() {
                if let Some(pool) = pool_of(server.backend) {
                    server.inactive_pool = inactive(pool);
                }
            }
        }
        let copy = Arc::new(copy);
        // The next build compares with what is published now.
        if let Some(e) = self
            .entries
            .get_mut(&svc.name)
            .filter(|e| Arc::ptr_eq(&e.routing, routing))
        {
            for (id, flag) in e.members.iter_mut().chain(e.draining.iter_mut()) {
                if let Some(pool) = pool_of(*id) {
                    *flag = inactive(pool);
                }
            }
            e.routing = Arc::clone(&copy);
        }
        Some(copy)
    }

    /// Forgets the routings of services `keep_service` says are gone and
    /// the server IDs of backends `keep_draining` says no longer drain.
    pub(super) fn retain(
        &mut self,
        keep_service: impl Fn(&str) -> bool,
        keep_draining: impl Fn(&BackendId) -> bool,
    ) {
        self.entries.retain(|name, _| keep_service(name));
        self.draining.retain(|id, _| keep_draining(id));
    }

    /// Routings built so far.
    pub(super) fn built(&self) -> u64 {
        self.built
    }

    /// Records the server IDs of the backends of `draining` that have
    /// just been removed: those the service's last routing gave them.
    fn remember_draining(&mut self, service: &str, draining: &[(BackendId, bool)]) {
        let new: Vec<BackendId> = draining
            .iter()
            .map(|&(id, _)| id)
            .filter(|id| !self.draining.contains_key(id))
            .collect();
        if new.is_empty() {
            return;
        }
        let last = self.entries.get(service);
        let at: HashMap<BackendId, usize> = last.map_or_else(HashMap::new, |e| {
            e.members
                .iter()
                .enumerate()
                .map(|(i, &(id, _))| (id, i))
                .collect()
        });
        for id in new {
            let ids = match (last, at.get(&id)) {
                (Some(e), Some(&i)) => {
                    let k = e.configs.len();
                    e.configs
                        .iter()
                        .zip(&e.server_ids[i * k..(i + 1) * k])
                        .map(|(c, &value)| DrainingId {
                            config_id: c.lengths.config_id,
                            len: c.lengths.server_id,
                            value,
                        })
                        .collect()
                }
                _ => Box::default(),
            };
            self.draining.insert(id, ids);
        }
    }
}

impl Entry {
    /// Whether this routing is the one of these inputs.
    fn same(
        &self,
        svc: &BackendServiceConfig,
        members: &[BackendId],
        configured: &[(&BackendConfig, BackendView)],
        draining: &[(BackendId, bool)],
        inactive: &impl Fn(Pool) -> bool,
    ) -> bool {
        let k = self.configs.len();
        self.configs == svc.quic_lb
            && self.draining == draining
            && self.members.len() == members.len()
            && self
                .members
                .iter()
                .zip(members.iter().zip(configured))
                .zip(self.server_ids.chunks_exact(k))
                .all(|((&(id, flag), (&now, (b, _))), ids)| {
                    id == now && flag == inactive(b.pool) && *b.quic_server_ids == *ids
                })
    }

    /// The routing of these inputs: per configuration, the draining
    /// backends' server IDs (removed last wins), then the configured
    /// backends' (which win over any draining one).
    fn build(
        &self,
        recorded: &HashMap<BackendId, Box<[DrainingId]>>,
        removed: &HashMap<BackendId, (String, BackendState)>,
    ) -> QuicLbRouting {
        let deadline = |id: &BackendId| {
            removed
                .get(id)
                .and_then(|(_, b)| b.draining_until)
                .unwrap_or(Millis(0))
        };
        let mut by_deadline: Vec<(Millis, BackendId, bool)> = self
            .draining
            .iter()
            .map(|&(id, flag)| (deadline(&id), id, flag))
            .collect();
        by_deadline.sort_unstable();
        let k = self.configs.len();
        let mut routing = QuicLbRouting::default();
        for (c, config) in self.configs.iter().enumerate() {
            let l = config.lengths;
            let mut route = ConfigRoute {
                codec: CidCodec::new(l, config.key.map(|k| k.0)),
                servers: Default::default(),
            };
            route
                .servers
                .reserve(self.members.len() + self.draining.len());
            for &(_, id, inactive_pool) in &by_deadline {
                let Some(ids) = recorded.get(&id) else {
                    continue;
                };
                for d in ids
                    .iter()
                    .filter(|d| d.config_id == l.config_id && d.len == l.server_id)
                {
                    route.servers.insert(
                        d.value,
                        Server {
                            backend: id,
                            inactive_pool,
                        },
                    );
                }
            }
            for (&(id, inactive_pool), ids) in
                self.members.iter().zip(self.server_ids.chunks_exact(k))
            {
                route.servers.insert(
                    ids[c],
                    Server {
                        backend: id,
                        inactive_pool,
                    },
                );
            }
            if let Some(slot) = routing.configs.get_mut(usize::from(l.config_id)) {
                *slot = Some(route);
            }
        }
        routing
    }
}

/// Whether a backend of `pool` is in `svc`'s pool that is not active
/// (FO-1): only a service with a failover policy has one, and only once
/// a pool has been active.
fn inactive_in(svc: &BackendServiceConfig, active: Option<Pool>) -> impl Fn(Pool) -> bool {
    let failover = svc.failover_policy.is_some();
    move |pool| failover && active.is_some_and(|a| a != pool)
}

#[cfg(test)]
mod tests;
