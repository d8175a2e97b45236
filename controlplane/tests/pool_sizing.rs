//! The packet pool holds the steering rings' mbufs only when workers steer
//! (AP-1), through the real `sluice` binary with two workers: a device that
//! hashes RSS on addresses (`net_null` reports every RSS hash type) gets the
//! pool of its RX and TX rings alone and no steering, a device without RSS
//! (`net_pcap`, one RX queue per `rx_pcap` file) the larger pool with the
//! steering rings. The rings grow with the square of the workers: counting
//! them regardless made a 64-worker appliance on RSS NICs ask for 32
//! million mbufs (74 GiB).

mod common;

use common::*;
use controlplane::mbuf_pool::{mbuf_count, Steering};

/// `sluice run` over `device` with two workers: the mbufs its log says the
/// pool has, and whether it logged software steering.
fn pool_of(name: &str, device: &str) -> (u32, bool, u32, u32) {
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
    let steers = stderr.contains("software steering between 2 workers");
    let demand = dp.pool_demand();
    (
        logged,
        steers,
        mbuf_count(&demand, Steering::Off),
        mbuf_count(&demand, Steering::On),
    )
}

#[test]
fn ap_1_a_port_with_rss_on_addresses_gets_no_steering_rings_in_its_pool() {
    let (logged, steers, off, on) = pool_of("pool-rss", "net_null0,no-rx=1");
    assert!(!steers, "net_null does RSS on addresses: no steering");
    assert!(off < on, "two workers' rings must show in the count");
    assert_eq!(
        logged, off,
        "the pool must not hold rings that do not exist"
    );
}

#[test]
fn ap_1_a_port_without_rss_gets_its_steering_rings_in_its_pool() {
    let empty =
        "net_pcap0,rx_pcap=DIR/in.pcap,rx_pcap=DIR/in.pcap,tx_pcap=DIR/a.pcap,tx_pcap=DIR/b.pcap";
    let (logged, steers, _, on) = pool_of("pool-pcap", empty);
    assert!(steers, "net_pcap has no RSS: workers steer");
    assert_eq!(logged, on);
}
