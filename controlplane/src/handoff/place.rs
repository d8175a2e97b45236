//! Between a process's conntrack and a hand-off file: what a stopping
//! sluice writes ([`collect`]) and what a starting one makes of it
//! ([`place`]): every connection by service name and backend address,
//! mapped onto the ids, clock and workers of the process that reads it.

use std::collections::HashMap;
use std::net::IpAddr;

use sluice_core::conntrack::policy::keyed_alike;
use sluice_core::conntrack::Entry;
use sluice_core::ids::{BackendId, ServiceId};
use sluice_core::snapshot::ForwardingState;
use sluice_core::time::Millis;

use sluice_core::handoff::{BackendRecord, Connection, HandOff};

/// One worker's entries as it stopped, and its clock then.
pub struct ShardOut {
    pub now: Millis,
    pub entries: Vec<Entry>,
}

/// What goes into a file, besides the connections.
pub struct Stamp {
    pub written_unix_ms: u64,
    pub writer: String,
    pub config: String,
}

/// The file for the workers' entries under `state` (the last snapshot
/// published). An entry whose backend or service the snapshot no longer
/// has is left out (it would be re-selected on its next packet anyway).
pub fn collect(shards: &[ShardOut], state: &ForwardingState, stamp: Stamp) -> HandOff {
    let services = state.services.iter().map(|s| s.name.clone()).collect();
    let mut index: HashMap<BackendId, u32> = HashMap::new();
    let mut backends = Vec::new();
    let now = shards.iter().map(|s| s.now).max().unwrap_or_default();
    for b in state.backends.iter().flatten() {
        index.insert(b.id, backends.len() as u32);
        backends.push(BackendRecord {
            service: u32::from(b.service.0),
            address: b.address,
            healthy: b.healthy,
            weight: b.weight,
            draining_ms: b
                .draining_until
                .map(|until| until.0.saturating_sub(now.0))
                .filter(|&left| left > 0)
                .map(|left| u32::try_from(left).unwrap_or(u32::MAX)),
            port: b.egress.port,
            mac: b.egress.next_hop_mac,
        });
    }
    let connections = shards
        .iter()
        .flat_map(|s| s.entries.iter().map(move |e| (s.now, e)))
        .filter_map(|(now, e)| {
            let service = state.service(e.key.service())?;
            let backend = *index.get(&e.backend)?;
            Some(Connection {
                key: e.key,
                service: u32::from(e.key.service().0),
                backend,
                idle_ms: u32::try_from(now.0.saturating_sub(e.last_seen().0)).unwrap_or(u32::MAX),
                idle_timeout_ms: e.idle_timeout_ms,
                half_open: e.is_half_open(),
                current_pool: e.pool_epoch == service.pool_epoch,
            })
        })
        .collect();
    HandOff {
        written_unix_ms: stamp.written_unix_ms,
        writer: stamp.writer,
        config: stamp.config,
        services,
        backends,
        connections,
    }
}

/// Which worker's shard an entry belongs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owners {
    /// Chosen from the tracking key, as the workers and the ports' RSS
    /// choose it (`sluice_core::steering::Owners`), or the only worker.
    ByKey(sluice_core::steering::Owners),
    /// The NIC's RSS decides, with a key and table this process does not
    /// read: a copy in every shard (the copies no packet reaches expire
    /// after their idle timeout).
    Every { workers: usize },
}

/// Connections a file held that a start did not take, by reason.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// No service of that name in the configuration.
    pub service_gone: u64,
    /// Its backend is not one of its service's any more.
    pub backend_gone: u64,
    /// Its service keys flows differently now (tracking mode or
    /// affinity changed, CT-3).
    pub tracking_changed: u64,
    /// Idle past its timeout, counting the restart's gap (CT-5).
    pub expired: u64,
}

impl Dropped {
    /// Every reason with its count, as the log line and the metric name
    /// them.
    pub fn by_reason(&self) -> [(&'static str, u64); 4] {
        [
            ("service_gone", self.service_gone),
            ("backend_gone", self.backend_gone),
            ("tracking_changed", self.tracking_changed),
            ("expired", self.expired),
        ]
    }

    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, n)| n).sum()
    }
}

/// A file's connections placed for this process.
#[derive(Debug, Default)]
pub struct Placed {
    /// Per worker, the entries to restore before its first packet.
    pub per_worker: Vec<Vec<Entry>>,
    /// Connections taken (each counted once, copies or not).
    pub taken: u64,
    pub dropped: Dropped,
}

