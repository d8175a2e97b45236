//! sluice's packet path, sans-IO: pure functions of (packet bytes,
//! snapshot, worker-local state, clock) that run in unit tests, property
//! tests, fuzzers and benchmarks without EAL, DPDK, libclang or bindgen.
//! The `dataplane` crate drives it over DPDK mbufs and queues; the control
//! plane builds its snapshots.
//!
//! No unsafe code: the two CPU/OS hints the hot paths use (prefetch,
//! transparent huge pages) come from `sluice-platform`.
#![forbid(unsafe_code)]

pub mod burst;
pub mod conntrack;
pub mod drop_reason;
pub mod encap;
pub mod fast_path;
pub mod flow;
pub mod fragment;
pub mod hash;
pub mod icmp;
pub mod outer_header;
pub mod packet;
pub mod pipeline;
pub mod rules;
pub mod snapshot;
pub mod stage;
pub mod stats;
pub mod steering;
pub mod vlan;
pub mod wire;

pub use drop_reason::DropReason;
pub use packet::PacketBuf;
pub use pipeline::Verdict;
pub use snapshot::{BackendId, ForwardingState, ServiceId};
