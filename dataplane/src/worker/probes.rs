//! Data-path health probes where the workers meet them (the packet logic
//! is `sluice_core::probe_path`'s): the kernel's packets from a port's TAP,
//! of which a probe socket's leave encapsulated to its backend, and the
//! packets for the appliance, among which a probe's answers are noted.
//! Neither is on a client packet's path.

use sluice_core::drop_reason::DropReason;
use sluice_core::packet::PacketBuf as _;
use sluice_core::probe_path::{self, Outbound, ProbeTable};
use sluice_core::snapshot::ForwardingState;
use sluice_core::wire::{parse, Parsed};

use crate::dpdk::Mbuf;

/// What a frame the kernel sent on port `port`'s TAP is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum KernelFrame {
    /// The kernel's own: sent on the port as it is (tagged on a trunk).
    Kernel,
    /// A probe's, now encapsulated to its backend out of this port: sent
    /// as it is now (its Ethernet header is the port's, tag included).
    Probe,
    /// A probe's that cannot be sent: dropped under the reason.
    Dropped(DropReason),
}

/// Sorts one frame from the TAP of port `port`; a probe's is encapsulated
/// in place.
pub(super) fn kernel_frame(
    m: &mut Mbuf,
    port: usize,
    state: &ForwardingState,
    probes: &ProbeTable,
) -> KernelFrame {
    if !probes.is_active() {
        return KernelFrame::Kernel;
    }
    let info = match parse(m.data()) {
        Ok(Parsed::Ip(info)) if probe_path::is_port_address(state, info.src) => info,
        _ => return KernelFrame::Kernel,
    };
    match probe_path::steer_outbound(m, &info, state, probes) {
        Outbound::NotProbe => KernelFrame::Kernel,
        Outbound::Deliver { port: out } if usize::from(out) == port => KernelFrame::Probe,
        // The probe's backend leaves by another port than the TAP it came
        // through: its socket was routed by a port that no longer reaches
        // it (a reload moved the backend).
        Outbound::Deliver { .. } => KernelFrame::Dropped(DropReason::ProbeWrongPort),
        Outbound::Drop(reason) => KernelFrame::Dropped(reason),
    }
}

/// A packet for the appliance, on its way to the kernel: an answer to a
/// probe socket is noted with where it came from.
pub(super) fn note_answer(m: &Mbuf, state: &ForwardingState, probes: &ProbeTable) {
    if let Ok(Parsed::Ip(info)) = parse(m.data()) {
        probe_path::note_inbound(&info, state, probes);
    }
}
