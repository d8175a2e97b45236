//! Backend ids: stable while a backend is configured, reused once nothing
//! can name them any more.
//!
//! A [`BackendId`] is an index (snapshot table, per-backend counters) and a
//! generation. An index goes through four states:
//!
//! * **in use**: some backend of the last built snapshot has it
//!   (configured, or draining after removal, CT-10);
//! * **leaving**: the snapshot built at generation `since` was the first
//!   without it; older snapshots may still be held by a worker, the
//!   metrics or `sluice status`;
//! * **free**: every snapshot older than `since` is gone. Its counters are
//!   zeroed and the next backend gets it at the next generation. A
//!   conntrack entry that still records the old id matches nothing in any
//!   later snapshot (the generation differs) and is re-selected (CT-7);
//! * **quarantined**: its generation is the last one; giving it out again
//!   would wrap to generation 0, so it waits until every conntrack entry
//!   that could record any of its earlier generations has expired — `hold`
//!   (longer than the longest idle timeout ever configured) after it left.
//!   An entry is refreshed only while its backend is in a snapshot, so it
//!   expires at most one idle timeout after its id was freed.
//!
//! Free indexes are reused first in, first out, so reuse spreads over the
//! whole free pool and an index wraps only after 2¹² reuses of itself.
//! Every operation is O(1) per backend (hash maps, queues); a build is
//! O(backends).

use std::collections::{HashMap, HashSet, VecDeque};

use ahash::AHashMap;
use std::net::IpAddr;

use sluice_core::ids::BackendId;
use sluice_core::time::Millis;

use crate::config::Config;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    /// In the snapshot built at generation `seen` (the latest build).
    InUse {
        seen: u64,
    },
    /// First missing from the snapshot built at generation `since`.
    Leaving {
        since: u64,
    },
    Free,
    Quarantined,
}

#[derive(Copy, Clone, Debug)]
struct Index {
    /// Generation of the last id issued for this index.
    generation: u32,
    state: State,
}

/// Stable backend ids, keyed by (service name, backend address).
#[derive(Debug, Default)]
pub struct BackendIds {
    /// Per service name, per address (looked up by `&str`, no allocation;
    /// a process-local map, so the fast keyed hasher).
    configured: AHashMap<String, AHashMap<IpAddr, BackendId>>,
    indexes: Vec<Index>,
    free: VecDeque<u32>,
    /// In order of `since` (builds only move forward).
    leaving: VecDeque<(u64, u32)>,
    /// In order of the deadline: (reusable from, index).
    quarantined: VecDeque<(Millis, u32)>,
    /// Ids the last builds marked, swept at the end of each build.
    marked: Vec<u32>,
    in_use: Vec<u32>,
}

impl BackendIds {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of a configured backend, giving it one if it has none
    /// (None: every index is taken; [`Self::assignable`] says how many
    /// new backends fit, the controller checks before it builds).
    pub fn get_or_assign(&mut self, service: &str, address: IpAddr) -> Option<BackendId> {
        if let Some(id) = self.get(service, address) {
            return Some(id);
        }
        let id = match self.free.pop_front() {
            Some(index) => {
                let slot = &mut self.indexes[index as usize];
                slot.generation = (slot.generation + 1) % BackendId::GENERATIONS;
                slot.state = State::Free;
                BackendId::new(index, slot.generation)
            }
            None if self.indexes.len() < BackendId::INDEXES => {
                self.indexes.push(Index {
                    generation: 0,
                    state: State::Free,
                });
                BackendId::new(self.indexes.len() as u32 - 1, 0)
            }
            None => return None,
        };
        self.configured
            .entry(service.to_string())
            .or_default()
            .insert(address, id);
        Some(id)
    }

    pub fn get(&self, service: &str, address: IpAddr) -> Option<BackendId> {
        self.configured.get(service)?.get(&address).copied()
    }

    /// Number of indexes ever created: the length the snapshot's backend
    /// table and the per-backend counters need.
    pub fn high_water(&self) -> u32 {
        self.indexes.len() as u32
    }

