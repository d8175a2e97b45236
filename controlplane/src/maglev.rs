//! Weighted Maglev table builder (MG-1 … MG-4), run off the hot path.
//!
//! ## Permutations (MG-2)
//!
//! Each backend's preference list is the Maglev paper's permutation
//! `(offset + j·skip) mod M` with `offset = h1(key) mod M` and
//! `skip = h2(key) mod (M−1) + 1`, where `h1`/`h2` are
//! [`sluice_core::hash::stable_hash_bytes`] under two fixed seeds and `key` is
//! the backend's stable identity (its address). M is prime, so every skip is
//! coprime to M and each list visits every slot. Nothing depends on the
//! process, the CPU or the input order: backends are taken in `(key, id)`
//! order, so the same set and weights give the same table on every
//! appliance (AP-6).
//!
//! ## Weights (MG-3): credit-paced filling
//!
//! The paper fills round-robin: in each round every backend claims the next
//! free slot of its own permutation. With weights, each backend earns
//! `weight` credit per round and claims one slot whenever its credit reaches
//! `max_weight` (then pays `max_weight`). The heaviest backend claims every
//! round; one with half its weight every other round, and so on. Hence:
//!
//! * balance: after R rounds backend i owns ⌊R·wᵢ/w_max⌋ slots, so shares are
//!   wᵢ/Σw within one slot per backend (1:4 → 20 %/80 %, 0:2:6 → 0/25/75 %);
//! * disruption: each backend still walks only its own permutation, so a
//!   change to one backend perturbs the others only where it used to
//!   collide with them: the paper's minimal-disruption property holds
//!   (measured in `tests/maglev.rs`);
//! * equal weights reduce exactly to the paper's Pseudocode 1, which the
//!   tests check against [`build_table_reference_pseudocode1`].
//!
//! Alternatives considered: replicating a backend `w` times as virtual
//! backends (table build cost grows with Σw, up to 1000× here, and
//! re-weighting moves slots of every replica) and scaling the round-robin
//! by skipping turns at random (non-deterministic).
//!
//! Weight-0 backends get no slots. If *every* backend has weight 0 the
//! policy has deliberately chosen them (EL-2 (c)/(d), EL-6), so they share
//! the table equally rather than leaving it empty.

use sluice_core::hash::stable_hash_bytes;
use sluice_core::ids::BackendId;
use sluice_core::maglev_table::MaglevTable;

/// Seeds of the two permutation hashes. Changing either changes every
/// table: appliances of different versions would disagree (MG-2).
pub const OFFSET_SEED: u64 = 0x6d61_676c_6576_2d6f; // "maglev-o"
pub const SKIP_SEED: u64 = 0x6d61_676c_6576_2d73; // "maglev-s"

/// One backend as the table builder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaglevBackend {
    pub id: BackendId,
    /// Stable identity, e.g. `"192.0.2.10"`: the permutation derives from it,
    /// so it must not depend on config order or on the id.
    pub key: String,
    pub weight: u32,
}

/// `(offset, skip)` of a backend's permutation in a table of `m` slots.
pub fn permutation(key: &str, m: u32) -> (u32, u32) {
    let m = u64::from(m.max(2));
    let offset = stable_hash_bytes(OFFSET_SEED, key.as_bytes()) % m;
    let skip = stable_hash_bytes(SKIP_SEED, key.as_bytes()) % (m - 1) + 1;
    (offset as u32, skip as u32)
}

/// One backend's walk through its permutation. `next` advances by `skip`
/// with a compare-and-subtract instead of a division (both are < M).
struct Cursor {
    next: u32,
    skip: u32,
    weight: u32,
    credit: u32,
}

/// A slot not claimed yet. While filling, slots hold the claiming cursor's
/// position (below N < u32::MAX); ids are mapped in at the end.
const FREE: u32 = u32::MAX;

/// Builds a table of `size` slots (a prime, see MG-1) over `backends`.
/// Empty input (or size 0) gives an empty table.
pub fn build_table(backends: &[MaglevBackend], size: u32) -> MaglevTable {
    let all_zero = backends.iter().all(|b| b.weight == 0);
    let mut order: Vec<&MaglevBackend> = backends
        .iter()
        .filter(|b| b.weight > 0 || all_zero)
        .collect();
    if order.is_empty() || size == 0 {
        return MaglevTable::default();
    }
    order.sort_by(|a, b| a.key.cmp(&b.key).then(a.id.cmp(&b.id)));
    let mut cursors: Vec<Cursor> = order
        .iter()
        .map(|b| {
            let (offset, skip) = permutation(&b.key, size);
            Cursor::new(offset, skip, if all_zero { 1 } else { b.weight }, size)
        })
        .collect();
    let ids: Vec<BackendId> = order.iter().map(|b| b.id).collect();
    table_of(&mut cursors, &ids, size)
}

fn table_of(cursors: &mut [Cursor], ids: &[BackendId], size: u32) -> MaglevTable {
    let slots = fill(cursors, size);
    MaglevTable {
        slots: slots.into_iter().map(|c| ids[c as usize]).collect(),
    }
}

impl Cursor {
    fn new(offset: u32, skip: u32, weight: u32, size: u32) -> Self {
        Self {
            next: offset % size,
            skip: skip % size,
            weight,
            credit: 0,
        }
    }
}

