//! sluice's packet path, sans-IO: pure functions of (packet bytes,
//! snapshot, worker-local state, clock) that run in unit tests, property
//! tests, fuzzers and benchmarks without EAL, DPDK, libclang or bindgen.
//! The `dataplane` crate drives it over DPDK mbufs and queues; the control
//! plane builds its snapshots.
//!
//! No unsafe code: the two CPU/OS hints the hot paths use (prefetch,
//! transparent huge pages) come from `sluice-platform`.
#![forbid(unsafe_code)]

pub mod affinity;
pub mod backend;
pub mod burst;
pub mod conntrack;
pub mod drop_reason;
pub mod encap;
mod established;
pub mod explain;
// Public for core/tests/fast_path.rs, established.rs and quic_lb.rs.
pub mod fast_path;
pub mod flow;
pub mod fragment;
pub mod fragment_flows;
pub mod handoff;
pub mod hash;
mod icmp;
mod icmp_error;
pub mod ids;
pub mod lane_backend;
pub mod maglev_table;
// Public for core/tests/outer_header.rs.
pub mod outer_header;
pub mod packet;
pub mod pipeline;
pub mod port;
pub mod probe_path;
pub mod quic_lb;
pub mod rss;
pub mod rules;
pub mod service;
pub mod snapshot;
pub mod stage;
mod stateless;
pub mod stats;
pub mod steering;
pub mod time;
pub mod vlan;
pub mod wire;
pub mod zones;

pub use drop_reason::DropReason;
pub use ids::{BackendId, ServiceId};
pub use packet::PacketBuf;
pub use pipeline::Verdict;
pub use snapshot::ForwardingState;
