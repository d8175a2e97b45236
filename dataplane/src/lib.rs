//! sluice's DPDK driver: the safe layer over DPDK ([`dpdk`], the only
//! module with `unsafe` code outside `dpdk-sys`) and the per-core workers
//! ([`worker`]) that run the sans-IO packet path of `sluice-core` over
//! mbufs, queues and rings.

pub mod dpdk;
pub mod worker;
