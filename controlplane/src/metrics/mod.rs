//! Prometheus exposition (AP-5).
//!
//! Workers only bump their own single-writer counters; summing across
//! workers happens here, at scrape time, in a custom [`Collector`]. The
//! families are rebuilt on every scrape from fresh metric objects rather
//! than kept in a registry and updated, so a scrape never writes anything a
//! worker reads and two concurrent scrapes cannot interfere.
//!
//! - this module: the worker counters and the assembly of the fixed
//!   families;
//! - [`control`]: the control thread's families and the ports' devices;
//! - [`process`]: the process itself (build, `/proc/self`, packet pool);
//! - [`exposition`]: `/metrics` as a stream, with the families that grow
//!   with the configuration.

pub mod control;
pub mod exposition;
pub mod process;

use std::sync::Arc;

use crossbeam_utils::CachePadded;
use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{Encoder as _, IntCounter, IntCounterVec, IntGauge, Opts, TextEncoder};
use sluice_core::quic_lb::Fallback;
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::stats::{
    ConntrackStats, Export, Metric, PortCounters, QuicLbStats, WorkerStats, MAX_PORTS,
};
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
    /// The packet pool and its size in mbufs (None: not exported).
    pub pool: Option<(dataplane::dpdk::Mempool, usize)>,
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

/// The metric families whose size does not grow with the configuration,
/// summed over every worker; the per-backend, per-service and per-rule
/// families are written by `crate::metrics::exposition`.
pub fn families(src: &MetricsSources, snap: &ForwardingState) -> Vec<MetricFamily> {
    let mut out = Vec::new();

    let ports = &src.port_names[..src.port_names.len().min(MAX_PORTS)];
    out.extend(block_families(
        src,
        PortCounters::METRICS,
        Some(("port", ports)),
        |w, i| &w.ports[i],
    ));

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
        "Packets handed to the host's kernel through a port's TAP (ARP, ping, \
         BGP, ...), all ports.",
        sum(src, |w| w.ports.iter().map(|p| p.punted.get()).sum()),
    ));

    // Steering, ICMP answers, fragments (AP-3: with these two, RX = TX +
    // punted + drops - (fragments created - packets fragmented)), polls.
    out.extend(block_families(src, WorkerStats::METRICS, None, |w, _| w));

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

    // SPEC §3: occupancy and size per worker, event counts summed.
    out.extend(block_families(
        src,
        ConntrackStats::METRICS,
        None,
        |w, _| &w.conntrack,
    ));

    // QUIC-LB: routed by connection ID, or the ordinary path by reason.
    out.extend(block_families(src, QuicLbStats::METRICS, None, |w, _| {
        &w.quic_lb
    }));
    let fallbacks = counter_vec(
        "sluice_quic_lb_fallback_packets_total",
        "UDP packets of QUIC-LB services balanced the ordinary way (affinity, \
         conntrack, Maglev) instead of by their connection ID, by reason (every \
         reason listed, zeros included).",
        &["reason"],
    );
    for &reason in Fallback::ALL {
        fallbacks
            .with_label_values(&[reason.name()])
            .inc_by(sum(src, |w| w.quic_lb.fallback[reason.index()].get()));
    }
    out.extend(fallbacks.collect());

    if let Some(c) = &src.control {
        let view = c.view();
        out.extend(crate::metrics::control::families(&view, snap.generation));
    }
    out.extend(crate::metrics::control::port_hw_families(
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
    if let Some((pool, size)) = &src.pool {
        out.extend(crate::metrics::process::mbuf_pool(pool.in_use(), *size));
    }
    out.extend(crate::metrics::process::build_info());
    out.extend(crate::metrics::process::process());
    out
}

/// A metric family being filled: the Prometheus type follows the export.
enum Family {
    Counter(IntCounterVec),
    Gauge(prometheus::IntGaugeVec),
}

impl Family {
    fn new(name: &str, help: &str, export: Export, labels: &[&str]) -> Self {
        let opts = Opts::new(name, help);
        // Names and labels are compile-time constants checked by the tests.
        match export {
            Export::Total | Export::WorkerCounter => {
                Family::Counter(IntCounterVec::new(opts, labels).expect("valid metric definition"))
            }
            Export::WorkerGauge => Family::Gauge(
                prometheus::IntGaugeVec::new(opts, labels).expect("valid metric definition"),
            ),
        }
    }

    fn put(&self, labels: &[&str], v: u64) {
        match self {
            Family::Counter(c) => c.with_label_values(labels).inc_by(v),
            Family::Gauge(g) => g
                .with_label_values(labels)
                .set(i64::try_from(v).unwrap_or(i64::MAX)),
        }
    }

    fn collect(&self) -> Vec<MetricFamily> {
        match self {
            Family::Counter(c) => c.collect(),
            Family::Gauge(g) => g.collect(),
        }
    }
}

/// The families of a counter block declared with `counter_block!`
/// (`sluice_core::stats`), in declaration order: fields naming the same
/// metric share a family, told apart by their fixed label. `scope` is the
/// label of the block's instances in one worker and each instance's value
/// (ports: `("port", names)`, instance i read by `block(worker, i)`); None
/// for one instance per worker.
fn block_families<B: 'static>(
    src: &MetricsSources,
    metrics: &'static [Metric<B>],
    scope: Option<(&str, &[String])>,
    block: impl for<'a> Fn(&'a WorkerStats, usize) -> &'a B,
) -> Vec<MetricFamily> {
    let instances: Vec<Option<&str>> = match scope {
        Some((_, values)) => values.iter().map(|v| Some(v.as_str())).collect(),
        None => vec![None],
    };
    let mut families: Vec<(&str, Family)> = Vec::new();
    for m in metrics {
        let i = match families.iter().position(|(name, _)| *name == m.name) {
            Some(i) => i,
            None => {
                let mut labels: Vec<&str> = Vec::new();
                labels.extend(m.label.map(|(name, _)| name));
                labels.extend(scope.map(|(name, _)| name));
                if m.export != Export::Total {
                    labels.push("worker");
                }
                families.push((m.name, Family::new(m.name, &m.help(), m.export, &labels)));
                families.len() - 1
            }
        };
        let family = &families[i].1;
        for (k, instance) in instances.iter().enumerate() {
            let mut labels: Vec<&str> = Vec::new();
            labels.extend(m.label.map(|(_, value)| value));
            labels.extend(*instance);
            if m.export == Export::Total {
                family.put(&labels, sum(src, |w| (m.read)(block(w, k))));
            } else {
                for (wi, w) in src.workers.iter().enumerate() {
                    let worker = wi.to_string();
                    let mut per_worker = labels.clone();
                    per_worker.push(&worker);
                    family.put(&per_worker, (m.read)(block(w, k)));
                }
            }
        }
    }
    families.iter().flat_map(|(_, f)| f.collect()).collect()
}

