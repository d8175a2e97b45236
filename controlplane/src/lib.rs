//! sluice control plane: configuration, Maglev tables, snapshot publishing
//! and metrics. The `sluice` binary (main.rs) drives these.
//! No unsafe code: DPDK is reached through the `dataplane` crate's safe layer.
#![forbid(unsafe_code)]

pub mod admin;
pub mod announce;
pub mod background;
pub mod config;
pub mod control;
pub mod control_socket;
pub mod doctor;
pub mod dpdk_args;
pub mod exception;
pub mod explain;
pub mod fleet;
pub mod handoff;
pub mod health;
pub mod log;
pub mod maglev;
pub mod mbuf_pool;
pub mod memory_budget;
pub mod metrics;
pub mod neighbours;
pub mod policy;
pub mod probe_routes;
pub mod proc_self;
pub mod publish;
pub mod rtnetlink;
pub mod service_manager;
pub mod start_hints;
pub mod synthetic;

/// The log's macros (`tracing` events; `log` installs the subscriber).
pub use tracing::{debug, error, info, trace, warn};
