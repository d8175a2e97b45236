//! The admin endpoint (AP-5): `/metrics`, `/healthz` and `/ready` on the
//! `[metrics] listen` address.
//!
//! - [`state`]: what the endpoint reports, written by the control thread;
//! - [`request`]: one request head to one answer (pure but for reading the
//!   state);
//! - [`http`]: the endpoint's thread, its sockets and their limits.

pub mod http;
pub mod request;
pub mod state;

pub use http::{raise_open_files_limit, AdminServer, LIMITS};
pub use state::{AdminState, Published, LIVENESS_WINDOW};