/// A service's backends in table order — `(key, id)` — with their
/// permutations at one table size, kept between builds: a table over any
/// subset of them, with any weights, is then [`build_table`]'s table
/// without hashing a key or sorting (what a health change costs for a
/// service of 100,000 backends is the filling alone).
#[derive(Debug)]
pub struct Permutations {
    size: u32,
    /// The backends it was made for, in the caller's order.
    members: Vec<BackendId>,
    /// (id, offset, skip) in table order.
    sorted: Vec<(BackendId, u32, u32)>,
    position: std::collections::HashMap<BackendId, usize>,
}

impl Permutations {
    /// `members` with their keys (`key(id)`), for tables of `size` slots.
    pub fn new(members: &[BackendId], key: impl Fn(BackendId) -> String, size: u32) -> Self {
        let mut keyed: Vec<(String, BackendId)> = members.iter().map(|&id| (key(id), id)).collect();
        keyed.sort();
        let sorted: Vec<(BackendId, u32, u32)> = keyed
            .iter()
            .map(|(k, id)| {
                let (offset, skip) = permutation(k, size);
                (*id, offset, skip)
            })
            .collect();
        let position = sorted.iter().enumerate().map(|(i, e)| (e.0, i)).collect();
        Self {
            size,
            members: members.to_vec(),
            sorted,
            position,
        }
    }

    /// Whether these are the permutations of `members` at `size`.
    pub fn fits(&self, members: &[BackendId], size: u32) -> bool {
        self.size == size && self.members == members
    }

    /// [`build_table`] over `eligible` (id, weight), each one of the
    /// members (others are ignored).
    pub fn table(&self, eligible: &[(BackendId, u32)]) -> MaglevTable {
        let size = self.size;
        if size == 0 {
            return MaglevTable::default();
        }
        let all_zero = eligible.iter().all(|e| e.1 == 0);
        let mut weight: Vec<Option<u32>> = vec![None; self.sorted.len()];
        for &(id, w) in eligible {
            if let Some(&i) = self.position.get(&id) {
                weight[i] = Some(if all_zero { 1 } else { w });
            }
        }
        let (mut cursors, mut ids) = (Vec::new(), Vec::new());
        for (&(id, offset, skip), w) in self.sorted.iter().zip(&weight) {
            if let Some(w) = w.filter(|&w| w > 0) {
                cursors.push(Cursor::new(offset, skip, w, size));
                ids.push(id);
            }
        }
        if cursors.is_empty() {
            return MaglevTable::default();
        }
        table_of(&mut cursors, &ids, size)
    }
}

/// The credit-paced rounds (module doc): each slot gets the position of
/// the cursor that claimed it. Integer arithmetic only; credit stays below
/// 2 × the largest weight. Probes test a bitmap of taken slots (M bits, in
/// L1 for M = 65537) rather than the slots themselves: most of the
/// ~M·ln M probes of a build hit taken slots near the end.
fn fill(cursors: &mut [Cursor], size: u32) -> Vec<u32> {
    let max_weight = cursors.iter().map(|c| c.weight).max().unwrap_or(1);
    let m = size as usize;
    let mut slots: Vec<u32> = vec![FREE; m];
    let mut taken: Vec<u64> = vec![0; m.div_ceil(64)];
    let mut filled = 0usize;
    // Terminates: the heaviest backend claims a slot every round, and each
    // permutation visits every slot because M is prime (or skip is 1).
    while filled < m {
        for (position, c) in cursors.iter_mut().enumerate() {
            c.credit += c.weight;
            if c.credit < max_weight {
                continue;
            }
            c.credit -= max_weight;
            let (mut next, skip) = (c.next, c.skip);
            loop {
                let slot = next as usize;
                next += skip;
                if next >= size {
                    next -= size;
                }
                let (word, bit) = (slot / 64, 1u64 << (slot % 64));
                if taken[word] & bit == 0 {
                    taken[word] |= bit;
                    slots[slot] = position as u32;
                    break;
                }
            }
            c.next = next;
            filled += 1;
            if filled == m {
                break;
            }
        }
    }
    slots
}

/// The Maglev paper's Pseudocode 1, literally: a full permutation matrix,
/// round-robin over `backends` in the given order, weights ignored. The
/// reference the optimised builder is checked against; not for production
/// (it allocates N×M entries).
pub fn build_table_reference_pseudocode1(backends: &[MaglevBackend], size: u32) -> MaglevTable {
    let n = backends.len();
    let m = size as usize;
    if n == 0 || m == 0 {
        return MaglevTable::default();
    }
    let permutation_matrix: Vec<Vec<usize>> = backends
        .iter()
        .map(|b| {
            let (offset, skip) = permutation(&b.key, size);
            (0..m)
                .map(|j| ((offset as usize) + j * (skip as usize)) % m)
                .collect()
        })
        .collect();
    let mut next = vec![0usize; n];
    let mut entry: Vec<Option<usize>> = vec![None; m];
    let mut filled = 0;
    loop {
        for i in 0..n {
            let mut c = permutation_matrix[i][next[i]];
            while entry[c].is_some() {
                next[i] += 1;
                c = permutation_matrix[i][next[i]];
            }
            entry[c] = Some(i);
            next[i] += 1;
            filled += 1;
            if filled == m {
                return MaglevTable {
                    slots: entry
                        .into_iter()
                        .map(|e| e.map_or(BackendId::default(), |i| backends[i].id))
                        .collect(),
                };
            }
        }
    }
}
