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

impl SessionAffinity {
    /// Every affinity, in the order the configuration reference lists them.
    pub const ALL: [Self; 4] = [
        Self::None,
        Self::ClientIpPortProto,
        Self::ClientIpProto,
        Self::ClientIp,
    ];

    /// The value `session_affinity` takes for it in the configuration.
    pub const fn config_name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::ClientIpPortProto => "CLIENT_IP_PORT_PROTO",
            Self::ClientIpProto => "CLIENT_IP_PROTO",
            Self::ClientIp => "CLIENT_IP",
        }
    }
}
