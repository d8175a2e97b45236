//! Session affinity (SPEC §2): which of a packet's fields feed the flow
//! hash, so which packets a service keeps on one backend.

/// A service's session affinity; [`crate::flow::tuple_kind`] turns it into
/// the tuple a packet hashes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum SessionAffinity {
    /// Hashes like `ClientIpPortProto` (HA-1).
    #[default]
    None,
    ClientIpPortProto,
    ClientIpProto,
    ClientIp,
}
