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

use prometheus::proto::MetricFamily;
use prometheus::{Encoder as _, TextEncoder};
use sluice_core::quic_lb::Fallback;
use sluice_core::snapshot::ForwardingState;
use sluice_core::stats::{
    ConntrackStats, Export, Metric, PortCounters, QuicLbStats, WorkerStats, MAX_PORTS,
};
use sluice_core::DropReason;

use super::catalog;
use super::family::{Ints, Kind};
use super::sources::MetricsSources;

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

    let drops = catalog::DROPPED_PACKETS.ints();
    for &reason in DropReason::ALL {
        drops.put(
            &[reason.name()],
            sum(src, |w| w.drops[reason.index()].get()),
        );
    }
    out.extend(drops.collect());

    out.extend(
        catalog::PUNTED_PACKETS.int(sum(src, |w| w.ports.iter().map(|p| p.punted.get()).sum())),
    );

    // Steering, ICMP answers, fragments (AP-3: with these two, RX = TX +
    // punted + drops - (fragments created - packets fragmented)), polls.
    out.extend(block_families(src, WorkerStats::METRICS, None, |w, _| w));

    out.extend(catalog::SNAPSHOT_GENERATION.int(snap.generation));

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
    let fallbacks = catalog::QUIC_LB_FALLBACK_PACKETS.ints();
    for &reason in Fallback::ALL {
        fallbacks.put(
            &[reason.name()],
            sum(src, |w| w.quic_lb.fallback[reason.index()].get()),
        );
    }
    out.extend(fallbacks.collect());

    if let Some(c) = &src.control {
        let view = c.view();
        out.extend(super::control::families(&view, snap.generation));
    }
    out.extend(super::ports::families(src));

    out.extend(catalog::WORKERS.int(src.workers.len() as u64));
    if let Some((pool, size)) = &src.pool {
        out.extend(super::process::mbuf_pool(pool.in_use(), *size));
    }
    out.extend(super::process::build_info());
    out.extend(super::process::process());
    out
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
    let mut families: Vec<(&str, Ints)> = Vec::new();
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
                let kind = match m.export {
                    Export::Total | Export::WorkerCounter => Kind::Counter,
                    Export::WorkerGauge => Kind::Gauge,
                };
                families.push((m.name, Ints::new(m.name, &m.help(), kind, &labels)));
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
