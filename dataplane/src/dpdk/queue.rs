//! A port's RX and TX queues: each made once, by `Port::start`, owned by
//! one worker, and holding its port open (an `Arc` of the [`OpenPort`]).

use std::sync::Arc;

use super::burst::MbufBurst;
use super::ids::PortId;
use super::open_port::OpenPort;

/// One worker's queue pair on a port.
#[derive(Debug)]
pub struct QueuePair {
    pub rx: RxQueue,
    pub tx: TxQueue,
}

impl QueuePair {
    /// Queue pair `queue` of a started port; `Port::start` makes each once.
    pub(super) fn new(port: &Arc<OpenPort>, queue: u16) -> Self {
        Self {
            rx: RxQueue {
                port: port.id(),
                queue,
                _port: Arc::clone(port),
            },
            tx: TxQueue {
                port: port.id(),
                queue,
                _port: Arc::clone(port),
            },
        }
    }
}

/// One RX queue of one port. Not `Clone`, made once by [`Port::start`](super::Port::start):
/// exactly one owner polls it. Holds the port open.
///
/// ```compile_fail
/// fn a_second_owner<T: Clone>() {}
/// a_second_owner::<dataplane::dpdk::RxQueue>();
/// ```
#[derive(Debug)]
pub struct RxQueue {
    port: PortId,
    queue: u16,
    _port: Arc<OpenPort>,
}

/// One TX queue of one port. Not `Clone`, made once by [`Port::start`](super::Port::start):
/// exactly one owner sends on it. Holds the port open.
///
/// ```compile_fail
/// fn a_second_owner<T: Clone>() {}
/// a_second_owner::<dataplane::dpdk::TxQueue>();
/// ```
#[derive(Debug)]
pub struct TxQueue {
    port: PortId,
    queue: u16,
    _port: Arc<OpenPort>,
}

impl RxQueue {
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Receives up to `max` packets (capped by the room left in `burst`).
    #[inline]
    pub fn rx_burst(&mut self, burst: &mut MbufBurst, max: usize) -> usize {
        let (slots, room) = burst.spare_raw();
        let room = room.min(max);
        if room == 0 {
            return 0;
        }
        // SAFETY: this RxQueue is the only user of (port, queue) (not Clone,
        // made once by Port::start), and the port is open while it exists;
        // `slots` has room for `room` pointers (the burst's empty tail,
        // which it lends for this call only).
        let n =
            unsafe { dpdk_sys::rte_eth_rx_burst(self.port.get(), self.queue, slots, room as u16) };
        let n = usize::from(n).min(room);
        // SAFETY: the driver wrote `n` received mbufs, which it hands to us.
        unsafe { burst.commit_raw(n) };
        n
    }
}

impl TxQueue {
    pub fn port(&self) -> PortId {
        self.port
    }

    /// Transmits the burst. Packets the driver did not take stay in `burst`
    /// (the caller counts and frees them). Returns how many were sent.
    #[inline]
    pub fn tx_burst(&mut self, burst: &mut MbufBurst) -> usize {
        let (slots, n) = burst.held_raw();
        if n == 0 {
            return 0;
        }
        // SAFETY: this TxQueue is the only user of (port, queue), which is
        // open while it exists; slots[..n] are valid mbufs whose ownership
        // passes to the driver for the ones it accepts (the first `sent`).
        let sent = usize::from(unsafe {
            dpdk_sys::rte_eth_tx_burst(self.port.get(), self.queue, slots, n as u16)
        })
        .min(n);
        // SAFETY: the driver took exactly the first `sent`.
        unsafe { burst.release_sent(sent) };
        sent
    }
}
