//! The safe layer over DPDK: the only `unsafe` code outside `dpdk-sys`.
//!
//! Every type here upholds one DPDK invariant so the rest of the dataplane
//! does not have to: [`Eal`] is initialised once and cleaned up only when
//! nothing holds it any more (every pool, port, queue, ring and lcore
//! holds a guard); [`Mbuf`] owns its buffer (freed on drop, given up on
//! TX) and a [`Mempool`] is freed only with all its mbufs back; a [`Port`]
//! hands out its queues once, at start, and each [`RxQueue`]/[`TxQueue`]
//! holds the port open; each [`Lcore`] runs one job at a time, and a
//! [`Launched`] job is waited for before anything it holds goes away.

pub mod af_packet;
mod burst;
mod eal;
mod error;
mod ids;
mod mbuf;
mod mempool;
mod open_port;
mod port;
mod queue;
mod ring;
mod rss;
pub mod rte_hash;
#[cfg(test)]
mod tests;

pub use burst::{Drain, MbufBurst, MAX_BURST};
pub use dpdk_sys::DPDK_VERSION;
pub use eal::{log_to, DpdkLogLevel, Eal, EalInUse, LaunchError, Launched, Lcore, TscClock};
pub use error::DpdkError;
pub use ids::{LcoreId, PortId};
pub use mbuf::Mbuf;
pub use mempool::{Mempool, MBUF_HEADROOM};
pub use port::{
    max_queue_pairs, planned_placement, LinkStatus, Port, PortConfig, PortHwStats, PortMonitor,
    NET_TAP_START_QUEUE_PAIRS,
};
pub use queue::{QueuePair, RxQueue, TxQueue};
pub use ring::{mbuf_ring, RingConsumer, RingProducer};
