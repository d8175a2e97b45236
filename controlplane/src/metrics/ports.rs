//! The ports' devices: DPDK's counters (`rte_eth_stats`), each port's link,
//! and the kernel's drops of a `net_af_packet` port's socket ring.

use prometheus::core::Collector as _;
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use super::sources::MetricsSources;

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition")
}

/// The device counters and links of `src`'s ports, then their kernel
/// drops.
pub fn families(src: &MetricsSources) -> Vec<MetricFamily> {
    let mut out = hw_families(&src.ports, &src.port_names);
    let kernel = counter(
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
    out
}

/// The DPDK port counters (`rte_eth_stats`), one family per quantity and
/// unit, and each port's link state and speed (thread-safe reads).
fn hw_families(ports: &[dataplane::dpdk::PortMonitor], names: &[String]) -> Vec<MetricFamily> {
    if ports.is_empty() {
        return Vec::new(); // an empty family fails the whole scrape
    }
    let families = [
        ("sluice_port_hw_rx_packets_total", "Packets the port's device received (rte_eth_stats ipackets)."),
        ("sluice_port_hw_tx_packets_total", "Packets the port's device sent (rte_eth_stats opackets)."),
        ("sluice_port_hw_rx_bytes_total", "Bytes the port's device received (rte_eth_stats ibytes)."),
        ("sluice_port_hw_tx_bytes_total", "Bytes the port's device sent (rte_eth_stats obytes)."),
        ("sluice_port_hw_rx_missed_packets_total", "Packets the device dropped because its receive queues were full (rte_eth_stats imissed)."),
        ("sluice_port_hw_rx_errors_total", "Erroneous packets the device received (rte_eth_stats ierrors)."),
        ("sluice_port_hw_tx_errors_total", "Packets the device failed to send (rte_eth_stats oerrors)."),
        ("sluice_port_hw_rx_no_mbuf_total", "Receive failures for want of a free mbuf in the packet pool (rte_eth_stats rx_nombuf)."),
    ]
    .map(|(name, help)| counter(name, help, &["port"]));
    let up = gauge(
        "sluice_port_link_up",
        "1 while the port's link is up, 0 while it is down.",
        &["port"],
    );
    let speed = gauge(
        "sluice_port_link_speed_bytes",
        "The port's link speed in bytes per second (0: unknown or down).",
        &["port"],
    );
    for (i, monitor) in ports.iter().enumerate() {
        let s = monitor.hw_stats();
        let port = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| monitor.id().to_string());
        let values = [
            s.ipackets,
            s.opackets,
            s.ibytes,
            s.obytes,
            s.imissed,
            s.ierrors,
            s.oerrors,
            s.rx_nombuf,
        ];
        for (family, v) in families.iter().zip(values) {
            family.with_label_values(&[port.as_str()]).inc_by(v);
        }
        let link = monitor.link();
        up.with_label_values(&[port.as_str()])
            .set(i64::from(link.up));
        let mbps = if link.up {
            link.speed_mbps.unwrap_or(0)
        } else {
            0
        };
        speed
            .with_label_values(&[port.as_str()])
            .set(i64::from(mbps) * 1_000_000 / 8);
    }
    let mut out: Vec<MetricFamily> = families.iter().flat_map(|f| f.collect()).collect();
    out.extend(up.collect());
    out.extend(speed.collect());
    out
}
