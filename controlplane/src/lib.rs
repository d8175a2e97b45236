//! sluice control plane.
