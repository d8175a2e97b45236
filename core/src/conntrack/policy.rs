//! SPEC §3's rules as pure functions of (mode, affinity, persistence,
//! packet). The reference model in the property test restates them
//! independently.

use super::PacketMeta;
use crate::affinity::SessionAffinity as A;
use crate::flow::{tuple_kind, TupleKind};
use crate::service::{PersistenceOnUnhealthy as P, TrackingMode as M};
use crate::wire::proto::{ESP, GRE, TCP, UDP};

/// CT-4: TCP under every affinity; UDP, ESP and GRE under every affinity
/// but `NONE`; ICMP/ICMPv6 never. Protocols SPEC §3 does not name (SCTP,
/// …) are not tracked either: they are balanced by hash on every packet.
// Public for core/tests/conntrack_rules.rs.
#[inline]
pub fn trackable(proto: u8, affinity: A) -> bool {
    match proto {
        TCP => true,
        UDP | ESP | GRE => affinity != A::None,
        _ => false,
    }
}

/// CT-3's table: `PER_CONNECTION` keys like `CLIENT_IP_PORT_PROTO` whatever
/// the affinity (5-tuple for TCP and unfragmented UDP, 3-tuple otherwise);
/// `PER_SESSION` keys like the affinity hashes (SPEC §2).
// Public for core/tests/conntrack_steering.rs.
#[inline]
pub fn key_kind(mode: M, affinity: A, m: &PacketMeta) -> TupleKind {
    let by = match mode {
        M::PerConnection => A::ClientIpPortProto,
        M::PerSession => affinity,
    };
    tuple_kind(by, m.proto, m.ports.is_some(), m.fragmented)
}

/// SYN set, ACK clear.
#[inline]
pub(crate) fn is_syn(m: &PacketMeta) -> bool {
    m.proto == TCP && m.tcp_flags & 0x12 == 0x02
}

/// CT-1: a SYN that starts a new connection (skips the table lookup):
/// always under `PER_CONNECTION`; under `PER_SESSION` only with affinity
/// `NONE` / `CLIENT_IP_PORT_PROTO`.
#[inline]
pub(crate) fn syn_is_new_connection(mode: M, affinity: A, m: &PacketMeta) -> bool {
    is_syn(m)
        && match mode {
            M::PerConnection => true,
            M::PerSession => matches!(affinity, A::None | A::ClientIpPortProto),
        }
}

/// CT-8: whether a tracked packet stays on its backend once that backend
/// is unhealthy. `ALWAYS_PERSIST` with `PER_SESSION` is refused by the
/// config check; a hand-built snapshot with it gets the protocol default.
#[inline]
pub fn persists(setting: P, mode: M, affinity: A, proto: u8) -> bool {
    let default = || match mode {
        M::PerConnection => proto == TCP,
        M::PerSession => proto == TCP && matches!(affinity, A::None | A::ClientIpPortProto),
    };
    match (setting, mode) {
        (P::NeverPersist, _) => false,
        (P::DefaultForProtocol, _) | (P::AlwaysPersist, M::PerSession) => default(),
        // ICMP is never tracked, so "n/a" needs no case.
        (P::AlwaysPersist, M::PerConnection) => trackable(proto, affinity),
    }
}

/// Convenience for tests: the kind of the CT-3 key of a packet.
// Public for core/tests/conntrack_rules.rs.
pub fn key_tuple(mode: M, affinity: A, m: &PacketMeta) -> Option<TupleKind> {
    trackable(m.proto, affinity).then(|| key_kind(mode, affinity, m))
}

/// CT-3 across a restart under another configuration: whether a key of
/// `kind` for protocol `proto` (0 for a 2-tuple key, which does not
/// record it) is still the key some packet of its flow gets under `mode`
/// and `affinity`. A 3-tuple key may be a fragment's (HA-2) or an
/// affinity's; either still holding keeps it.
pub fn keyed_alike(kind: TupleKind, proto: u8, mode: M, affinity: A) -> bool {
    let packet = |proto, ports: bool| PacketMeta {
        proto,
        tcp_flags: 0,
        fragmented: !ports,
        ports: ports.then_some(crate::wire::Ports { src: 1, dst: 1 }),
    };
    let gives = |m: PacketMeta| key_tuple(mode, affinity, &m) == Some(kind);
    match kind {
        TupleKind::Two => gives(packet(TCP, true)),
        TupleKind::Three => gives(packet(proto, true)) || gives(packet(proto, false)),
        TupleKind::Five => gives(packet(proto, true)),
    }
}

#[cfg(test)]
mod keyed_alike_tests {
    use super::*;

    /// CT-3: a 5-tuple TCP key holds under every affinity with
    /// PER_CONNECTION, and under PER_SESSION only where the affinity
    /// keys 5-tuples.
    #[test]
    fn five_tuple_keys_follow_the_mode_and_affinity() {
        let all = [A::None, A::ClientIp, A::ClientIpProto, A::ClientIpPortProto];
        for a in all {
            assert!(
                keyed_alike(TupleKind::Five, TCP, M::PerConnection, a),
                "{a:?}"
            );
        }
        assert!(keyed_alike(
            TupleKind::Five,
            TCP,
            M::PerSession,
            A::ClientIpPortProto
        ));
        assert!(!keyed_alike(
            TupleKind::Five,
            TCP,
            M::PerSession,
            A::ClientIp
        ));
        assert!(keyed_alike(TupleKind::Two, 0, M::PerSession, A::ClientIp));
        assert!(!keyed_alike(
            TupleKind::Two,
            0,
            M::PerConnection,
            A::ClientIp
        ));
        // CT-4: UDP under NONE is not tracked at all.
        assert!(!keyed_alike(
            TupleKind::Five,
            UDP,
            M::PerConnection,
            A::None
        ));
        // A fragment's 3-tuple key (HA-2) holds where 5-tuples do.
        assert!(keyed_alike(
            TupleKind::Three,
            UDP,
            M::PerConnection,
            A::ClientIpPortProto
        ));
        assert!(keyed_alike(
            TupleKind::Three,
            TCP,
            M::PerSession,
            A::ClientIpProto
        ));
    }
}
