//! The CPU and operating-system hints the sans-IO core uses on its hot
//! paths: a cache prefetch and transparent huge pages for large tables,
//! and one vector comparison. The hints never change what a program
//! computes, only how fast; the comparison is tested against its portable
//! form. This crate holds their `unsafe` calls so that `sluice-core` can
//! forbid unsafe code outright.

mod lanes;
mod memory;
mod prefetch;

pub use lanes::{lanes_equal, lanes_equal_portable};
pub use memory::advise_huge_pages;
pub use prefetch::prefetch_read;
