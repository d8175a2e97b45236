//! Prometheus exposition (AP-5).
//!
//! Workers only bump their own single-writer counters; summing across
//! workers happens here, at scrape time, in a custom [`Collector`]. The
//! families are rebuilt on every scrape from fresh metric objects rather
//! than kept in a registry and updated, so a scrape never writes anything a
//! worker reads and two concurrent scrapes cannot interfere.

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Encoder as _, IntCounter, IntCounterVec, IntGauge, Opts, TextEncoder};
use sluice_core::snapshot::SnapshotCell;
use sluice_core::stats::{WorkerStats, MAX_PORTS};
use sluice_core::DropReason;

/// What the metrics endpoint reads.
pub struct MetricsSources {
    /// One block per worker, in worker order.
    pub workers: Vec<Arc<CachePadded<WorkerStats>>>,
    /// The current snapshot names the backends (service, address).
    pub snapshot: Arc<SnapshotCell>,
    /// Label for port index i.
    pub port_names: Vec<String>,
    /// The control thread's view (health, policy, reloads); None in tests
    /// that only look at worker counters.
    pub control: Option<Arc<crate::control::Shared>>,
    /// Per port index: the DPDK port, for its link and hardware counters
    /// (empty: none exported). Holds the ports open.
    pub ports: Vec<dataplane::dpdk::PortMonitor>,
    /// Per port index: the kernel's socket drops of a `net_af_packet`
    /// port (None: another driver).
    pub kernel_drops: Vec<Option<dataplane::dpdk::af_packet::KernelDrops>>,
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    // Names and labels are compile-time constants checked by the tests.
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

/// One unlabelled counter family with value `v`.
fn counter(name: &str, help: &str, v: u64) -> Vec<MetricFamily> {
    // Names are compile-time constants checked by the tests.
    let c = IntCounter::new(name, help).expect("valid metric definition");
    c.inc_by(v);
    c.collect()
}

/// One unlabelled gauge family with value `v`.
fn gauge(name: &str, help: &str, v: u64) -> Vec<MetricFamily> {
    let g = IntGauge::new(name, help).expect("valid metric definition");
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    g.collect()
}

fn sum(src: &MetricsSources, f: impl Fn(&WorkerStats) -> u64) -> u64 {
    src.workers
        .iter()
        .map(|w| f(w))
        .fold(0u64, u64::wrapping_add)
}

/// The current metric families, summed over every worker.
pub fn families(src: &MetricsSources) -> Vec<MetricFamily> {
    let mut out = Vec::new();

    type PortField = fn(&sluice_core::stats::PortCounters) -> u64;
    let port_metrics: [(&str, &str, PortField); 7] = [
        (
            "sluice_port_rx_packets_total",
            "Packets received on a dataplane port.",
            |p| p.rx_packets.get(),
        ),
        (
            "sluice_port_rx_bytes_total",
            "Bytes received on a dataplane port.",
            |p| p.rx_bytes.get(),
        ),
        (
            "sluice_port_tx_packets_total",
            "Frames sent on a dataplane port; each IP fragment counts (see sluice_fragments_created_total).",
            |p| p.tx_packets.get(),
        ),
        (
            "sluice_port_tx_bytes_total",
            "Bytes sent on a dataplane port.",
            |p| p.tx_bytes.get(),
        ),
        (
            "sluice_port_punted_packets_total",
            "Packets received on a port for the appliance itself and handed to its TAP \
             (AP-4). Per port, RX = TX + punted + drops.",
            |p| p.punted.get(),
        ),
        (
            "sluice_port_injected_packets_total",
            "Packets the kernel sent on a port's TAP and the port transmitted (AP-4); \
             not in tx_packets.",
            |p| p.injected.get(),
        ),
        (
            "sluice_port_inject_failed_packets_total",
            "Packets the kernel sent on a port's TAP that the port's TX queue refused.",
            |p| p.inject_failed.get(),
        ),
    ];
    for (name, help, field) in port_metrics {
        let v = counter_vec(name, help, &["port"]);
        for (i, port) in src.port_names.iter().enumerate().take(MAX_PORTS) {
            v.with_label_values(&[port.as_str()])
                .inc_by(sum(src, |w| field(&w.ports[i])));
        }
        out.extend(v.collect());
    }

    let drops = counter_vec(
        "sluice_dropped_packets_total",
        "Packets dropped, by reason (every reason listed, zeros included).",
        &["reason"],
    );
    for &reason in DropReason::ALL {
        drops
            .with_label_values(&[reason.name()])
            .inc_by(sum(src, |w| w.drops[reason.index()].get()));
    }
    out.extend(drops.collect());

    out.extend(counter(
        "sluice_punted_packets_total",
        "Packets handed to the host exception path (AP-4), all ports.",
        sum(src, |w| w.ports.iter().map(|p| p.punted.get()).sum()),
    ));

    out.extend(counter(
        "sluice_icmp_replies_total",
        "ICMP fragmentation-needed / ICMPv6 packet-too-big answers sent to clients \
         (AP-3). The answer replaces the packet it answers, so it counts in TX.",
        sum(src, |w| w.icmp_replies.get()),
    ));

    let steered = counter_vec(
        "sluice_steered_packets_total",
        "Tracked packets moved between workers so that one worker's shard sees every \
         packet of a tracking key (ports without RSS on addresses only).",
        &["direction"],
    );
    steered
        .with_label_values(&["out"])
        .inc_by(sum(src, |w| w.steered_out.get()));
    steered
        .with_label_values(&["in"])
        .inc_by(sum(src, |w| w.steered_in.get()));
    out.extend(steered.collect());
    out.extend(counter(
        "sluice_steering_backpressure_total",
        "RX polls a worker skipped because a peer's steering ring was full: the \
         packets waited in the port's RX queue instead of being dropped between \
         workers. Rising steadily: the owning workers cannot keep up (watch \
         sluice_port_hw_total{counter=\"imissed\"} and sluice_port_kernel_drops_total).",
        sum(src, |w| w.steering_backpressure.get()),
    ));

    // AP-3: oversize IPv4 without DF leaves as fragments. With these two,
    // RX = TX + punted + drops - (fragments created - packets fragmented).
    type WorkerField = fn(&WorkerStats) -> u64;
    let fragment_counters: [(&str, &str, WorkerField); 2] = [
        (
            "sluice_fragmented_packets_total",
            "Received packets sent on as IP fragments (oversize IPv4 without DF, AP-3).",
            |w| w.fragmented.get(),
        ),
        (
            "sluice_fragments_created_total",
            "Fragments made of them, each then counted in sluice_port_tx_packets_total or as a tx_queue_full drop.",
            |w| w.fragments.get(),
        ),
    ];
    for (name, help, field) in fragment_counters {
        out.extend(counter(name, help, sum(src, field)));
    }

    let snap = src.snapshot.load();
    let per_backend = counter_vec(
        "sluice_backend_packets_total",
        "Packets forwarded to a backend of the current configuration.",
        &["service", "backend"],
    );
    let next_hop = prometheus::IntGaugeVec::new(
        Opts::new(
            "sluice_backend_next_hop_resolved",
            "1 when the backend's next-hop MAC is known (static `mac`, or resolved \
             through the kernel, AP-4); 0 while its packets are dropped as \
             next_hop_unresolved.",
        ),
        &["service", "backend"],
    )
    .expect("valid metric definition");
    for svc in &snap.services {
        for &id in &svc.backends {
            let Some(b) = snap.backend(id) else { continue };
            let n = sum(src, |w| w.backend_packets.get(id.index()));
            let labels = [svc.name.as_str(), &b.address.to_string()];
            per_backend.with_label_values(&labels).inc_by(n);
            next_hop
                .with_label_values(&labels)
                .set(i64::from(b.egress.next_hop_mac.is_some()));
        }
    }
    out.extend(per_backend.collect());
    out.extend(next_hop.collect());
    out.extend(counter(
        "sluice_backend_packets_uncounted_total",
        "Packets forwarded to a backend whose per-backend counter did not exist \
         (should stay 0: the control plane sizes the counters before it publishes).",
        sum(src, |w| w.backend_packets.uncounted.get()),
    ));

    out.extend(gauge(
        "sluice_snapshot_generation",
        "Generation of the currently published forwarding snapshot.",
        snap.generation,
    ));

    out.extend(conntrack_families(src));

    if let Some(c) = &src.control {
        out.extend(crate::metrics_control::families(&c.view(), snap.generation));
    }
    out.extend(crate::metrics_control::port_hw_families(
        &src.ports,
        &src.port_names,
    ));

    let kernel = counter_vec(
        "sluice_port_kernel_drops_total",
        "Frames the kernel dropped because a net_af_packet port's socket ring \
         (framecnt) was full: receive loss DPDK 22.11's af_packet driver does not \
         report in imissed (PACKET_STATISTICS tp_drops, summed over the port's sockets).",
        &["port"],
    );
    let mut any = false;
    for (port, drops) in src.port_names.iter().zip(&src.kernel_drops) {
        if let Some(d) = drops {
            kernel.with_label_values(&[port.as_str()]).inc_by(d.total());
            any = true;
        }
    }
    if any {
        // An empty family fails the whole scrape.
        out.extend(kernel.collect());
    }

    out.extend(gauge(
        "sluice_workers",
        "Number of packet worker threads.",
        src.workers.len() as u64,
    ));
    out
}

/// Conntrack (SPEC §3): live entries and capacity per worker (gauges), and
/// the event counters summed over workers.
fn conntrack_families(src: &MetricsSources) -> Vec<MetricFamily> {
    use sluice_core::stats::ConntrackStats;
    let mut out = Vec::new();
    type Field = fn(&ConntrackStats) -> u64;
    let gauges: [(&str, &str, Field); 3] = [
        (
            "sluice_conntrack_entries",
            "Occupied conntrack slots per worker (expired ones not yet swept included).",
            |c| c.entries.get(),
        ),
        (
            "sluice_conntrack_capacity",
            "Connections each worker's conntrack shard is sized to hold (conntrack_capacity).",
            |c| c.capacity.get(),
        ),
        (
            "sluice_conntrack_slots",
            "Conntrack slots reserved per worker (1.25 x capacity rounded up to a power of two; 68 bytes each).",
            |c| c.slots.get(),
        ),
    ];
    for (name, help, field) in gauges {
        // Names and labels are compile-time constants.
        let v = prometheus::IntGaugeVec::new(Opts::new(name, help), &["worker"])
            .expect("valid metric definition");
        for (i, w) in src.workers.iter().enumerate() {
            v.with_label_values(&[i.to_string().as_str()])
                .set(i64::try_from(field(&w.conntrack)).unwrap_or(i64::MAX));
        }
        out.extend(v.collect());
    }
    let counters: [(&str, &str, Field); 7] = [
        (
            "sluice_conntrack_inserts_total",
            "Conntrack entries created.",
            |c| c.inserts.get(),
        ),
        (
            "sluice_conntrack_hits_total",
            "Tracked packets that found a live entry.",
            |c| c.hits.get(),
        ),
        (
            "sluice_conntrack_misses_total",
            "Tracked packets that found no live entry (new or expired flows).",
            |c| c.misses.get(),
        ),
        (
            "sluice_conntrack_expirations_total",
            "Entries reclaimed after the idle timeout (CT-5).",
            |c| c.expirations.get(),
        ),
        (
            "sluice_conntrack_insert_failed_total",
            "New flows not recorded because their slots were all live and none half-open (table full); forwarded by Maglev.",
            |c| c.insert_failed.get(),
        ),
        (
            "sluice_conntrack_half_open_evictions_total",
            "Half-open (SYN-only) entries replaced by a new flow in a full part of the table.",
            |c| c.half_open_evicted.get(),
        ),
        (
            "sluice_conntrack_reselected_unhealthy_total",
            "Tracked packets moved off an unhealthy backend (CT-8).",
            |c| c.reselected_unhealthy.get(),
        ),
    ];
    for (name, help, field) in counters {
        out.extend(counter(name, help, sum(src, |w| field(&w.conntrack))));
    }
    out
}

/// Prometheus text exposition of [`families`].
pub fn render(src: &MetricsSources) -> String {
    let mut buf = Vec::new();
    // Encoding only fails on families the encoder cannot represent, which
    // `families` never builds.
    let _ = TextEncoder::new().encode(&families(src), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// A [`Collector`] for registering the sluice metrics in a registry
/// alongside others.
pub struct SluiceCollector {
    src: Arc<MetricsSources>,
    descs: Vec<Desc>,
}

impl SluiceCollector {
    pub fn new(src: Arc<MetricsSources>) -> Self {
        let descs = families(&src)
            .iter()
            .filter_map(|f| {
                let labels = f
                    .get_metric()
                    .first()
                    .map(|m| m.get_label().iter().map(|l| l.name().to_string()).collect())
                    .unwrap_or_default();
                Desc::new(
                    f.name().to_string(),
                    f.help().to_string(),
                    labels,
                    Default::default(),
                )
                .ok()
            })
            .collect();
        Self { src, descs }
    }
}

impl Collector for SluiceCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        families(&self.src)
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::snapshot::{
        BackendId, BackendState, ForwardingState, ServiceId, ServiceState,
    };

    use super::*;

    /// The backend's index is above 65,535 and its generation is not 0:
    /// counters follow the indexes in use, with no fixed ceiling.
    const WEB: BackendId = BackendId::new(70_000, 5);

    fn sources() -> MetricsSources {
        let w0 = Arc::new(WorkerStats::new());
        let w1 = Arc::new(WorkerStats::new());
        for w in [&w0, &w1] {
            w.backend_packets.cover(WEB.index() + 1);
        }
        w0.ports[0].rx_packets.add(10);
        w1.ports[0].rx_packets.add(5);
        w0.ports[1].tx_bytes.add(1000);
        w1.ports[1].tx_bytes.add(24);
        w0.drops[DropReason::NoRule.index()].add(2);
        w1.drops[DropReason::NoRule.index()].add(3);
        w1.ports[0].punted.add(7);
        w0.fragmented.add(2);
        w1.fragmented.add(1);
        w0.fragments.add(5);
        w1.fragments.add(2);
        w0.backend(WEB, 4);
        w1.backend(WEB, 6);
        let state = ForwardingState {
            generation: 42,
            services: vec![ServiceState {
                name: "web".into(),
                encapsulation: sluice_core::snapshot::Encapsulation::L2,
                affinity: Default::default(),
                tracking: Default::default(),
                draining_timeout_ms: 0,
                drain_on_failover: true,
                pool_epoch: 0,
                tables: vec![],
                backends: vec![WEB],
            }],
            backends: (0..=WEB.index())
                .map(|i| {
                    (i == WEB.index()).then(|| BackendState {
                        id: WEB,
                        service: ServiceId(0),
                        address: "192.0.2.10".parse().unwrap(),
                        healthy: true,
                        weight: 1,
                        pool: Default::default(),
                        draining_until: None,
                        egress: Default::default(),
                    })
                })
                .collect(),
            ..Default::default()
        };
        MetricsSources {
            workers: vec![w0, w1],
            snapshot: Arc::new(SnapshotCell::new(state)),
            port_names: vec!["uplink".into(), "downlink".into()],
            control: None,
            ports: vec![],
            kernel_drops: vec![],
        }
    }

    #[test]
    fn render_sums_two_workers() {
        let text = render(&sources());
        for line in [
            "sluice_port_rx_packets_total{port=\"uplink\"} 15",
            "sluice_port_rx_packets_total{port=\"downlink\"} 0",
            "sluice_port_tx_bytes_total{port=\"downlink\"} 1024",
            "sluice_dropped_packets_total{reason=\"no_rule\"} 5",
            "sluice_dropped_packets_total{reason=\"shutdown\"} 0",
            "sluice_punted_packets_total 7",
            "sluice_fragmented_packets_total 3",
            "sluice_fragments_created_total 7",
            "sluice_backend_packets_total{backend=\"192.0.2.10\",service=\"web\"} 10",
            "sluice_backend_packets_uncounted_total 0",
            "sluice_snapshot_generation 42",
            "sluice_workers 2",
            "sluice_conntrack_entries{worker=\"1\"} 0",
            "sluice_conntrack_slots{worker=\"1\"} 0",
            "sluice_conntrack_insert_failed_total 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        let reasons = text
            .lines()
            .filter(|l| l.starts_with("sluice_dropped_packets_total{"))
            .count();
        assert_eq!(reasons, DropReason::COUNT, "every reason, zeros included");
    }

    #[test]
    fn collector_describes_what_it_collects() {
        let c = SluiceCollector::new(Arc::new(sources()));
        let described = c.descs.len();
        let r = prometheus::Registry::new();
        r.register(Box::new(c)).unwrap();
        // What `families` yields for these sources (per-backend families
        // need a snapshot with backends; these have none).
        assert_eq!(r.gather().len(), 29);
        assert_eq!(described, 29, "every collected family is described");
    }
}
