//! Fleet identity (AP-6, MG-2): digests that two appliances behind the
//! same VIPs compare to see they agree bit for bit, and what each
//! announces. `sluice status` and `/metrics` show them.
//!
//! - The *configuration digest* covers what decides where a packet goes:
//!   zones, health checks, services with their backends, forwarding rules
//!   and the flow hash key and QUIC-LB keys (their hashes, never a key). It leaves out what is
//!   each appliance's own: `[dataplane]` ports, addresses and sizes,
//!   `[metrics]`, `[bgp]` (router id, peers). Its encoding is the
//!   validated model's `Debug` text (each service and rule hashed on its
//!   own, so a reload hashes again only the items it changed), so it
//!   compares appliances running the same sluice version.
//! - A service's *table digest* covers its Maglev tables slot by slot, each
//!   slot as the owning backend's address (ids are per process: they
//!   depend on the order backends came and went), each zone variant named.
//!
//! Both are 128 bits from the pinned stable hash (`sluice_core::hash`,
//! two seeds), never `ahash` or std's `RandomState`, which differ per
//! process. Table digests are computed on the reading thread (status,
//! scrape) and kept while the service's tables are the same `Arc`s, so
//! a scrape hashes only tables built since the last one.

pub mod announced;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use sluice_core::hash::stable_hash_bytes;
use sluice_core::maglev_table::MaglevTable;
use sluice_core::service::ServiceState;
use sluice_core::snapshot::ForwardingState;

use crate::config::Config;

/// Shared by the control thread, the announcer, status and metrics.
#[derive(Debug, Default)]
pub struct Fleet {
    pub announce: announced::Status,
    tables: Mutex<HashMap<String, TableDigest>>,
    config: Mutex<Option<(Weak<Config>, Digest)>>,
    /// Only the thread computing a configuration digest holds it.
    config_items: Mutex<ItemDigests>,
}

/// 128 bits, shown as 32 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(pub [u64; 2]);

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}{:016x}", self.0[0], self.0[1])
    }
}

const SEEDS: [u64; 2] = [0x736c_7569_6365_6631, 0x666c_6565_7464_6732];

/// A streaming digest: input in chunks, each chunk hashed with the
/// previous state as its seed, on two lanes.
struct Hasher {
    lanes: [u64; 2],
    buf: Vec<u8>,
}

impl std::fmt::Write for Hasher {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.write(s.as_bytes());
        Ok(())
    }
}

impl Hasher {
    const CHUNK: usize = 64 * 1024;

    fn new(domain: &str) -> Self {
        let mut h = Self {
            lanes: SEEDS,
            buf: Vec::with_capacity(Self::CHUNK),
        };
        h.write(domain.as_bytes());
        h.write(&[0]);
        h
    }