/// The whole exposition (`crate::metrics::exposition`) as one string.
pub fn render(src: &MetricsSources) -> String {
    crate::metrics::exposition::render(src, None)
}

/// The text format of `families`.
pub fn encode(families: &[MetricFamily]) -> Vec<u8> {
    // The encoder refuses a family without samples (no ports, no kernel
    // drops) and writes nothing after it: such families are left out.
    let some: Vec<MetricFamily> = families
        .iter()
        .filter(|f| !f.get_metric().is_empty())
        .cloned()
        .collect();
    let mut buf = Vec::new();
    // Encoding only fails on an empty family, filtered out above.
    let _ = TextEncoder::new().encode(&some, &mut buf);
    buf
}

#[cfg(test)]
mod tests {
    use sluice_core::backend::BackendState;
    use sluice_core::ids::{BackendId, ServiceId};
    use sluice_core::rules::{ForwardingRule, RuleTable};
    use sluice_core::service::ServiceState;
    use sluice_core::snapshot::ForwardingState;

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
        w0.backend(WEB, 4, 400);
        w1.backend(WEB, 6, 624);
        w0.backend_opened(WEB, 0, 0, true);
        w1.backend_opened(WEB, 0, 0, true);
        w1.backend_opened(WEB, 0, 0, true);
        for w in [&w0, &w0, &w1] {
            w.rule_packets.add(3);
        }
        let state = ForwardingState {
            rules: std::sync::Arc::new(RuleTable::new(vec![ForwardingRule {
                name: "web-http".into(),
                vip: "203.0.113.10".parse().unwrap(),
                protocol: sluice_core::rules::RuleProtocol::Tcp,
                ports: sluice_core::rules::PortRange {
                    first: 80,
                    last: 80,
                },
                service: ServiceId(0),
                counter: 3,
            }])),
            generation: 42,
            services: vec![ServiceState {
                name: "web".into(),
                encapsulation: sluice_core::encap::Encapsulation::L2,
                affinity: Default::default(),
                tracking: Default::default(),
                draining_timeout_ms: 0,
                drain_on_failover: true,
                pool_epoch: 0,
                tables: vec![],
                backends: vec![WEB],
                quic_lb: None,
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
            pool: None,
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
            "sluice_backend_bytes_total{backend=\"192.0.2.10\",service=\"web\"} 1024",
            "sluice_backend_new_connections_total{backend=\"192.0.2.10\",service=\"web\"} 3",
            "sluice_rule_packets_total{rule=\"web-http\"} 3",
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
}
