//! The families whose size does not grow with the configuration, rendered
//! whole at the start of each scrape through the `prometheus` crate's
//! types: the workers' counters, summed over the workers here, then the
//! control thread's ([`super::control`]), the ports' devices
//! ([`super::ports`]) and the process's ([`super::process`]).
//!
//! Workers only bump their own single-writer counters; summing across
//! workers happens here, at scrape time. The families are rebuilt on every
//! scrape from fresh metric objects rather than kept in a registry and
//! updated, so a scrape never writes anything a worker reads and two
//! concurrent scrapes cannot interfere.

use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{Encoder as _, IntCounter, IntCounterVec, IntGauge, Opts, TextEncoder};
use sluice_core::quic_lb::Fallback;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::{
    ConntrackStats, Export, Metric, PortCounters, QuicLbStats, WorkerStats, MAX_PORTS,
};
use sluice_core::DropReason;

use super::sources::MetricsSources;

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
/// families are written by [`super::exposition`].
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
        out.extend(super::control::families(&view, snap.generation));
    }
    out.extend(super::ports::families(src));

    out.extend(gauge(
        "sluice_workers",
        "Number of packet worker threads.",
        src.workers.len() as u64,
    ));
    if let Some((pool, size)) = &src.pool {
        out.extend(super::process::mbuf_pool(pool.in_use(), *size));
    }
    out.extend(super::process::build_info());
    out.extend(super::process::process());
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