    fn write(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (Self::CHUNK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.buf.len() == Self::CHUNK {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        for lane in &mut self.lanes {
            *lane = stable_hash_bytes(*lane, &self.buf);
        }
        self.buf.clear();
    }

    fn finish(mut self) -> Digest {
        self.flush();
        Digest(self.lanes)
    }
}

/// The digest of the fleet-wide part of `cfg` (see the module doc).
pub fn config_digest(cfg: &Config) -> Digest {
    config_digest_with(cfg, &mut ItemDigests::default())
}

/// [`config_digest`], taking the digests of services and rules that are
/// the same items (`Arc`) as those `cache` holds and leaving in it this
/// configuration's: a reload that keeps 100,000 rules formats only the
/// items it changed.
fn config_digest_with(cfg: &Config, cache: &mut ItemDigests) -> Digest {
    let mut h = Hasher::new("sluice fleet configuration 2");
    let key = cfg.dataplane.flow_hash_key.as_ref().map(|k| {
        [
            stable_hash_bytes(SEEDS[0], &k.0),
            stable_hash_bytes(SEEDS[1], &k.0),
        ]
    });
    // Formatted straight into the hasher: the digest is of the same text,
    // without holding it.
    let _ = write!(
        h,
        "{:?}\n{:?}\nflow key {key:?}\n{} services {} rules\n",
        cfg.zones,
        cfg.health_checks,
        cfg.backend_services.len(),
        cfg.forwarding_rules.len()
    );
    for d in cache.services.digests(&cfg.backend_services) {
        h.write(&digest_bytes(d));
    }
    for d in cache.rules.digests(&cfg.forwarding_rules) {
        h.write(&digest_bytes(d));
    }
    h.finish()
}

fn digest_bytes(d: Digest) -> [u8; 16] {
    let mut b = [0; 16];
    b[..8].copy_from_slice(&d.0[0].to_le_bytes());
    b[8..].copy_from_slice(&d.0[1].to_le_bytes());
    b
}

/// The digests of the last configuration's services and rules, each
/// with its item.
#[derive(Debug, Default)]
struct ItemDigests {
    services: Items<crate::config::BackendServiceConfig>,
    rules: Items<crate::config::ForwardingRuleConfig>,
}

/// Items and their digests, in configuration order.
#[derive(Debug)]
struct Items<T> {
    /// A `Weak` keeps its allocation: a live item at the same address is
    /// the same item.
    last: Vec<(Weak<T>, Digest)>,
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Self { last: Vec::new() }
    }
}

/// An item's text for its digest: its `Debug` (which shows no secret),
/// then the hashes of the secrets that decide where packets go.
trait ItemText: std::fmt::Debug {
    fn write_secrets(&self, _h: &mut Hasher) {}
}

impl ItemText for crate::config::ForwardingRuleConfig {}

impl ItemText for crate::config::BackendServiceConfig {
    /// Each QUIC-LB key, as the flow hash key: appliances with different
    /// keys decode different server IDs.
    fn write_secrets(&self, h: &mut Hasher) {
        for q in &self.quic_lb {
            if let Some(k) = &q.key {
                let hashed = [
                    stable_hash_bytes(SEEDS[0], &k.0),
                    stable_hash_bytes(SEEDS[1], &k.0),
                ];
                let _ = write!(h, "\nquic_lb {} key {hashed:?}", q.lengths.config_id);
            }
        }
    }
}

impl<T: ItemText> Items<T> {
    /// Each item's digest, in order; the cache then holds `items`'. Items
    /// mostly keep their positions: each is looked for at its own first,
    /// then (one map, built on the first miss) anywhere.
    fn digests(&mut self, items: &[Arc<T>]) -> Vec<Digest> {
        let last = std::mem::take(&mut self.last);
        let mut by_address: Option<HashMap<*const T, Digest>> = None;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let here = Arc::as_ptr(item);
            let found = match last.get(i) {
                Some((w, d)) if std::ptr::eq(w.as_ptr(), here) => Some(*d),
                _ => by_address
                    .get_or_insert_with(|| last.iter().map(|(w, d)| (w.as_ptr(), *d)).collect())
                    .get(&here)
                    .copied(),
            };
            let d = found.unwrap_or_else(|| {
                let mut h = Hasher::new("sluice fleet item 1");
                let _ = write!(h, "{item:?}");
                item.write_secrets(&mut h);
                h.finish()
            });
            self.last.push((Arc::downgrade(item), d));
            out.push(d);
        }
        out
    }
}

/// The digest of `svc`'s tables in `snap` (see the module doc).
pub fn table_digest(snap: &ForwardingState, svc: &ServiceState) -> Digest {
    let mut h = Hasher::new("sluice maglev tables 1");
    h.write(svc.name.as_bytes());
    h.write(&[0]);
    for (i, table) in svc.tables.iter().enumerate() {
        let zone = match i {
            0 => "-",
            z => snap.zones.zones.get(z - 1).map_or("?", |z| z.name.as_str()),
        };
        h.write(zone.as_bytes());
        h.write(&[0]);
        h.write(&(table.slots.len() as u64).to_le_bytes());
        // The snapshot's backends are indexed by id: a slot's address is
        // one array access away (a table has up to 655,373 slots).
        for &id in table.slots.iter() {
            h.write(&address_bytes(snap, id));
        }
    }
    h.finish()
}

