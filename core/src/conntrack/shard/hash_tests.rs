//! The keyed shard hash's quality: structured keys (what real traffic and
//! a flood are made of) spread over buckets, home slots and signatures as
//! random ones would, and keys aimed at one bucket under one seed spread
//! under another.

use super::*;

/// Shards of 4,096 buckets (65,536 slots).
const CAPACITY: usize = 52_000;
const BUCKETS: usize = 4096;
/// Keys per family: 16 per bucket, one per slot.
const N: u64 = 1 << 16;
const SEEDS: [u64; 4] = [1, 7, 0x5eed, 0xdead_beef_0bad_cafe];

fn v4(src: u32, dst: u32, sport: u16, dport: u16, service: u16) -> TrackKey {
    TrackKey {
        src: [0, u64::from(src)],
        dst: [0, u64::from(dst)],
        meta: u64::from(dport)
            | (u64::from(sport) << 16)
            | (6 << 32)
            | (2 << 40)
            | (u64::from(service) << 48),
    }
}

fn v6(src: [u64; 2], sport: u16) -> TrackKey {
    TrackKey {
        src,
        dst: [0x2001_0db8_0000_0000, 0x10],
        meta: 443 | (u64::from(sport) << 16) | (6 << 32) | (2 << 40) | (1 << 42) | (1 << 48),
    }
}

/// A family of keys: its name, and its key `i`.
type Family = (&'static str, fn(u64) -> TrackKey);

/// Key `i` of each family: the shapes real clients and floods take.
fn families() -> Vec<Family> {
    vec![
        ("one client's source ports", |i| {
            v4(
                0x0a00_0001 + (i >> 15) as u32,
                0xcb00_710a,
                1024 + (i & 0x7fff) as u16,
                80,
                1,
            )
        }),
        ("sequential clients, one port", |i| {
            v4(0x0a00_0000 + i as u32, 0xcb00_710a, 40_000, 80, 1)
        }),
        ("clients and ports together", |i| {
            v4(
                0x0a00_0000 + i as u32,
                0xcb00_710a,
                1024u16.wrapping_add(i as u16),
                80,
                1,
            )
        }),
        ("one client to sequential VIPs and ports", |i| {
            v4(
                0xc633_6407,
                0xcb00_0000 + (i >> 8) as u32,
                40_000,
                i as u16 & 0xff,
                1,
            )
        }),
        ("one client, services", |i| {
            v4(
                0xc633_6407,
                0xcb00_710a,
                1024 + (i >> 8) as u16,
                80,
                i as u16 & 0xff,
            )
        }),
        ("IPv6 clients in the low half", |i| {
            v6([0x2001_0db8_0001_0000, i], 40_000)
        }),
        ("IPv6 clients by prefix", |i| {
            v6([0x2001_0db8_0000_0000 | (i << 16), 1], 40_000)
        }),
    ]
}

/// Pearson's statistic of `counts` against a uniform spread.
fn chi_squared(counts: &[u64]) -> f64 {
    let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2) / mean)
        .sum()
}

/// A uniform spread over `cells` gives about `cells − 1`, give or take
/// `sqrt(2 (cells − 1))`: six of those is far outside chance.
fn assert_uniform(what: &str, counts: &[u64]) {
    let df = counts.len() as f64 - 1.0;
    let chi = chi_squared(counts);
    assert!(
        chi < df + 6.0 * (2.0 * df).sqrt(),
        "{what}: chi-squared {chi:.0} over {} cells",
        counts.len()
    );
}

/// Buckets, home slots, second buckets and signatures of every family
/// under several seeds spread as a random function's would: uniform
/// buckets, home slots and second buckets (CT-3's lookups read one line
/// for a key at home, so structured keys must not share home slots more
/// than random ones), and no two keys with the same bucket and
/// signature (which would make the signature, a key's 31-bit
/// fingerprint in its bucket, depend on the bucket).
#[test]
fn structured_keys_spread_like_random_ones() {
    for seed in SEEDS {
        let s = Shard::with_capacity_and_seed(CAPACITY, seed);
        assert_eq!(s.slots() / SLOTS, BUCKETS);
        for (family, key) in families() {
            let what = format!("{family}, seed {seed:#x}");
            let mut buckets = vec![0u64; BUCKETS];
            let mut homes = vec![0u64; BUCKETS * SLOTS];
            let mut seconds = vec![0u64; BUCKETS];
            let mut fingerprints = std::collections::HashSet::new();
            let mut home_bits = [0u64; 4];
            for i in 0..N {
                let (sig, b1, b2) = s.candidates(s.hash(&key(i)));
                buckets[b1] += 1;
                homes[Shard::home(b1, sig)] += 1;
                seconds[b2] += 1;
                assert!(
                    fingerprints.insert((b1, sig)),
                    "{what}: key {i} repeats a fingerprint"
                );
                for (bit, n) in home_bits.iter_mut().enumerate() {
                    *n += u64::from(sig >> (bit + 1) & 1);
                }
            }
            assert_uniform(&format!("{what}: buckets"), &buckets);
            assert_uniform(&format!("{what}: home slots"), &homes);
            assert_uniform(&format!("{what}: second buckets"), &seconds);
            // The bits picking the home slot: half set, within 5 sigma.
            for n in home_bits {
                let off = (n as f64 - N as f64 / 2.0).abs();
                assert!(
                    off < 5.0 * (N as f64 / 4.0).sqrt(),
                    "{what}: home bit set {n} times"
                );
            }
        }
    }
}

/// Hash flooding: keys an attacker found to share one bucket (here by
/// trying a family's keys against a shard whose seed is known: its
/// fullest bucket) share nothing under another seed, which is what every
/// production shard has (random, per worker): they land in about as many
/// buckets as there are keys.
#[test]
fn keys_aimed_at_one_bucket_spread_under_another_seed() {
    let known = Shard::with_capacity_and_seed(CAPACITY, 1);
    let other = Shard::with_capacity_and_seed(CAPACITY, 2);
    for (family, key) in families() {
        let mut by_bucket = vec![Vec::new(); BUCKETS];
        for i in 0..N {
            let k = key(i);
            by_bucket[known.sig_and_bucket(known.hash(&k)).1].push(k);
        }
        let aimed = by_bucket.iter().max_by_key(|keys| keys.len()).unwrap();
        assert!(
            aimed.len() >= 20,
            "{family}: fullest bucket {}",
            aimed.len()
        );
        let mut spread: Vec<usize> = aimed
            .iter()
            .map(|k| other.sig_and_bucket(other.hash(k)).1)
            .collect();
        spread.sort_unstable();
        spread.dedup();
        // Some 25 random keys in 4,096 buckets: a shared bucket is rare.
        assert!(
            spread.len() + 3 >= aimed.len(),
            "{family}: {} keys in {} buckets",
            aimed.len(),
            spread.len()
        );
    }
}
