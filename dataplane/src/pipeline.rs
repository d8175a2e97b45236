//! The per-packet decision: parse → classify → select → encapsulate.
//! Pure: a function of (bytes, snapshot, worker context). No allocation,
//! no locks, no panics.

use crate::drop_reason::DropReason;
use crate::packet::PacketBuf;
use crate::snapshot::{BackendId, ForwardingState, Millis};

/// What the worker does with a packet after [`process`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) packet on `port`; it went to `backend`.
    Forward { port: u16, backend: BackendId },
    /// Addressed to the appliance itself: hand to the exception path (AP-4).
    Punt,
    /// Drop and count under the reason.
    Drop(DropReason),
}

/// Worker-local state the pipeline may read and update.
#[derive(Debug, Default)]
pub struct PipelineCtx {
    /// Coarse time, read once per burst.
    pub now: Millis,
}

/// Decides what to do with one packet received on `rx_port`, rewriting it in
/// place when it is forwarded.
pub fn process<P: PacketBuf>(
    pkt: &mut P,
    rx_port: u16,
    state: &ForwardingState,
    ctx: &mut PipelineCtx,
) -> Verdict {
    let _ = (pkt, rx_port, state, ctx);
    Verdict::Drop(DropReason::NotForUs)
}
