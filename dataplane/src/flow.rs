//! TODO(flow)
