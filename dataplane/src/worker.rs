//! TODO(worker)