/// A backend's address as 16 bytes (IPv4 mapped); zeros for an id the
/// snapshot does not hold.
fn address_bytes(snap: &ForwardingState, id: sluice_core::ids::BackendId) -> [u8; 16] {
    snap.backend(id).map_or([0; 16], |b| match b.address {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    })
}

/// A table digest and the tables it was computed from.
#[derive(Debug)]
struct TableDigest {
    tables: Vec<Weak<MaglevTable>>,
    digest: Digest,
}

impl Fleet {
    /// `svc`'s table digest, computed again only when its tables changed
    /// (outside the cache's lock: a reader asking for another service's
    /// digest meanwhile is not held up).
    pub fn table_digest(&self, snap: &ForwardingState, svc: &ServiceState) -> Digest {
        if let Some(d) = self.cached_table_digest(svc) {
            return d;
        }
        let digest = table_digest(snap, svc);
        let mut cache = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(
            svc.name.clone(),
            TableDigest {
                tables: svc.tables.iter().map(Arc::downgrade).collect(),
                digest,
            },
        );
        // Services gone since the entries were made: swept only once the
        // cache holds more entries than the snapshot has services, so the
        // sweep's O(S) is paid once per S insertions, never per miss.
        if cache.len() > snap.services.len() {
            let live: std::collections::HashSet<&str> =
                snap.services.iter().map(|s| s.name.as_str()).collect();
            cache.retain(|name, _| live.contains(name.as_str()));
        }
        digest
    }

