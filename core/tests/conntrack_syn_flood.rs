//! Half-open entries through the per-packet decision (CT-1,
//! CT-3, CT-5, CT-7): an entry written by a SYN lives for the service's
//! half-open timeout until the handshake's ACK completes it, and a flood of
//! spoofed SYNs larger than the shard does not keep completed handshakes
//! out of it.

mod conntrack_support;

use conntrack_support::*;
use sluice_core::affinity::SessionAffinity as A;
use sluice_core::conntrack::Shard;
use sluice_core::service::{PersistenceOnUnhealthy as P, TrackingMode as M};

fn spoofed(i: u32) -> Pkt {
    let c = format!(
        "100.{}.{}.{}",
        64 + ((i >> 16) & 63),
        (i >> 8) & 0xff,
        i & 0xff
    );
    Pkt::tcp(&c, 1024 + (i % 50_000) as u16, SYN)
}

fn client(i: u32, flags: u8) -> Pkt {
    Pkt::tcp(&format!("10.1.{}.{}", i >> 8, i & 0xff), 20_000, flags)
}

/// CT-5 for half-open entries: SYN only → gone after `half_open_timeout`
/// (5 s here); once the ACK arrived → `idle_timeout` (60 s).
#[test]
fn ct_5_a_syn_only_entry_expires_after_the_half_open_timeout() {
    let mut w = World::new(3, A::None, M::PerConnection, P::DefaultForProtocol);
    w.svc().tracking.half_open_timeout_ms = 5_000;
    w.send(&client(1, SYN));
    w.advance(4_999);
    w.send(&client(1, ACK));
    assert_eq!(w.shard.counters.hits, 1, "within the half-open timeout");
    w.advance(59_999);
    w.send(&client(1, ACK));
    assert_eq!(w.shard.counters.hits, 2, "completed: the idle timeout");

    w.send(&client(2, SYN));
    w.advance(5_000);
    w.send(&client(2, ACK));
    let c = w.shard.counters;
    assert_eq!(
        (c.hits, c.misses, c.expirations),
        (2, 1, 1),
        "SYN only: expired"
    );
    // The late ACK recorded the connection again, as established.
    w.advance(59_999);
    w.send(&client(2, ACK));
    assert_eq!(w.shard.counters.hits, 3);
}

/// CT-3, CT-7: 20 × capacity spoofed SYNs, then 500 handshakes with the
/// flood going on between each SYN and its ACK, then the table moves: no
/// completed handshake moves with it, and the flood cost no failed insert.
#[test]
fn ct_3_ct_7_completed_handshakes_stay_tracked_through_a_syn_flood() {
    let mut w = World::new(3, A::None, M::PerConnection, P::DefaultForProtocol);
    w.shard = Shard::with_capacity_and_seed(1_000, 17);
    let mut flood = 0..;
    let mut spoof = |w: &mut World, n: u32| {
        for _ in 0..n {
            w.send(&spoofed(flood.next().unwrap_or(0)));
        }
    };
    spoof(&mut w, 20_000);
    let mut first = Vec::new();
    for i in 0..500 {
        first.push(w.send(&client(i, SYN)));
        spoof(&mut w, 5);
        assert_eq!(w.send(&client(i, ACK)), first[i as usize]);
    }
    w.reshuffle();
    let would_move = (0..500)
        .filter(|&i| w.table_choice(&client(i, ACK)) != first[i as usize])
        .count();
    assert!(would_move > 50, "the table moved: {would_move}");
    let moved = (0..500)
        .filter(|&i| w.send(&client(i, ACK | 0x08)) != first[i as usize])
        .count();
    assert_eq!(moved, 0, "of 500 handshakes ({would_move} untracked would)");
    let c = w.shard.counters;
    assert_eq!(c.insert_failed, 0);
    assert!(c.half_open_evicted >= 20_000 - w.shard.slots() as u64);
    // Every ACK and later packet hits, but for the rare handshake whose
    // half-open entry the flood evicted before its ACK: that ACK records
    // it again (a miss; SYNs skip the lookup, CT-1).
    assert_eq!(c.hits + c.misses, 1_000, "{c:?}");
    assert!(c.hits >= 990, "{c:?}");
}