/// `file`'s connections as entries of this process: its service and
/// backend ids under `state` (the first snapshot), its clock (`now`),
/// `gap_ms` after the file was written, in the shards `owners` says.
pub fn place(
    file: &HandOff,
    state: &ForwardingState,
    now: Millis,
    gap_ms: u64,
    owners: Owners,
) -> Placed {
    let by_name: HashMap<&str, ServiceId> = state
        .services
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), ServiceId(i as u16)))
        .collect();
    let services: Vec<Option<ServiceId>> = file
        .services
        .iter()
        .map(|n| by_name.get(n.as_str()).copied())
        .collect();
    let backends = backend_ids(file, &services, state);
    let workers = match &owners {
        Owners::ByKey(by) => by.workers().max(1),
        Owners::Every { workers } => (*workers).max(1),
    };
    let mut placed = Placed {
        per_worker: vec![Vec::new(); workers],
        ..Placed::default()
    };
    for c in &file.connections {
        match entry(c, &services, &backends, state, now, gap_ms) {
            Ok(e) => {
                placed.taken += 1;
                match &owners {
                    Owners::ByKey(by) => match placed.per_worker.get_mut(by.of_key(&e.key)) {
                        Some(shard) => shard.push(e),
                        None => placed.per_worker[0].push(e),
                    },
                    Owners::Every { .. } => placed.per_worker.iter_mut().for_each(|s| s.push(e)),
                }
            }
            Err(Reason::ServiceGone) => placed.dropped.service_gone += 1,
            Err(Reason::BackendGone) => placed.dropped.backend_gone += 1,
            Err(Reason::TrackingChanged) => placed.dropped.tracking_changed += 1,
            Err(Reason::Expired) => placed.dropped.expired += 1,
        }
    }
    placed
}

enum Reason {
    ServiceGone,
    BackendGone,
    TrackingChanged,
    Expired,
}

/// Per file backend, its id here: a backend of the same address in the
/// service of the same name.
fn backend_ids(
    file: &HandOff,
    services: &[Option<ServiceId>],
    state: &ForwardingState,
) -> Vec<Option<BackendId>> {
    let mut here: HashMap<(ServiceId, IpAddr), BackendId> = HashMap::new();
    for b in state.backends.iter().flatten() {
        here.insert((b.service, b.address), b.id);
    }
    file.backends
        .iter()
        .map(|b| {
            let service = (*services.get(b.service as usize)?)?;
            here.get(&(service, b.address)).copied()
        })
        .collect()
}

/// One connection as an entry of this process, or why not.
fn entry(
    c: &Connection,
    services: &[Option<ServiceId>],
    backends: &[Option<BackendId>],
    state: &ForwardingState,
    now: Millis,
    gap_ms: u64,
) -> Result<Entry, Reason> {
    let id = services
        .get(c.service as usize)
        .copied()
        .flatten()
        .ok_or(Reason::ServiceGone)?;
    let service = state.service(id).ok_or(Reason::ServiceGone)?;
    let backend = backends
        .get(c.backend as usize)
        .copied()
        .flatten()
        .ok_or(Reason::BackendGone)?;
    let t = service.tracking;
    if !keyed_alike(c.key.kind(), c.key.proto(), t.mode, service.affinity) {
        return Err(Reason::TrackingChanged);
    }
    let idle = u64::from(c.idle_ms).saturating_add(gap_ms);
    let timeout = u64::from(c.idle_timeout_ms);
    if idle >= timeout {
        return Err(Reason::Expired);
    }
    // Its last packet `idle` ms before `now`; a clock that started less
    // than that ago cannot say so, so the timeout is shortened instead.
    let (last_seen, timeout) = match now.0.checked_sub(idle) {
        Some(at) => (Millis(at), timeout),
        None => (Millis(0), timeout - (idle - now.0)),
    };
    // CT-11: an entry of the pool in force stays in force; one of the
    // other pool keeps an epoch that is not the service's.
    let epoch = if c.current_pool {
        service.pool_epoch
    } else {
        service.pool_epoch.wrapping_sub(1)
    };
    let e = Entry::new(
        c.key_for(id),
        backend,
        epoch,
        last_seen,
        u32::try_from(timeout).unwrap_or(u32::MAX),
    );
    Ok(if c.half_open { e.half_open() } else { e })
}

#[cfg(test)]
mod tests;
