//! The per-packet decision of SPEC §3 against one shard and the current
//! snapshot. Backend health, draining deadline and the service's pool epoch
//! are read from the snapshot by the entry's stable [`BackendId`] (CT-7,
//! CT-8, CT-10, CT-11): an entry never points into a snapshot.

use super::policy::{is_syn, key_kind, persists, syn_is_new_connection, trackable};
use super::{Addrs, Entry, PacketMeta, Shard, TrackKey};
use crate::ids::{BackendId, ServiceId};
use crate::maglev_table::MaglevTable;
use crate::quic_lb::{Fallback, Server};
use crate::service::ServiceState;
use crate::snapshot::ForwardingState;
use crate::time::Millis;
use crate::wire::proto::UDP;

/// CT-7, CT-8, CT-10, CT-11 for a connection ID's backend, as for a
/// conntrack entry recording it: the backend if its connection goes on
/// there, else why the packet takes the ordinary path. A connection ID
/// carries no pool epoch; the control plane marks the backends of the
/// inactive pool instead.
#[inline]
pub(crate) fn quic_connection_stays(
    server: Server,
    service: &ServiceState,
    state: &ForwardingState,
    now: Millis,
) -> Result<BackendId, Fallback> {
    let Some(b) = state.backend(server.backend) else {
        return Err(Fallback::BackendGone);
    };
    if b.draining_until.is_some_and(|until| now >= until) {
        return Err(Fallback::BackendGone);
    }
    if server.inactive_pool && !service.drain_on_failover {
        return Err(Fallback::InactivePool);
    }
    let t = service.tracking;
    if !b.healthy && !persists(t.persistence, t.mode, service.affinity, UDP) {
        return Err(Fallback::BackendUnhealthy);
    }
    Ok(server.backend)
}

/// What the snapshot says about a recorded backend.
enum Recorded {
    /// Use it.
    Keep,
    /// Gone, drained past its deadline (CT-10), or its pool flipped with
    /// `drain_on_failover = false` (CT-11): re-select as for a new flow.
    Invalid,
    /// Still there but unhealthy: CT-8 decides.
    Unhealthy,
}

fn judge(
    backend: BackendId,
    pool_epoch: u32,
    service: &ServiceState,
    state: &ForwardingState,
    now: Millis,
) -> Recorded {
    let Some(b) = state.backend(backend) else {
        return Recorded::Invalid;
    };
    if b.draining_until.is_some_and(|until| now >= until) {
        return Recorded::Invalid;
    }
    if pool_epoch != service.pool_epoch && !service.drain_on_failover {
        return Recorded::Invalid;
    }
    if b.healthy {
        Recorded::Keep
    } else {
        Recorded::Unhealthy
    }
}

/// The backend chosen for a tracked packet, and whether this packet's
/// flow got a new conntrack entry with it (a new connection: a SYN under
/// CT-1, or the first packet of a key the shard did not hold). Not when
/// the entry could not be written (table full: forwarded by Maglev,
/// counted as `insert_failed`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Selection {
    pub(crate) backend: BackendId,
    pub(crate) opened: bool,
}

impl Selection {
    /// A backend chosen without opening an entry.
    pub(crate) fn stateless(backend: BackendId) -> Self {
        Self::kept(backend)
    }

    fn kept(backend: BackendId) -> Self {
        Self {
            backend,
            opened: false,
        }
    }
}

/// The packet's tracking key (CT-3), None when it is not tracked (CT-2,
/// CT-4).
#[inline]
pub(crate) fn tracking_key(
    m: &PacketMeta,
    addrs: &Addrs,
    service_id: ServiceId,
    service: &ServiceState,
) -> Option<TrackKey> {
    if !trackable(m.proto, service.affinity) {
        return None;
    }
    let kind = key_kind(service.tracking.mode, service.affinity, m);
    Some(TrackKey::new(kind, addrs, m, service_id))
}

