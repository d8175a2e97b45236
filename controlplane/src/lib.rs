//! sluice control plane: configuration, Maglev tables, snapshot publishing
//! and metrics. The `sluice` binary (main.rs) drives these.

pub mod config;
pub mod maglev;
pub mod metrics;
pub mod publish;