    /// `svc`'s table digest if it is computed for its current tables
    /// (the control thread computes them right after each publish).
    pub fn cached_table_digest(&self, svc: &ServiceState) -> Option<Digest> {
        let cache = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        // A `Weak` keeps its allocation: a live table at the same address
        // is the same table.
        let d = cache.get(&svc.name)?;
        let same = d.tables.len() == svc.tables.len()
            && d.tables
                .iter()
                .zip(&svc.tables)
                .all(|(w, t)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(t)));
        same.then_some(d.digest)
    }

    /// The configuration digest of `cfg`, computed once per configuration.
    pub fn config_digest(&self, cfg: &Arc<Config>) -> Digest {
        let mut cache = self.config.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((w, d)) = cache.as_ref() {
            if std::ptr::eq(w.as_ptr(), Arc::as_ptr(cfg)) {
                return *d;
            }
        }
        let mut items = self.config_items.lock().unwrap_or_else(|p| p.into_inner());
        let d = config_digest_with(cfg, &mut items);
        *cache = Some((Arc::downgrade(cfg), d));
        d
    }

    /// The lines `sluice status` ends with: the digests (of `config`,
    /// the running configuration, and of `snap`'s tables), then each
    /// VIP's announcement when `[bgp]` is configured.
    pub fn write_status(
        &self,
        out: &mut String,
        snap: &ForwardingState,
        config: Option<&Arc<Config>>,
    ) {
        if let Some(cfg) = config {
            let _ = writeln!(out, "config digest {}", self.config_digest(cfg));
        }
        // Digests of tables published a moment ago may still be computing on
        // the control thread: a status never waits for them.
        for svc in &snap.services {
            match self.cached_table_digest(svc) {
                Some(d) => writeln!(out, "service {} table digest {d}", svc.name),
                None => writeln!(out, "service {} table digest pending", svc.name),
            }
            .unwrap_or(());
        }
        for v in self.announce.vips().into_iter().flatten() {
            if v.announced {
                let _ = writeln!(out, "vip {} announced", v.vip);
            } else {
                let _ = writeln!(out, "vip {} withdrawn: {}", v.vip, v.reason);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::{build_forwarding_state, BackendIds};

    const CFG: &str = r#"
[dataplane]
[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"

[[backend_service]]
name = "web"
maglev_table_size = 251
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
  { address = "192.0.2.12", mac = "02:00:00:00:00:12" },
]

[[forwarding_rule]]
name = "web"
vip = "203.0.113.10"
backend_service = "web"
"#;

    fn cfg(text: &str) -> Config {
        crate::config::load_str(text, "t.toml").unwrap_or_else(|d| panic!("{d}"))
    }

    /// AP-6: the digest of items kept from an earlier configuration is
    /// the digest a fresh computation gives, through a changed item, items
    /// that moved, one removed and one added; and a changed item changes it.
    #[test]
    fn ap_6_config_digest_of_kept_items_is_the_fresh_one() {
        let two = CFG.to_string()
            + "[[backend_service]]\nname = \"api\"\nbackend = [{ address = \"192.0.2.20\", mac = \"02:00:00:00:00:20\" }]\n\
               [[forwarding_rule]]\nname = \"api\"\nvip = \"203.0.113.11\"\nbackend_service = \"api\"\n";
        let fleet = Fleet::default();
        let a = Arc::new(cfg(&two));
        let da = fleet.config_digest(&a);
        assert_eq!(da, config_digest(&a));
        // One service changed, the other items shared with `a`.
        let mut b = (*a).clone();
        Arc::make_mut(&mut b.backend_services[1]).backends[0].weight = 3;
        let b = Arc::new(b);
        let db = fleet.config_digest(&b);
        assert_ne!(db, da, "a changed item changes the digest");
        assert_eq!(db, config_digest(&b));
        // The services swapped (each kept, at the other's position).
        let mut c = (*b).clone();
        c.backend_services.swap(0, 1);
        let c = Arc::new(c);
        assert_eq!(fleet.config_digest(&c), config_digest(&c));
        assert_ne!(config_digest(&c), db);
        // A rule removed, then one added.
        let mut d = (*c).clone();
        d.forwarding_rules.remove(0);
        let d = Arc::new(d);
        assert_eq!(fleet.config_digest(&d), config_digest(&d));
        let mut e = (*d).clone();
        e.forwarding_rules.push(Arc::clone(&a.forwarding_rules[0]));
        let e = Arc::new(e);
        assert_eq!(fleet.config_digest(&e), config_digest(&e));
        assert_ne!(config_digest(&e), config_digest(&d));
    }

    /// MG-2, AP-6: two appliances whose backend ids differ (another
    /// history of reloads) agree on the table digest; a different table
    /// does not. The value is pinned: it must not change between builds.
    #[test]
    fn mg_2_table_digests_follow_addresses_not_ids() {
        let c = cfg(CFG);
        let a = build_forwarding_state(&c, &[[2, 0, 0, 0, 0, 1]], &mut BackendIds::new(), 1);
        // Another appliance saw another service first: other indexes.
        let other = cfg(&CFG
            .replace("name = \"web\"\nmaglev", "name = \"aaa\"\nmaglev")
            .replace("backend_service = \"web\"", "backend_service = \"aaa\""));
        let mut ids = BackendIds::new();
        let _ = build_forwarding_state(&other, &[[2, 0, 0, 0, 0, 1]], &mut ids, 1);
        let with_more = cfg(&format!(
            "{}\n[[backend_service]]\nname = \"zzz\"\nbackend = [ {{ address = \"192.0.2.99\", mac = \"02:00:00:00:00:99\" }} ]\n",
            CFG
        ));
        let b = build_forwarding_state(&with_more, &[[2, 0, 0, 0, 0, 2]], &mut ids, 7);
        let (sa, sb) = (&a.services[0], &b.services[0]);
        assert_ne!(
            sa.tables[0].slots, sb.tables[0].slots,
            "the ids differ between the two appliances"
        );
        assert_eq!(table_digest(&a, sa), table_digest(&b, sb));
        assert_eq!(
            table_digest(&a, sa).to_string(),
            "dfde4f4a89f5d288c65dd1371af79e77",
            "pinned"
        );
        let fewer = cfg(&CFG.replace(
            "  { address = \"192.0.2.12\", mac = \"02:00:00:00:00:12\" },\n",
            "",
        ));
        let f = build_forwarding_state(&fewer, &[[2, 0, 0, 0, 0, 1]], &mut BackendIds::new(), 1);
        assert_ne!(table_digest(&a, sa), table_digest(&f, &f.services[0]));
    }

    /// The configuration digest ignores what is each appliance's own
    /// (ports, metrics, BGP) and follows what forwards packets.
    #[test]
    fn ap_6_config_digest_covers_the_fleet_part_only() {
        let base = config_digest(&cfg(CFG));
        let local = cfg(&CFG.replace("192.0.2.2/24", "192.0.2.3/24").replace(
            "device = \"net_null0\"",
            "device = \"net_null0\"\nmac = \"02:00:00:00:00:02\"",
        ));
        assert_eq!(config_digest(&local), base);
        let weight = cfg(&CFG.replace(
            "mac = \"02:00:00:00:00:12\" }",
            "mac = \"02:00:00:00:00:12\", weight = 2 }",
        ));
        assert_ne!(config_digest(&weight), base);
        let keyed = cfg(&CFG.replace(
            "[dataplane]\n",
            "[dataplane]\nflow_hash_key = \"000102030405060708090a0b0c0d0e0f\"\n",
        ));
        assert_ne!(config_digest(&keyed), base);
    }

    /// Appliances whose QUIC-LB keys differ decode different server IDs:
    /// their digests differ, though no `Debug` text shows a key.
    #[test]
    fn ap_6_config_digest_follows_quic_lb_keys() {
        let text = include_str!("../../../conf/quic-lb.toml");
        let key = "8f95f09245765f80256934e50c66207f";
        assert!(text.contains(key));
        let base = cfg(text);
        assert!(!format!("{base:?}").contains(key));
        let other = cfg(&text.replace(key, "00112233445566778899aabbccddeeff"));
        assert_ne!(config_digest(&other), config_digest(&base));
        assert_eq!(config_digest(&cfg(text)), config_digest(&base));
    }

    /// A digest is kept while the tables are the same `Arc`s.
    #[test]
    fn table_digests_are_kept_per_table() {
        let c = cfg(CFG);
        let snap = build_forwarding_state(&c, &[[2, 0, 0, 0, 0, 1]], &mut BackendIds::new(), 1);
        let fleet = Fleet::default();
        let d = fleet.table_digest(&snap, &snap.services[0]);
        assert_eq!(d, table_digest(&snap, &snap.services[0]));
        let mut changed = snap.clone();
        let mut t = (*changed.services[0].tables[0]).clone();
        let other = t.slots.iter().position(|&id| id != t.slots[0]).unwrap();
        t.slots.swap(0, other);
        changed.services[0].tables[0] = Arc::new(t);
        assert_ne!(fleet.table_digest(&changed, &changed.services[0]), d);
    }

    /// `sluice status` ends with the digests and each VIP's announcement.
    #[test]
    fn status_lines_show_digests_and_announcements() {
        let c = Arc::new(cfg(CFG));
        let snap = build_forwarding_state(&c, &[[2, 0, 0, 0, 0, 1]], &mut BackendIds::new(), 1);
        let fleet = Fleet::default();
        fleet.announce.set(vec![announced::VipStatus {
            vip: "203.0.113.10".parse().unwrap(),
            announced: false,
            servable: true,
            reason: "stopping".into(),
        }]);
        let mut pending = String::new();
        fleet.write_status(&mut pending, &snap, Some(&c));
        assert!(
            pending.contains("service web table digest pending\n"),
            "{pending}"
        );
        // What the control thread does after a publish.
        fleet.table_digest(&snap, &snap.services[0]);
        let mut status = String::new();
        fleet.write_status(&mut status, &snap, Some(&c));
        assert_eq!(
            status,
            format!(
                "config digest {}\nservice web table digest {}\n\
                 vip 203.0.113.10 withdrawn: stopping\n",
                config_digest(&c),
                table_digest(&snap, &snap.services[0])
            )
        );
    }
}
