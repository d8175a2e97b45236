//! The ports' devices: DPDK's counters (`rte_eth_stats`), each port's link,
//! and the kernel's drops of a `net_af_packet` port's socket ring.

use prometheus::proto::MetricFamily;

use super::catalog;
use super::family::Family;
use super::sources::MetricsSources;

/// The device's counters (`rte_eth_stats`), one family per quantity and
/// unit, in the order [`hw_families`] reads them.
pub static DEVICE_COUNTERS: [&Family; 8] = [
    &catalog::PORT_HW_RX_PACKETS,
    &catalog::PORT_HW_TX_PACKETS,
    &catalog::PORT_HW_RX_BYTES,
    &catalog::PORT_HW_TX_BYTES,
    &catalog::PORT_HW_RX_MISSED_PACKETS,
    &catalog::PORT_HW_RX_ERRORS,
    &catalog::PORT_HW_TX_ERRORS,
    &catalog::PORT_HW_RX_NO_MBUF,
];

/// The device counters and links of `src`'s ports, then their kernel
/// drops.
pub fn families(src: &MetricsSources) -> Vec<MetricFamily> {
    let mut out = hw_families(&src.ports, &src.port_names);
    let kernel = catalog::PORT_KERNEL_DROPS.ints();
    let mut any = false;
    for (port, drops) in src.port_names.iter().zip(&src.kernel_drops) {
        if let Some(d) = drops {
            kernel.put(&[port.as_str()], d.total());
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
    let counters = DEVICE_COUNTERS.map(Family::ints);
    let up = catalog::PORT_LINK_UP.ints();
    let speed = catalog::PORT_LINK_SPEED_BYTES.ints();
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
        for (family, v) in counters.iter().zip(values) {
            family.put(&[port.as_str()], v);
        }
        let link = monitor.link();
        up.put(&[port.as_str()], u64::from(link.up));
        let mbps = if link.up {
            link.speed_mbps.unwrap_or(0)
        } else {
            0
        };
        speed.put(&[port.as_str()], u64::from(mbps) * 1_000_000 / 8);
    }
    let mut out: Vec<MetricFamily> = counters.iter().flat_map(|f| f.collect()).collect();
    out.extend(up.collect());
    out.extend(speed.collect());
    out
}