    /// Number of configured backends with an id.
    pub fn len(&self) -> usize {
        self.configured.values().map(|m| m.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.configured.is_empty()
    }

    /// How many backends not seen before can get an id now.
    pub fn assignable(&self) -> usize {
        self.free.len() + (BackendId::INDEXES - self.indexes.len())
    }

    /// Indexes not free: in use, leaving or quarantined.
    pub fn held(&self) -> usize {
        self.indexes.len() - self.free.len()
    }

    /// How many backends of `cfg` have no id yet (a service lists each
    /// address once: validation refuses duplicates).
    pub fn missing(&self, cfg: &Config) -> usize {
        cfg.backend_services
            .iter()
            .map(|s| match self.configured.get(s.name.as_str()) {
                Some(known) => s
                    .backends
                    .iter()
                    .filter(|b| !known.contains_key(&b.address))
                    .count(),
                None => s.backends.len(),
            })
            .sum()
    }

    /// Forgets the configured backends not in `cfg` (their ids live on in
    /// the draining set, CT-10, until swept), so a backend that is removed
    /// and later re-added gets a new id. A service whose every known
    /// address is still listed (every service a reload did not touch) is
    /// kept after one lookup per backend.
    pub fn retain_config(&mut self, cfg: &Config) {
        let services: HashMap<&str, &crate::config::BackendServiceConfig> = cfg
            .backend_services
            .iter()
            .map(|s| (s.name.as_str(), &**s))
            .collect();
        self.configured.retain(|name, known| {
            services
                .get(name.as_str())
                .is_some_and(|svc| retain_listed(known, svc))
        });
    }

    /// [`Self::retain_config`] for one service that stays configured.
    pub fn retain_service(&mut self, svc: &crate::config::BackendServiceConfig) {
        if let Some(known) = self.configured.get_mut(svc.name.as_str()) {
            if !retain_listed(known, svc) {
                self.configured.remove(svc.name.as_str());
            }
        }
    }

    /// Records that the snapshot being built at `generation` names `id`,
    /// which a build of only some services keeps from the last one:
    /// marked only if it is new (an id the last build marked stays in use
    /// until a full build sweeps, so a build of a few services touches
    /// only theirs).
    pub fn keep(&mut self, id: BackendId, generation: u64) {
        let in_use = self
            .indexes
            .get(id.index())
            .is_some_and(|slot| matches!(slot.state, State::InUse { .. }));
        if !in_use {
            self.mark(id, generation);
        }
    }

    /// `id` is in no snapshot from `generation` on (a build of only some
    /// services: what a sweep would find unmarked).
    pub fn leave(&mut self, id: BackendId, generation: u64) {
        if let Some(slot) = self.indexes.get_mut(id.index()) {
            if matches!(slot.state, State::InUse { .. }) {
                slot.state = State::Leaving { since: generation };
                self.leaving.push_back((generation, id.index() as u32));
            }
        }
    }

    /// Records that the snapshot being built at `generation` names `id`.
    pub fn mark(&mut self, id: BackendId, generation: u64) {
        if let Some(slot) = self.indexes.get_mut(id.index()) {
            if slot.state != (State::InUse { seen: generation }) {
                slot.state = State::InUse { seen: generation };
                self.marked.push(id.index() as u32);
            }
        }
    }

    /// Ends the build of `generation`: what it did not mark is leaving.
    /// That includes indexes first marked by builds of only some services
    /// since the last sweep ([`Self::keep`]): one those builds named and
    /// this one does not leaves now, as after a run of full builds.
    pub fn sweep(&mut self, generation: u64) {
        let marked = std::mem::take(&mut self.marked);
        for &index in std::mem::take(&mut self.in_use).iter().chain(&marked) {
            let slot = &mut self.indexes[index as usize];
            if let State::InUse { seen } = slot.state {
                if seen < generation {
                    slot.state = State::Leaving { since: generation };
                    self.leaving.push_back((generation, index));
                }
            }
        }
        self.in_use = marked
            .into_iter()
            .filter(|&i| {
                matches!(self.indexes[i as usize].state, State::InUse { seen } if seen == generation)
            })
            .collect();
    }

    /// Frees the leaving indexes no snapshot still in use can name (every
    /// such snapshot has generation ≥ `oldest_in_use`), and the quarantined
    /// ones whose time has come. `hold` is how long an index at its last
    /// generation waits (longer than any conntrack idle timeout).
    /// `reset(index)` runs for each freed index (its counters).
    pub fn release(
        &mut self,
        oldest_in_use: u64,
        now: Millis,
        hold: u64,
        mut reset: impl FnMut(usize),
    ) {
        while let Some(&(since, index)) = self.leaving.front() {
            if since > oldest_in_use {
                break;
            }
            self.leaving.pop_front();
            let slot = &mut self.indexes[index as usize];
            if slot.state != (State::Leaving { since }) {
                continue; // marked again (cannot happen: ids are not revived)
            }
            reset(index as usize);
            if slot.generation + 1 == BackendId::GENERATIONS {
                slot.state = State::Quarantined;
                self.quarantined
                    .push_back((Millis(now.0.saturating_add(hold)), index));
            } else {
                slot.state = State::Free;
                self.free.push_back(index);
            }
        }
        while let Some(&(until, index)) = self.quarantined.front() {
            if until > now {
                break;
            }
            self.quarantined.pop_front();
            self.indexes[index as usize].state = State::Free;
            self.free.push_back(index);
        }
    }
}

/// Forgets the addresses of `known` that `svc` no longer lists; whether
/// any is left. A service whose every known address is still listed
/// (every service a reload did not touch) costs one lookup per backend.
fn retain_listed(
    known: &mut AHashMap<IpAddr, BackendId>,
    svc: &crate::config::BackendServiceConfig,
) -> bool {
    let listed = svc
        .backends
        .iter()
        .filter(|b| known.contains_key(&b.address))
        .count();
    if listed < known.len() {
        let keep: HashSet<IpAddr> = svc.backends.iter().map(|b| b.address).collect();
        known.retain(|addr, _| keep.contains(addr));
    }
    !known.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i))
    }

    /// One build: `live` configured backends, all marked, then swept.
    fn build(ids: &mut BackendIds, live: &[u32], generation: u64) -> Vec<BackendId> {
        let got: Vec<BackendId> = live
            .iter()
            .map(|&i| ids.get_or_assign("s", addr(i)).unwrap())
            .collect();
        for &id in &got {
            ids.mark(id, generation);
        }
        ids.sweep(generation);
        got
    }

    fn forget(ids: &mut BackendIds, i: u32) {
        if let Some(s) = ids.configured.get_mut("s") {
            s.remove(&addr(i));
        }
    }

    /// An index is reused only after the snapshots that named it are gone,
    /// at a new generation, with its counters reset.
    #[test]
    fn an_index_is_reused_after_its_snapshots_are_gone() {
        let mut ids = BackendIds::new();
        let a = build(&mut ids, &[1, 2], 1);
        forget(&mut ids, 2);
        build(&mut ids, &[1], 2);
        // Snapshot 1 (with backend 2) is still held by someone.
        let mut reset = Vec::new();
        ids.release(1, Millis(0), 1000, |i| reset.push(i));
        assert!(reset.is_empty());
        let c = build(&mut ids, &[1, 3], 3);
        assert_ne!(c[1].index(), a[1].index(), "not reused while held");
        ids.release(2, Millis(0), 1000, |i| reset.push(i));
        assert_eq!(reset, [a[1].index()]);
        let d = build(&mut ids, &[1, 3, 4], 4);
        assert_eq!(d[2].index(), a[1].index(), "reused once free");
        assert_eq!(d[2].generation(), a[1].generation() + 1);
        assert_eq!(d[0], a[0], "a configured backend keeps its id");
    }

    /// Churn: 1,000,000 add/remove cycles keep the index space bounded
    /// (counted in map and queue sizes); an index that used up its
    /// generations waits `hold` before generation 0 comes round again.
    #[test]
    fn churn_of_a_million_backends_keeps_the_ids_bounded() {
        let mut ids = BackendIds::new();
        let hold = 60_000;
        let mut seen: HashMap<usize, (u32, Millis)> = HashMap::new();
        let mut now = Millis(0);
        for cycle in 0..1_000_000u64 {
            let g = 2 * cycle + 1;
            let id = build(&mut ids, &[0, 1 + (cycle as u32)], g)[1];
            forget(&mut ids, 1 + cycle as u32);
            // Generation 0 again only after `hold` since the index last left.
            if let Some(&(last_gen, left)) = seen.get(&id.index()) {
                if id.generation() <= last_gen {
                    assert!(now.0 >= left.0 + hold, "wrapped too early: {id:?}");
                }
            }
            build(&mut ids, &[0], g + 1);
            ids.release(g + 1, now, hold, |_| {});
            seen.insert(id.index(), (id.generation(), now));
            now.0 += 10; // 100 cycles a second
        }
        assert_eq!(ids.len(), 1);
        // 4096 generations per index, 60 s hold at 100 cycles/s: about
        // 6000 / 4096 + 2 indexes ever needed.
        assert!(ids.high_water() < 16, "{}", ids.high_water());
        assert!(ids.len() + ids.free.len() + ids.quarantined.len() < 16);
    }
}
