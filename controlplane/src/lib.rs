//! sluice control plane: configuration, Maglev tables, snapshot publishing
//! and metrics. The `sluice` binary (main.rs) drives these.
//! No unsafe code: DPDK is reached through the `dataplane` crate's safe layer.
#![forbid(unsafe_code)]
// The workspace's `unreachable_pub` is allowed here: about 70 `pub` items
// of this crate's private modules are reachable only within it. Without
// this line, `cargo clippy --fix -p controlplane --lib` narrows them.
#![allow(unreachable_pub)]

pub mod admin_http;
pub mod admin_request;
pub mod admin_state;
pub mod announce;
pub mod backend_ids;
pub mod background;
pub mod config;
pub mod control;
pub mod control_socket;
pub mod exception;
pub mod explain;
pub mod exposition;
pub mod fleet;
pub mod handoff;
pub mod health;
pub mod log;
pub mod maglev;
pub mod mbuf_pool;
pub mod memory_budget;
pub mod metrics;
pub mod metrics_control;
pub mod metrics_process;
pub mod neighbours;
pub mod policy;
pub mod publish;
pub mod rtnetlink;
pub mod service_manager;
pub mod start_hints;
pub mod synthetic;
pub mod table_cache;

/// The log's macros (`tracing` events; `log` installs the subscriber).
pub use tracing::{debug, error, info, trace, warn};