/// The backend for one load-balanced packet (None: no eligible backend,
/// the caller drops it as `NoBackend`). `hash` is the packet's flow hash
/// under the service's affinity (SPEC §2); eligibility (§4) is `table()`,
/// the service's Maglev table for this client (its zone's under zonal affinity,
/// ZA-3), built by the control plane from the eligible set. Recorded
/// entries do not consult it (CT-7).
// Public for the conntrack tests (core/tests/conntrack_*.rs).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn select<'t>(
    shard: &mut Shard,
    m: &PacketMeta,
    addrs: &Addrs,
    service_id: ServiceId,
    service: &ServiceState,
    table: impl Fn() -> Option<&'t MaglevTable>,
    state: &ForwardingState,
    hash: u64,
    now: Millis,
) -> Option<BackendId> {
    // CT-2, CT-4: hash every packet, record nothing.
    let Some(key) = tracking_key(m, addrs, service_id, service) else {
        return table().and_then(|t| t.lookup(hash));
    };
    let h = shard.hash(&key);
    select_tracked(shard, m, &key, h, service, table, state, hash, now).map(|s| s.backend)
}

/// [`select`] for a tracked packet whose key (`tracking_key`) and its
/// shard hash `h` are known already: the worker computes both once per
/// packet, in the pass that prefetches the shard. Also says whether the
/// packet opened a new entry ([`Selection::opened`]).
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn select_tracked<'t>(
    shard: &mut Shard,
    m: &PacketMeta,
    key: &TrackKey,
    h: u64,
    service: &ServiceState,
    table: impl Fn() -> Option<&'t MaglevTable>,
    state: &ForwardingState,
    hash: u64,
    now: Millis,
) -> Option<Selection> {
    // Called only when a packet needs eligibility (new or re-selected):
    // the zone lookup behind it is not paid on hits.
    let by_table = || table().and_then(|t| t.lookup(hash));
    let tracking = service.tracking;
    let syn = is_syn(m);
    // The key is copied into an entry only when one is written. A SYN
    // writes a half-open entry with the short timeout (CT-5:
    // `half_open_timeout`; a SYN flood must not hold the table).
    let fresh = |backend: BackendId| {
        if syn {
            Entry::new(
                *key,
                backend,
                service.pool_epoch,
                now,
                tracking.half_open_timeout_ms,
            )
            .half_open()
        } else {
            Entry::new(
                *key,
                backend,
                service.pool_epoch,
                now,
                tracking.idle_timeout_ms,
            )
        }
    };

    // CT-1: a SYN that opens a new connection goes to eligibility and
    // replaces whatever the key recorded (CT-6 left it there).
    if syn_is_new_connection(tracking.mode, service.affinity, m) {
        let id = by_table()?;
        let opened = shard.upsert(fresh(id), h, now).is_ok();
        return Some(Selection {
            backend: id,
            opened,
        });
    }

    // CT-3.
    let Some(slot) = shard.lookup(key, h, now) else {
        shard.counters.misses += 1;
        let id = by_table()?;
        // Full: still forwarded (stateless Maglev); the shard counted it.
        let opened = shard.insert_absent(fresh(id), h, now).is_ok();
        return Some(Selection {
            backend: id,
            opened,
        });
    };
    shard.counters.hits += 1;
    // Two fields, not a copy of the whole entry line.
    let (recorded, epoch) = shard.entry(slot).map(|e| (e.backend, e.pool_epoch))?;
    let chosen = match judge(recorded, epoch, service, state, now) {
        Recorded::Keep => recorded,
        Recorded::Invalid => by_table()?,
        Recorded::Unhealthy => {
            if persists(
                tracking.persistence,
                tracking.mode,
                service.affinity,
                m.proto,
            ) {
                recorded
            } else {
                // CT-8 "does not persist": move to the table's choice if
                // that one is healthy; with no healthy backend, stay.
                match by_table() {
                    Some(id) if state.backend(id).is_some_and(|b| b.healthy) => {
                        shard.counters.reselected_unhealthy += 1;
                        id
                    }
                    _ => recorded,
                }
            }
        }
    };
    // Refresh (CT-5) and carry the current epoch: an entry that survived a
    // flip (CT-11, drain on failover) belongs to the new pool.
    // A non-SYN packet completes a half-open entry.
    shard.refresh(
        slot,
        chosen,
        service.pool_epoch,
        now,
        tracking.idle_timeout_ms,
        syn,
    );
    Some(Selection::kept(chosen))
}
