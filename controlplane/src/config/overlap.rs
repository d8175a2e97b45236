//! Which of many closed intervals overlap which, in O(n log n): FR-2's
//! port ranges of one VIP, zones' client subnets. Comparing every pair
//! takes minutes at a provider's scale (tens of thousands of rules).
//!
//! An offline sweep: items sorted by their low end are added, as the
//! queries sorted by their high end need them, to a Fenwick tree keyed by
//! high end (descending), whose prefixes give the earliest items that
//! reach up to a query's low end. Counts come from binary searches: the
//! items overlapping `[lo, hi]` are all but those starting above `hi` and
//! those ending below `lo` (two disjoint sets).

/// One interval `[lo, hi]` and the group it belongs to: overlaps within a
/// group are allowed (a zone's own subnets), across groups they are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    pub lo: u128,
    pub hi: u128,
    pub group: usize,
}

/// What overlaps one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overlaps {
    /// The first interval (by index) of another group that overlaps it.
    pub earliest_other_group: Option<usize>,
    /// Intervals that overlap it, itself included.
    pub count: usize,
}

/// For each of `items` (in order), what overlaps it.
pub(crate) fn overlaps(items: &[Interval]) -> Vec<Overlaps> {
    let mut his: Vec<u128> = items.iter().map(|i| i.hi).collect();
    his.sort_unstable();
    let mut los: Vec<u128> = items.iter().map(|i| i.lo).collect();
    los.sort_unstable();
    let mut distinct_his = his.clone();
    distinct_his.dedup();
    // Fenwick position (1-based) of a high end: highest first, so "ends at
    // or above lo" is a prefix.
    let rank = |hi: u128| distinct_his.len() - distinct_his.partition_point(|&h| h < hi);
    let reaching = |lo: u128| distinct_his.len() - distinct_his.partition_point(|&h| h < lo);

    let mut by_lo: Vec<usize> = (0..items.len()).collect();
    by_lo.sort_by_key(|&i| items[i].lo);
    let mut by_hi: Vec<usize> = (0..items.len()).collect();
    by_hi.sort_by_key(|&i| items[i].hi);

    let mut tree = Fenwick::new(distinct_his.len());
    let mut added = 0;
    let mut out = vec![
        Overlaps {
            earliest_other_group: None,
            count: 0,
        };
        items.len()
    ];
    for q in by_hi {
        let Interval { lo, hi, group } = items[q];
        while let Some(&j) = by_lo.get(added).filter(|&&j| items[j].lo <= hi) {
            tree.add(rank(items[j].hi), (j, items[j].group));
            added += 1;
        }
        let starts_above = items.len() - los.partition_point(|&l| l <= hi);
        let ends_below = his.partition_point(|&h| h < lo);
        out[q] = Overlaps {
            earliest_other_group: tree.earliest(reaching(lo)).other_than(group),
            count: items.len() - starts_above - ends_below,
        };
    }
    out
}

/// The earliest item, and the earliest of a group other than that one's:
/// together they answer "the earliest not of group g" for every g.
#[derive(Clone, Copy, Debug, Default)]
struct EarliestTwo {
    first: Option<(usize, usize)>,
    other: Option<(usize, usize)>,
}

impl EarliestTwo {
    fn add(&mut self, item: (usize, usize)) {
        let Some(first) = self.first else {
            self.first = Some(item);
            return;
        };
        if item.0 < first.0 {
            self.first = Some(item);
            if item.1 != first.1 {
                self.other = Some(first);
            }
        } else if item.1 != first.1 && self.other.is_none_or(|o| item.0 < o.0) {
            self.other = Some(item);
        }
    }

    fn merge(&mut self, o: &EarliestTwo) {
        for item in [o.first, o.other].into_iter().flatten() {
            self.add(item);
        }
    }

    fn other_than(&self, group: usize) -> Option<usize> {
        match self.first {
            Some((i, g)) if g != group => Some(i),
            _ => self.other.map(|(i, _)| i),
        }
    }
}

/// Prefix "earliest two" over positions 1..=n.
struct Fenwick {
    nodes: Vec<EarliestTwo>,
}

impl Fenwick {
    fn new(n: usize) -> Self {
        Self {
            nodes: vec![EarliestTwo::default(); n + 1],
        }
    }

    fn add(&mut self, mut pos: usize, item: (usize, usize)) {
        while pos < self.nodes.len() {
            self.nodes[pos].add(item);
            pos += pos & pos.wrapping_neg();
        }
    }

    fn earliest(&self, mut pos: usize) -> EarliestTwo {
        let mut acc = EarliestTwo::default();
        while pos > 0 {
            acc.merge(&self.nodes[pos]);
            pos -= pos & pos.wrapping_neg();
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(items: &[Interval]) -> Vec<Overlaps> {
        let meets = |a: &Interval, b: &Interval| a.lo <= b.hi && b.lo <= a.hi;
        items
            .iter()
            .map(|a| Overlaps {
                earliest_other_group: items.iter().position(|b| b.group != a.group && meets(a, b)),
                count: items.iter().filter(|b| meets(a, b)).count(),
            })
            .collect()
    }

    /// The sweep agrees with comparing every pair, on random intervals
    /// with few and many groups, nested, equal and disjoint.
    #[test]
    fn agrees_with_every_pair() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..300 {
            let n = 1 + next(40) as usize;
            let span = 1 + next(if round % 2 == 0 { 20 } else { 1000 });
            let groups = 1 + next(if round % 3 == 0 { 3 } else { 50 });
            let items: Vec<Interval> = (0..n)
                .map(|_| {
                    let a = u128::from(next(span));
                    let b = u128::from(next(span));
                    Interval {
                        lo: a.min(b),
                        hi: a.max(b),
                        group: next(groups) as usize,
                    }
                })
                .collect();
            assert_eq!(overlaps(&items), brute(&items), "{items:?}");
        }
    }

    #[test]
    fn empty_and_single() {
        assert!(overlaps(&[]).is_empty());
        let one = Interval {
            lo: 5,
            hi: 5,
            group: 0,
        };
        assert_eq!(
            overlaps(&[one]),
            [Overlaps {
                earliest_other_group: None,
                count: 1
            }]
        );
    }
}
