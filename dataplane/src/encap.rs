//! TODO(encap)
