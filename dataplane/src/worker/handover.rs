//! Backpressure of software steering (AP-1, [`sluice_core::steering`]): tracked
//! packets for another worker wait in a per-peer burst until the peer's
//! ring takes them. What a full ring does not take stays held, in order,
//! and is offered again on the next poll; meanwhile the worker reads no
//! RX burst that could steer. Loss, if the peer cannot keep up, then
//! happens where it is counted — in the port's RX ring (`imissed`, the
//! kernel's socket drops for `net_af_packet`) — not silently between
//! workers, and a flow's packets keep their order.

/// A burst of packets held for one peer.
pub trait Held {
    fn is_empty(&self) -> bool;
}

impl<T> Held for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

/// Offers every non-empty held burst to its peer: `send(peer, burst)`
/// moves what the peer's ring takes, from the front, and leaves the rest
/// held. Returns whether nothing is held any more — only then may the
/// worker read an RX burst that steers: every held burst then has room
/// for a whole RX burst (at most `MAX_BURST` packets), so steering never
/// has to drop.
#[inline]
pub fn hand_over<B: Held>(held: &mut [B], mut send: impl FnMut(usize, &mut B)) -> bool {
    let mut clear = true;
    for (peer, burst) in held.iter_mut().enumerate() {
        if !burst.is_empty() {
            send(peer, burst);
            clear &= burst.is_empty();
        }
    }
    clear
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A model of two workers with the worker's loop order: hand over what
    /// is held, read an RX burst only if nothing is, steer all of it to the
    /// peer; the peer drains fewer packets per poll than arrive. Nothing
    /// is lost, the order is kept, and the sender pauses its RX.
    #[test]
    fn ap_1_a_full_ring_pauses_rx_and_loses_nothing() {
        const RING: usize = 64;
        const BURST: usize = 32;
        let mut port: VecDeque<u32> = (0..10_000).collect();
        let mut held: Vec<Vec<u32>> = vec![Vec::new(), Vec::new()];
        let mut ring: VecDeque<u32> = VecDeque::new();
        let mut delivered = Vec::new();
        let mut paused_polls = 0;
        while !(port.is_empty() && ring.is_empty() && held.iter().all(Vec::is_empty)) {
            let clear = hand_over(&mut held, |peer, burst| {
                assert_eq!(peer, 1);
                let take = burst.len().min(RING - ring.len());
                ring.extend(burst.drain(..take));
            });
            if clear {
                let n = BURST.min(port.len());
                held[1].extend(port.drain(..n));
                assert!(held[1].len() <= BURST, "a held burst overflowed");
            } else {
                paused_polls += 1;
            }
            // The end of the poll: hand over again (flush_all).
            hand_over(&mut held, |_, burst| {
                let take = burst.len().min(RING - ring.len());
                ring.extend(burst.drain(..take));
            });
            // The peer's poll: one smaller burst off the ring.
            for _ in 0..BURST / 2 {
                if let Some(p) = ring.pop_front() {
                    delivered.push(p);
                }
            }
        }
        assert_eq!(delivered, (0..10_000).collect::<Vec<_>>());
        assert!(paused_polls > 0, "the sender never had to wait");
    }

    #[test]
    fn nothing_held_means_rx_may_be_read() {
        let mut held: Vec<Vec<u8>> = vec![Vec::new(); 3];
        assert!(hand_over(&mut held, |_, _| panic!("nothing to send")));
        held[2].push(1);
        assert!(!hand_over(&mut held, |_, _| {}));
        assert!(hand_over(&mut held, |peer, b| {
            assert_eq!(peer, 2);
            b.clear()
        }));
    }
}
