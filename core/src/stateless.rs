//! Stage 2 for an untracked UDP packet of the stateless rule (CT-2, CT-4:
//! the service tracks no UDP, so every packet is hashed onto the Maglev
//! table and nothing is recorded): its backend from the one table, its
//! prebuilt outer header, in one straight line from the 16-byte record
//! stage 1 left (`fast_path::classify_stateless`), without the general
//! stage 2's cases (ICMP errors, QUIC-LB, `follow_flow` fragments,
//! connection tracking, zonal tables).
//!
//! Every packet this lane forwards, the general path would forward to the
//! same backend with the same bytes: a service with one table (no zonal
//! ones, ZA-3) maps the flow hash to the backend the general path's
//! lookup does, and the outer header is the one it prepends. Anything
//! else — zonal tables, an empty table, a packet the prebuilt header does
//! not fit and the general encapsulation refuses — returns None with the
//! packet untouched, and the general path decides it from its
//! reconstructed stage (`fast_path::stateless_stage`).

use crate::established;
use crate::ids::BackendId;
use crate::packet::PacketBuf;
use crate::snapshot::ForwardingState;
use crate::stage::StatelessPacket;

/// [`forward`] as a call, for a stateless packet in a burst whose stage 1
/// learnt the established lane's rule first: inlined beside that lane,
/// it shifted the burst function's register assignment, and tracked TCP
/// cost 7 to 12 more instructions per packet (`docs/performance-log.md`,
/// "The stateless lane").
#[inline(never)]
pub(crate) fn forward_out_of_line<P: PacketBuf>(
    pkt: &mut P,
    s: &StatelessPacket,
    state: &ForwardingState,
) -> Option<(u16, BackendId)> {
    forward(pkt, s, state)
}

/// The packet forwarded to its Maglev backend: its egress port and
/// backend, or None (untouched: the general stage 2 decides). Inlined
/// into the loop of a burst whose stage 1 learnt the stateless rule
/// (`BurstStages::forward_stateless`).
#[inline(always)]
pub(crate) fn forward<P: PacketBuf>(
    pkt: &mut P,
    s: &StatelessPacket,
    state: &ForwardingState,
) -> Option<(u16, BackendId)> {
    let service = state.service(s.service)?;
    // ZA-3: a service with zonal tables picks one by the client's zone.
    let [table] = service.tables.as_slice() else {
        return None;
    };
    let id = table.lookup(s.hash)?;
    let layout = s.layout();
    let port = match state.lane_backends.header(id) {
        Some(header) => {
            if !header.apply(pkt, &layout, s.hash) {
                return None;
            }
            header.port
        }
        None => established::encapsulate_unbuilt(pkt, layout, id, s.service, state, |_, _| s.hash)?,
    };
    Some((port, id))
}
