//! The safe layer on real DPDK: EAL without hugepages, a `net_null`
//! port, real mbufs. EAL can be initialised once per process, so the
//! checks run one after another in a single test, each in its own
//! function; the EAL checks that leave it unusable come last.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_core::packet::PacketBuf;

use super::*;

fn init_eal() -> (Eal, String) {
    let prefix = format!("dataplane-test-{}", std::process::id());
    let args: Vec<String> = [
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-telemetry",
        "--log-level=error",
        "--lcores=0@0,1@0",
        "--vdev=net_null0",
        "--vdev=net_null1",
        &format!("--file-prefix={prefix}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    (Eal::init(&args).expect("EAL init"), prefix)
}

/// `n` fresh mbufs, the i-th holding the one byte i.
fn numbered(pool: &Mempool, n: usize) -> MbufBurst {
    let mut burst = MbufBurst::default();
    assert!(pool.alloc_into(&mut burst, n), "pool short");
    for (i, m) in burst.iter_mut().enumerate() {
        assert!(m.append(1));
        m.data_mut()[0] = i as u8;
    }
    burst
}

fn bytes(burst: &MbufBurst) -> Vec<u8> {
    burst.iter().map(|m| m.data()[0]).collect()
}

/// A drain left early keeps what it did not yield, at the front and in
/// order; nothing leaks, and the slots past the length are empty again
/// (the next RX fills them). Before, `drain` emptied the length up front,
/// so the two untaken mbufs stayed behind in slots the next RX call
/// overwrote: leaked from the pool.
fn a_drain_left_early_keeps_the_rest(pool: &Mempool) {
    let mut burst = numbered(pool, 5);
    assert_eq!(pool.in_use(), 5);
    for m in burst.drain() {
        if m.data()[0] == 2 {
            break;
        }
    }
    assert_eq!(
        burst.len(),
        2,
        "the two mbufs not drained stay in the burst"
    );
    assert_eq!(bytes(&burst), [3, 4], "at the front, in order");
    assert_eq!(burst.total_len(), 2);
    assert_eq!(pool.in_use(), 2, "the three drained ones were freed");
    let (slots, room) = burst.spare_raw();
    assert_eq!(room, MAX_BURST - 2);
    // SAFETY: `slots` points at the burst's `room` spare slots, which are
    // nullable mbuf pointers; only read here.
    let spare = unsafe { std::slice::from_raw_parts(slots, room) };
    assert!(
        spare.iter().all(|p| p.is_null()),
        "a spare slot holds an mbuf"
    );
    assert_eq!(burst.clear(), 2);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

fn a_drain_to_the_end_empties_the_burst(pool: &Mempool) {
    let mut burst = numbered(pool, 4);
    let seen: Vec<u8> = burst.drain().map(|m| m.data()[0]).collect();
    assert_eq!(seen, [0, 1, 2, 3]);
    assert!(burst.is_empty());
    assert_eq!(burst.total_len(), 0);
    assert_eq!(pool.in_use(), 0);
    // A forgotten drain leaves an empty burst, never a length over
    // emptied slots (which would hand null pointers to a TX call).
    let mut burst = numbered(pool, 3);
    std::mem::forget(burst.drain());
    assert!(burst.is_empty());
    drop(burst);
    assert_eq!(pool.in_use(), 0);
}

/// Queues hold their port open: with the `Port` handle gone, the queues
/// still receive and send (a closed port's burst functions return 0).
fn queues_keep_their_port_open(pool: &Mempool) {
    let cfg = PortConfig {
        queue_pairs: 2,
        ..PortConfig::default()
    };
    let (port, mut pairs) = Port::start("net_null0", &cfg, pool).expect("net_null0 starts");
    assert_eq!(pairs.len(), 2, "one pair per queue, handed out once");
    assert_eq!(port.name(), "net_null0");
    let monitor = port.monitor();
    drop(port);
    let mut q = pairs.remove(0);
    drop(pairs);
    let mut burst = MbufBurst::default();
    assert!(q.rx.rx_burst(&mut burst, 8) > 0, "net_null receives");
    assert_eq!(q.rx.port(), monitor.id());
    let n = burst.len();
    assert_eq!(q.tx.tx_burst(&mut burst), n, "net_null sends");
    drop(q);
    assert!(monitor.hw_stats().opackets >= n as u64);
    drop(monitor);
    assert_eq!(pool.in_use(), 0, "closing the port freed its mbufs");
}

/// Each worker lcore is handed out once; dropping a launched job waits
/// for it.
fn lcores_are_handed_out_once_and_waited_for(eal: &mut Eal) {
    let mut lcores = eal.take_worker_lcores();
    assert_eq!(lcores.len(), 1);
    assert_eq!(lcores[0].id().get(), 1);
    assert!(eal.take_worker_lcores().is_empty(), "a second owner");
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let launched = lcores
        .remove(0)
        .launch(move || {
            std::thread::sleep(Duration::from_millis(100));
            flag.store(true, Ordering::SeqCst);
            7
        })
        .expect("launch");
    drop(launched);
    assert!(
        done.load(Ordering::SeqCst),
        "drop returned before the job ended"
    );
}

/// EAL is not cleaned up while a pool holds it; a pool with an mbuf out
/// is not freed (and keeps EAL), so the mbuf stays valid.
fn eal_and_pools_outlive_their_users(eal: Eal, pool: Mempool) {
    let in_use = eal.close().expect_err("closed EAL under a live pool");
    assert_eq!(in_use.users, 1, "the pool");
    let eal = in_use.eal;
    let mut burst = numbered(&pool, 1);
    drop(pool);
    assert_eq!(bytes(&burst), [0], "the mbuf outlives its pool's handle");
    assert_eq!(burst.clear(), 1);
    let in_use = eal.close().expect_err("the leaked pool holds EAL for good");
    assert_eq!(in_use.users, 1);
    std::mem::forget(in_use.eal);
}

#[test]
fn the_safe_layer_on_real_dpdk() {
    let (mut eal, prefix) = init_eal();
    let pool = Mempool::new(&eal, "test_pool", 255, 0, 2176).expect("pool");
    a_drain_left_early_keeps_the_rest(&pool);
    a_drain_to_the_end_empties_the_burst(&pool);
    queues_keep_their_port_open(&pool);
    crate::worker::a_full_relay_ring_is_a_counted_drop_and_the_owner_drains_it(&pool, "net_null1");
    assert_eq!(pool.in_use(), 0, "the relay lanes freed every mbuf");
    lcores_are_handed_out_once_and_waited_for(&mut eal);
    eal_and_pools_outlive_their_users(eal, pool);
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
}
