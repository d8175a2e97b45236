//! The CPU and operating-system hints the sans-IO core uses on its hot
//! paths: a cache prefetch and transparent huge pages for large tables.
//! Both are hints: they never change what a program computes, only how
//! fast. This crate holds their `unsafe` calls so that `sluice-core` can
//! forbid unsafe code outright.

mod memory;
mod prefetch;

pub use memory::advise_huge_pages;
pub use prefetch::prefetch_read;
