//! The safe layer over DPDK: the only `unsafe` code outside `dpdk-sys`.
//!
//! Every type here upholds one DPDK invariant so the rest of the dataplane
//! does not have to: [`Eal`] is initialised once and cleaned up last,
//! [`Mbuf`] owns its buffer (freed on drop, given up on TX), a [`Port`] is
//! configured before its queues are handed to workers, and each
//! [`RxQueue`]/[`TxQueue`] is owned by exactly one worker.

pub mod af_packet;
mod burst;
mod eal;
mod error;
mod mbuf;
mod mempool;
mod port;
mod ring;
pub mod rte_hash;

pub use burst::{MbufBurst, MAX_BURST};
pub use eal::{Eal, TscClock};
pub use error::DpdkError;
pub use mbuf::Mbuf;
pub use mempool::{Mempool, MBUF_HEADROOM};
pub use port::{LinkStatus, Port, PortConfig, PortHwStats, RxQueue, TxQueue};
pub use ring::{mbuf_ring, RingConsumer, RingProducer};
