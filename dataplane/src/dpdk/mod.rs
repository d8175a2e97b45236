//! The safe layer over DPDK.
