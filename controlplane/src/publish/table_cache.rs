//! Maglev tables kept between builds, per service.
//!
//! A service's tables depend only on its table size and, per client
//! variant (ZA-*), on the eligible backends' ids and weights: an id names
//! one backend address for as long as it exists (`backend_ids`), and the
//! permutation derives from the address. When those inputs are what they
//! were at the last build, the new snapshot shares the last one's
//! `Arc<MaglevTable>`s; a health or neighbour event thus builds the tables
//! of the services it touches and no others.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;

use crate::maglev::Permutations;

/// What a service's tables are built from: per variant, the eligible
/// backends' (id, weight) in eligibility order.
pub(super) type TableInputs = Vec<Vec<(BackendId, u32)>>;

#[derive(Debug)]
struct Entry {
    size: u32,
    inputs: TableInputs,
    tables: Vec<Arc<MaglevTable>>,
    /// The members' permutations: a health change rebuilds the tables
    /// without hashing or sorting a key.
    permutations: Permutations,
}

#[derive(Debug, Default)]
pub(super) struct TableCache {
    entries: HashMap<String, Entry>,
    built: u64,
}

impl TableCache {
    /// The tables of `service` for `inputs` at `size` slots: the cached ones
    /// when nothing changed, else built (variants with equal inputs share
    /// one table). `members` are all the service's backends; `key(id)` is a
    /// member's permutation key (its address).
    pub(super) fn tables(
        &mut self,
        service: &str,
        size: u32,
        members: &[BackendId],
        inputs: TableInputs,
        key: impl Fn(BackendId) -> String,
    ) -> Vec<Arc<MaglevTable>> {
        let entry = self.entries.remove(service);
        if let Some(e) = entry
            .as_ref()
            .filter(|e| e.size == size && e.inputs == inputs)
        {
            let tables = e.tables.clone();
            self.entries
                .insert(service.to_string(), entry.expect("checked"));
            return tables;
        }
        let permutations = match entry {
            Some(e) if e.permutations.fits(members, size) => e.permutations,
            _ => Permutations::new(members, key, size),
        };
        let mut tables: Vec<Arc<MaglevTable>> = Vec::with_capacity(inputs.len());
        for (v, set) in inputs.iter().enumerate() {
            if let Some(same) = inputs[..v].iter().position(|s| s == set) {
                tables.push(Arc::clone(&tables[same]));
                continue;
            }
            tables.push(Arc::new(permutations.table(set)));
            self.built += 1;
        }
        self.entries.insert(
            service.to_string(),
            Entry {
                size,
                inputs,
                tables: tables.clone(),
                permutations,
            },
        );
        tables
    }

    /// Drops the entries of services `keep` says are gone.
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.entries.retain(|name, _| keep(name));
    }

    /// Tables built so far (cache misses), for tests and benches.
    pub(super) fn built(&self) -> u64 {
        self.built
    }
}
