//! Conntrack hand-off between a sluice that stops and the one that
//! starts after it (a restart, an upgrade): the file ([`file`]), what
//! goes into it at a stop and what a start makes of it ([`place`]).

pub mod file;
pub mod place;
pub mod store;
