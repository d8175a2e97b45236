//! Every metric family the control plane writes, declared once each: its
//! name, type, labels and help. The writers (`fixed.rs`, `control.rs`,
//! `ports.rs`, `process.rs` and the exposition's sections) take all four
//! from here, and so do the tests that list families. The workers'
//! counters of a counter block are declared with the block
//! (`counter_block!` in `sluice_core::stats`), and written as they are by
//! `fixed.rs`.

use super::family::{Family, Kind};

/// `NAME: Kind "name" [labels] "help";` declares `pub static NAME: Family`
/// and puts it in [`ALL`].
macro_rules! families {
    ($($id:ident: $kind:ident $name:literal [$($label:literal),*] $help:literal;)*) => {
        $(
            #[doc = $help]
            pub static $id: Family = Family {
                name: $name,
                kind: Kind::$kind,
                help: $help,
                labels: &[$($label),*],
            };
        )*

        /// Every family declared here.
        pub static ALL: &[&Family] = &[$(&$id),*];
    };
}

families! {
    // The workers' counters summed by `fixed.rs`, beside those their counter
    // blocks declare (`sluice_core::stats`).
    DROPPED_PACKETS: Counter "sluice_dropped_packets_total" ["reason"]
        "Packets dropped, by reason (every reason listed, zeros included).";
    PUNTED_PACKETS: Counter "sluice_punted_packets_total" []
        "Packets handed to the host's kernel through a port's TAP (ARP, ping, BGP, ...), all \
         ports.";
    SNAPSHOT_GENERATION: Gauge "sluice_snapshot_generation" []
        "Generation of the currently published forwarding snapshot.";
    QUIC_LB_FALLBACK_PACKETS: Counter "sluice_quic_lb_fallback_packets_total" ["reason"]
        "UDP packets of QUIC-LB services balanced the ordinary way (affinity, conntrack, \
         Maglev) instead of by their connection ID, by reason (every reason listed, zeros \
         included).";
    WORKERS: Gauge "sluice_workers" []
        "Number of packet worker threads.";

    // The control thread's, from its view (`control.rs`).
    CONFIG_RELOADS: Counter "sluice_config_reloads_total" ["result"]
        "Configuration reloads (SIGHUP or `sluice reload`) by result: success or failure.";
    CONFIG_LAST_RELOAD_SUCCESSFUL: Gauge "sluice_config_last_reload_successful" []
        "1 when the latest configuration reload applied, 0 when it was refused (the previous \
         configuration keeps running). Absent before the first reload.";
    CONFIG_LAST_RELOAD_TIMESTAMP_SECONDS: Gauge "sluice_config_last_reload_timestamp_seconds" []
        "When the latest configuration reload was tried, in seconds since the Unix epoch.";
    TABLE_GENERATION: Gauge "sluice_table_generation" []
        "Generation of the last snapshot the control thread built.";
    TABLE_BUILD_SECONDS: Gauge "sluice_table_build_seconds" []
        "Duration of the last full snapshot build (all services).";
    HEALTH_EVENT_PUBLISH_SECONDS: Histogram "sluice_health_event_publish_seconds" []
        "Seconds from a health checker's verdict change (a backend turning healthy or \
         unhealthy) to the publication to the workers of the forwarding snapshot that reflects \
         it.";
    HANDOFF_REFUSED: Gauge "sluice_handoff_refused" []
        "1 when this start found a conntrack hand-off file and refused it (corrupt, stale, \
         another configuration file; the log says why), else 0.";
    HANDOFF_CONNECTIONS: Gauge "sluice_handoff_connections" ["outcome"]
        "Connections of the conntrack hand-off file this start took, by outcome: taken, or why \
         not (service_gone, backend_gone, tracking_changed, expired).";
    HANDOFF_GAP_SECONDS: Gauge "sluice_handoff_gap_seconds" []
        "Time from the writing of the conntrack hand-off file this start took to the start \
         taking it.";
    CONFIG_DIGEST_INFO: Gauge "sluice_config_digest_info" ["digest"]
        "Always 1; `digest` identifies the fleet-wide part of the published configuration \
         (services, backends, rules, checks, zones, flow key): appliances behind the same VIPs \
         must show the same.";

    // The ports' devices (`ports.rs`).
    PORT_HW_RX_PACKETS: Counter "sluice_port_hw_rx_packets_total" ["port"]
        "Packets the port's device received (rte_eth_stats ipackets).";
    PORT_HW_TX_PACKETS: Counter "sluice_port_hw_tx_packets_total" ["port"]
        "Packets the port's device sent (rte_eth_stats opackets).";
    PORT_HW_RX_BYTES: Counter "sluice_port_hw_rx_bytes_total" ["port"]
        "Bytes the port's device received (rte_eth_stats ibytes).";
    PORT_HW_TX_BYTES: Counter "sluice_port_hw_tx_bytes_total" ["port"]
        "Bytes the port's device sent (rte_eth_stats obytes).";
    PORT_HW_RX_MISSED_PACKETS: Counter "sluice_port_hw_rx_missed_packets_total" ["port"]
        "Packets the device dropped because its receive queues were full (rte_eth_stats \
         imissed).";
    PORT_HW_RX_ERRORS: Counter "sluice_port_hw_rx_errors_total" ["port"]
        "Erroneous packets the device received (rte_eth_stats ierrors).";
    PORT_HW_TX_ERRORS: Counter "sluice_port_hw_tx_errors_total" ["port"]
        "Packets the device failed to send (rte_eth_stats oerrors).";
    PORT_HW_RX_NO_MBUF: Counter "sluice_port_hw_rx_no_mbuf_total" ["port"]
        "Receive failures for want of a free mbuf in the packet pool (rte_eth_stats rx_nombuf).";
    PORT_LINK_UP: Gauge "sluice_port_link_up" ["port"]
        "1 while the port's link is up, 0 while it is down.";
    PORT_LINK_SPEED_BYTES: Gauge "sluice_port_link_speed_bytes" ["port"]
        "The port's link speed in bytes per second (0: unknown or down).";
    PORT_KERNEL_DROPS: Counter "sluice_port_kernel_drops_total" ["port"]
        "Frames the kernel dropped because a net_af_packet port's socket ring (framecnt) was \
         full: receive loss DPDK 22.11's af_packet driver does not report in imissed \
         (PACKET_STATISTICS tp_drops, summed over the port's sockets).";

    // The process (`process.rs`).
    MBUF_POOL_IN_USE: Gauge "sluice_mbuf_pool_in_use" []
        "Packet buffers (mbufs) out of the pool: in ports' receive rings, bursts, steering and \
         TAP rings, or being sent.";
    MBUF_POOL_SIZE: Gauge "sluice_mbuf_pool_size" []
        "Packet buffers (mbufs) the pool holds in all.";
    BUILD_INFO: Gauge "sluice_build_info" ["version", "revision", "dpdk"]
        "Always 1: the sluice version, the git commit it was built from and the DPDK version it \
         was built against, as labels.";
    PROCESS_CPU_SECONDS: Counter "process_cpu_seconds_total" []
        "CPU time the process used, user and system, in seconds.";
    PROCESS_RESIDENT_MEMORY_BYTES: Gauge "process_resident_memory_bytes" []
        "Resident memory of the process in bytes (hugepages not included).";
    PROCESS_OPEN_FDS: Gauge "process_open_fds" []
        "File descriptors the process has open.";
    PROCESS_START_TIME_SECONDS: Gauge "process_start_time_seconds" []
        "When the process started, in seconds since the Unix epoch.";
    CONTROL_LOOP_LAST_RUN_AGE_SECONDS: Gauge "sluice_control_loop_last_run_age_seconds" []
        "Seconds since the control loop (health events, reloads, table builds) last ran; it \
         runs at least every few hundred milliseconds, and /healthz fails above 10.";

    // Per backend of the running configuration (`exposition/backends.rs`),
    // while it has at most `[metrics] backend_series_limit` backends.
    BACKEND_PACKETS: Counter "sluice_backend_packets_total" ["service", "backend"]
        "Packets forwarded to a backend of the current configuration.";
    BACKEND_BYTES: Counter "sluice_backend_bytes_total" ["service", "backend"]
        "Bytes (whole frames as sent, before any fragmentation) forwarded to a backend of the \
         current configuration.";
    BACKEND_NEW_CONNECTIONS: Counter "sluice_backend_new_connections_total" ["service", "backend"]
        "New connections sent to a backend of the current configuration: conntrack entries \
         created (a SYN, or the first packet of a flow the table did not hold) whose packet was \
         forwarded to it. Tracked traffic only: a backend of a stateless service (or of \
         untracked UDP) stays at 0.";
    BACKEND_NEXT_HOP_RESOLVED: Gauge "sluice_backend_next_hop_resolved" ["service", "backend"]
        "1 when the backend's next-hop MAC is known (static `mac`, or resolved through the \
         kernel from the port's TAP); 0 while its packets are dropped as next_hop_unresolved.";
    BACKEND_HEALTHY: Gauge "sluice_backend_healthy" ["service", "backend"]
        "1 when the backend's health check passes, 0 while it fails.";
    BACKEND_WEIGHT: Gauge "sluice_backend_weight" ["service", "backend"]
        "The backend's weight: the one its health check reported under WEIGHTED_MAGLEV, else 1.";
    BACKEND_CONSECUTIVE_RESULTS: Gauge "sluice_backend_consecutive_results" ["service", "backend", "result"]
        "Consecutive probe results of the current kind (result=\"success\" or \"failure\").";
    BACKEND_HEALTH_TRANSITIONS: Counter "sluice_backend_health_transitions_total" ["service", "backend"]
        "Changes of the backend's health state (healthy to unhealthy and back).";
    BACKEND_WEIGHT_HEADER_INVALID: Counter "sluice_backend_weight_header_invalid_total" ["service", "backend"]
        "Passing HTTP probes of a WEIGHTED_MAGLEV service whose \
         X-Load-Balancing-Endpoint-Weight header was missing or invalid (the backend keeps its \
         last weight).";
    BACKEND_PROBES: Counter "sluice_backend_probes_total" ["service", "backend"]
        "Health probes completed, passed or failed.";
    BACKEND_PROBE_FAILURES: Counter "sluice_backend_probe_failures_total" ["service", "backend", "reason"]
        "Failed probes by reason (timeout, refused, port_unreachable, ...); reasons never seen \
         are not exported.";
    BACKEND_PROBE_LATENCY_SECONDS: Histogram "sluice_backend_probe_latency_seconds" ["service", "backend"]
        "Probe latency (timeouts included).";
    BACKEND_DATA_PATH_HEALTHY: Gauge "sluice_backend_data_path_healthy" ["service", "backend", "vip"]
        "Under a data-path check (path = \"data\"): 1 while the probe through this VIP passes, \
         0 while it fails; the backend is healthy while every VIP's passes.";
    BACKEND_DATA_PATH_FAILURES: Counter "sluice_backend_data_path_failures_total" ["service", "backend", "vip", "reason"]
        "Under a data-path check: failed probes through this VIP by reason (no_answer, \
         answered_from_backend_address, ...); reasons never seen are not exported.";

    // Per service, rule and VIP (`exposition/services.rs`, `rules.rs`,
    // `vips.rs`).
    SERVICE_PACKETS: Counter "sluice_service_packets_total" ["service"]
        "Packets forwarded to the service's current backends (the sum of their \
         sluice_backend_packets_total; a backend removed by a reload takes its count with it).";
    SERVICE_BYTES: Counter "sluice_service_bytes_total" ["service"]
        "Bytes forwarded to the service's current backends (the sum of their \
         sluice_backend_bytes_total).";
    SERVICE_NEW_CONNECTIONS: Counter "sluice_service_new_connections_total" ["service"]
        "New connections sent to the service's current backends (the sum of their \
         sluice_backend_new_connections_total).";
    SERVICE_BACKENDS: Gauge "sluice_service_backends" ["service", "state"]
        "The service's backends by state in the published snapshot: healthy, unhealthy or \
         draining (removed or drained, within their draining timeout).";
    SERVICE_BACKENDS_NEXT_HOP_UNRESOLVED: Gauge "sluice_service_backends_next_hop_unresolved" ["service"]
        "The service's backends whose next-hop MAC is not known: their packets are dropped as \
         next_hop_unresolved.";
    SERVICE_ELIGIBLE_BACKENDS: Gauge "sluice_service_eligible_backends" ["service", "zone"]
        "Size of the modified eligible set per client zone (\"-\": no zone).";
    SERVICE_ACTIVE_POOL: Gauge "sluice_service_active_pool" ["service", "pool"]
        "1 for the pool new connections go to (primary/failover), 0 for the other.";
    SERVICE_POOL_FLIPS: Counter "sluice_service_pool_flips_total" ["service"]
        "Times the service's new connections moved between its primary and failover pools.";
    SERVICE_TABLE_BUILD_SECONDS: Gauge "sluice_service_table_build_seconds" ["service"]
        "Duration of the service's last eligibility + Maglev build.";
    SERVICE_TABLE_DIGEST_INFO: Gauge "sluice_service_table_digest_info" ["service", "digest"]
        "Always 1; `digest` identifies the service's Maglev tables slot by slot: appliances \
         behind the same VIPs must show the same.";
    RULE_PACKETS: Counter "sluice_rule_packets_total" ["rule"]
        "Packets that matched a forwarding rule of the current configuration, forwarded or not \
         (a packet dropped after the match, e.g. no_backend, counts too). A rule keeps its \
         count across reloads.";
    VIP_ANNOUNCED: Gauge "sluice_vip_announced" ["vip"]
        "1 while the VIP's route is in bgp.kernel_table for BIRD to announce, 0 while it is \
         withdrawn (`sluice status` says why).";
    VIP_SERVABLE: Gauge "sluice_vip_servable" ["vip"]
        "1 while a service of the VIP has a healthy, eligible backend with a known next hop \
         (the appliance could serve it), else 0. Announced or not: a servable VIP that is \
         withdrawn is withdrawn for another reason (stopping, not ready, the route not \
         installed).";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use sluice_core::stats::{ConntrackStats, PortCounters, QuicLbStats, WorkerStats};

    use super::*;

    /// Every declaration builds (a valid name and labels for its type),
    /// and no name is declared twice.
    #[test]
    fn every_family_is_valid_and_declared_once() {
        let mut names = BTreeSet::new();
        for f in ALL {
            assert!(names.insert(f.name), "{} declared twice", f.name);
            match f.kind {
                Kind::Histogram => {
                    assert_eq!(f.histogram(&[1.0], &[1, 0], 0.5).name(), f.name)
                }
                _ => {
                    let values = vec!["x"; f.labels.len()];
                    f.ints().put(&values, 1);
                    f.floats().put(&values, 1.0);
                }
            }
        }
    }

    /// The words of `text` that may be metric names, with a `{a,b}` group
    /// after `_` spelt out (`sluice_port_{rx,tx}_bytes_total` names two);
    /// any other brace opens a name's labels and ends it.
    fn names_in(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "_{},".contains(c))) {
            let mut spelt = vec![String::new()];
            let mut rest = word;
            while let Some(open) = rest.find('{') {
                let before = &rest[..open];
                let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                    break;
                };
                if !before.ends_with('_') {
                    break;
                }
                let group = &rest[open + 1..close];
                spelt = spelt
                    .iter()
                    .flat_map(|s| group.split(',').map(move |g| format!("{s}{before}{g}")))
                    .collect();
                rest = &rest[close + 1..];
            }
            let tail = rest.split(['{', ',']).next().unwrap_or("");
            out.extend(spelt.into_iter().map(|s| format!("{s}{tail}")));
        }
        out
    }

    #[test]
    fn names_in_spells_out_groups_and_leaves_out_labels() {
        let names =
            names_in("| `sluice_port_hw_{rx,tx}_{packets,bytes}_total{port}`, `a_b{x,y}` |");
        for n in [
            "sluice_port_hw_rx_packets_total",
            "sluice_port_hw_tx_bytes_total",
            "a_b",
        ] {
            assert!(names.contains(n), "{n} in {names:?}");
        }
        assert!(!names
            .iter()
            .any(|n| n.contains("port}") || n.ends_with('x')));
    }

    /// docs/operations.md's metric tables name every family `/metrics`
    /// exports: those declared here and those of the workers' counter
    /// blocks.
    #[test]
    fn operations_md_names_every_family() {
        let documented = names_in(include_str!("../../../docs/operations.md"));
        let blocks = PortCounters::METRICS
            .iter()
            .map(|m| m.name)
            .chain(WorkerStats::METRICS.iter().map(|m| m.name))
            .chain(ConntrackStats::METRICS.iter().map(|m| m.name))
            .chain(QuicLbStats::METRICS.iter().map(|m| m.name));
        let missing: Vec<&str> = ALL
            .iter()
            .map(|f| f.name)
            .chain(blocks)
            .filter(|n| !documented.contains(*n))
            .collect();
        assert!(missing.is_empty(), "not in docs/operations.md: {missing:?}");
    }
}
