//! Prometheus exposition (AP-5): `/metrics`, `--metrics-dump`.
//!
//! - [`sources`]: what a scrape reads;
//! - [`fixed`]: the families whose size is fixed, rendered whole at a
//!   scrape's start: the workers' counters, with the control thread's
//!   ([`control`]), the ports' ([`ports`]) and the process's
//!   ([`process`]);
//! - [`exposition`]: the scrape as a stream, with the families that grow
//!   with the configuration (per backend, service, rule, VIP) written row
//!   by row.

pub mod catalog;
pub mod control;
pub mod exposition;
pub mod family;
pub mod fixed;
pub mod ports;
pub mod process;
pub mod sources;

pub use exposition::{render, Exposition};
pub use sources::MetricsSources;
