//! The packet pool holds the steering rings' mbufs only when workers steer
//! (AP-1), through the real `sluice` binary with two workers: a device with
//! RSS on 5-tuples (`net_null` reports every hash type and lets its
//! redirection table be set and read) gets its RX and TX rings and small
//! steering rings for what RSS leaves (other protocols, fragments, ICMP
//! errors), a device without RSS (`net_pcap`, one RX queue per `rx_pcap`
//! file) full-size steering rings. The rings grow with the square of the
//! workers: full-size ones on every RSS NIC made a 64-worker appliance ask
//! for 32 million mbufs (74 GiB).

mod common;

use common::*;
use controlplane::mbuf_pool::{mbuf_count, Steering};

/// `sluice run` over `device` with two workers: the mbufs its log says the
/// pool has, its log, and the counts without rings, with small and with
/// full-size ones.
fn pool_of(name: &str, device: &str) -> (u32, String, [u32; 3]) {
    let dir = tempdir(name);
    let device = device.replace("DIR", &dir.display().to_string());
    let config = one_backend_config(&device, "", "").replace("workers = 1", "workers = 2");
    let cfg = dir.join("sluice.toml");
    std::fs::write(&cfg, &config).unwrap();
    write_pcap(&dir.join("in.pcap"), &[]);
    let (stderr, _) = run_sluice_with(&cfg, &dir, &[]);
    let logged: u32 = stderr
        .lines()
        .find_map(|l| l.split("packet pool: ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pool size in the log:\n{stderr}"));
    let dp = controlplane::config::load_str(&config, "t.toml")
        .unwrap()
        .dataplane;
    let demand = dp.pool_demand();
    let counts = [Steering::Off, Steering::Rare, Steering::On].map(|s| mbuf_count(&demand, s));
    (logged, stderr, counts)
}

#[test]
fn ap_1_a_port_with_rss_on_5_tuples_gets_small_steering_rings_in_its_pool() {
    let (logged, stderr, [off, rare, on]) = pool_of("pool-rss", "net_null0,no-rx=1");
    assert!(
        stderr.contains("RSS on 5-tuples for port(s) [\"net_null0\"]")
            && !stderr.contains("software steering"),
        "net_null does RSS on 5-tuples, its table read back:\n{stderr}"
    );
    // (At two workers the pool's power-of-two rounding hides the
    // difference between small and full-size rings; the log shows it.)
    assert!(off < rare && rare <= on, "{off} {rare} {on}");
    assert_eq!(logged, rare, "the pool holds the rings that exist");
    let small = sluice_core::steering::rare_ring_slots(32, 2);
    assert!(
        small < sluice_core::steering::ring_slots(32, 2)
            && stderr.contains(&format!("{small}-slot rings steer the rest")),
        "small rings for what RSS on 5-tuples leaves:\n{stderr}"
    );
}

#[test]
fn ap_1_a_port_without_rss_gets_its_steering_rings_in_its_pool() {
    let empty =
        "net_pcap0,rx_pcap=DIR/in.pcap,rx_pcap=DIR/in.pcap,tx_pcap=DIR/a.pcap,tx_pcap=DIR/b.pcap";
    let (logged, stderr, [.., on]) = pool_of("pool-pcap", empty);
    assert!(
        stderr.contains("software steering between 2 workers"),
        "net_pcap has no RSS: workers steer:\n{stderr}"
    );
    assert_eq!(logged, on);
}
