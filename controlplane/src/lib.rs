//! sluice control plane: configuration, Maglev tables, snapshot publishing
//! and metrics. The `sluice` binary (main.rs) drives these.

pub mod config;
pub mod health;
pub mod maglev;
pub mod metrics;
pub mod policy;
pub mod publish;
