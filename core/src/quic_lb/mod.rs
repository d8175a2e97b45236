//! QUIC-LB (draft-ietf-quic-load-balancers): UDP packets of a service with
//! QUIC-LB configurations are routed by the server ID their QUIC servers
//! encode in the connection IDs they issue, whatever the client's address
//! and port, so a connection survives NAT rebinding and client migration.
//!
//! Stage 1 decodes the Destination Connection ID ([`QuicLbRouting::route`]):
//! a server ID of one of the service's backends routes the packet there
//! without a conntrack lookup; anything else — a client-chosen ID (Initial,
//! 0-RTT), an unknown version, config rotation bits 0b111 or of no
//! configuration, a server ID of no backend, a datagram too short — takes
//! the ordinary path (affinity, conntrack, Maglev) and is counted under its
//! [`Fallback`] reason. Stage 2 then asks whether the named backend still
//! takes the connection (`conntrack::session::quic_connection_stays`): a
//! connection ID names the
//! backend its connection lives on, as a conntrack entry does, so CT-7,
//! CT-8, CT-10 and CT-11 decide as they would for that entry.
//!
//! This module is ground level: it knows backend ids, not snapshots or
//! services (which hold its [`QuicLbRouting`]).

pub mod cid;
pub(crate) mod header;

use hashbrown::HashMap;

pub use cid::{CidCodec, CidConfigError, CidLengths, ServerId};

use crate::ids::BackendId;

macro_rules! fallbacks {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*) => {
        /// Why a UDP packet of a QUIC-LB service took the ordinary path.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Fallback {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Fallback {
            /// Every reason, in counter-index order.
            pub const ALL: &'static [Fallback] = &[$(Fallback::$variant,)*];
            // Public for core/tests/quic_lb.rs.
            pub const COUNT: usize = Self::ALL.len();

            /// The metric label: stable, snake_case.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Fallback::$variant => $name,)*
                }
            }

            #[inline]
            pub const fn index(self) -> usize {
                self as usize
            }
        }
    };
}

fallbacks! {
    /// An Initial or 0-RTT packet, balanced by its 4-tuple as the draft's
    /// baseline fallback is: the client's first flight carries a
    /// Destination Connection ID of its own choice, and the 4-tuple does
    /// not change while the handshake runs.
    Initial => "initial",
    /// A long header of a QUIC version other than 1 and 2 (or a packet
    /// type only servers send).
    UnknownVersion => "unknown_version",
    /// Config rotation bits 0b111: a server without a configuration chose
    /// the ID.
    UnroutableConfig => "unroutable_config",
    /// Config rotation bits of no configuration of the service.
    UnknownConfig => "unknown_config",
    /// The datagram or the connection ID is shorter than the
    /// configuration's connection IDs (or than any QUIC header).
    TooShort => "too_short",
    /// The server ID is no backend's of the service.
    UnknownServerId => "unknown_server_id",
    /// The server ID's backend is gone, or drained past its deadline
    /// (CT-7, CT-10).
    BackendGone => "backend_gone",
    /// The server ID's backend is unhealthy and the service's connections
    /// do not persist on unhealthy backends (CT-8).
    BackendUnhealthy => "backend_unhealthy",
    /// The server ID's backend is in the pool that is not active and the
    /// service does not drain on failover (CT-11).
    InactivePool => "inactive_pool",
}

/// A backend as a configuration's server ID names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub backend: BackendId,
    /// In the service's pool that is not active (FO-1): its connections
    /// end at a pool flip unless the service drains on failover (CT-11).
    pub inactive_pool: bool,
}

/// One configuration of a service: its codec and its server IDs.
#[derive(Clone, Debug)]
pub struct ConfigRoute {
    pub codec: CidCodec,
    pub servers: HashMap<ServerId, Server>,
}

/// A service's QUIC-LB configurations, by config id; built by the control
/// plane with every snapshot whose service or backends changed.
#[derive(Clone, Debug, Default)]
pub struct QuicLbRouting {
    pub configs: [Option<ConfigRoute>; cid::CONFIG_IDS],
}

/// Stage 1's decision for a UDP packet of a QUIC-LB service.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Its connection ID names this backend.
    Routed(Server),
    /// The ordinary path, for this reason.
    Fallback(Fallback),
}

/// What the decoding of one datagram found, for `sluice explain`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The config rotation bits, once a connection ID was found.
    pub config_id: Option<u8>,
    /// The server ID, once a configuration decoded it.
    pub server_id: Option<ServerId>,
    pub decision: Decision,
}

impl QuicLbRouting {
    /// The decision for a UDP datagram's payload.
    #[inline]
    pub fn route(&self, payload: &[u8]) -> Decision {
        self.decode(payload).decision
    }

    /// [`QuicLbRouting::route`] with what it found on the way.
    #[inline]
    pub fn decode(&self, payload: &[u8]) -> Decoded {
        let mut out = Decoded {
            config_id: None,
            server_id: None,
            decision: Decision::Fallback(Fallback::TooShort),
        };
        let dcid = match header::destination_cid(payload) {
            Ok(dcid) => dcid,
            Err(f) => {
                out.decision = Decision::Fallback(f);
                return out;
            }
        };
        let Some(&first) = dcid.first() else {
            return out;
        };
        let config_id = first >> 5;
        out.config_id = Some(config_id);
        if config_id == cid::UNROUTABLE_CONFIG {
            out.decision = Decision::Fallback(Fallback::UnroutableConfig);
            return out;
        }
        let Some(config) = self
            .configs
            .get(usize::from(config_id))
            .and_then(Option::as_ref)
        else {
            out.decision = Decision::Fallback(Fallback::UnknownConfig);
            return out;
        };
        let Some(sid) = config.codec.server_id(dcid) else {
            return out;
        };
        out.server_id = Some(sid);
        out.decision = match config.servers.get(&sid) {
            Some(&server) => Decision::Routed(server),
            None => Decision::Fallback(Fallback::UnknownServerId),
        };
        out
    }
}

/// Packets of QUIC-LB services, counted by the worker that decided them
/// (plain integers: one writer; the worker copies them to its metrics
/// block once per poll).
#[derive(Clone, Debug, Default)]
pub struct QuicLbCounts {
    /// Routed by their connection ID.
    pub routed: u64,
    /// Sent the ordinary path, by [`Fallback::index`].
    pub fallback: [u64; Fallback::COUNT],
}

impl QuicLbCounts {
    #[inline]
    pub(crate) fn count_fallback(&mut self, reason: Fallback) {
        if let Some(c) = self.fallback.get_mut(reason.index()) {
            *c += 1;
        }
    }
}
