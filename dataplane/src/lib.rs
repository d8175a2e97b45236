//! sluice dataplane: the packet path.
//!
//! Everything except [`dpdk`] and [`worker`] is sans-IO: pure functions of
//! (packet bytes, snapshot, worker-local state, clock) that run in unit tests
//! without EAL. [`dpdk`] is the only module with `unsafe` code.

pub mod conntrack;
pub mod dpdk;
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
pub mod stats;
pub mod steering;
pub mod vlan;
pub mod wire;
pub mod worker;

pub use drop_reason::DropReason;
pub use packet::PacketBuf;
pub use pipeline::Verdict;
pub use snapshot::{BackendId, ForwardingState, ServiceId};
