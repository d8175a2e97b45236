//! The socket of a data-path probe: an ordinary kernel socket from a
//! port's address to the VIP, marked so that the kernel routes it through
//! that port's TAP (`crate::probe_routes`), and registered in the workers'
//! [`ProbeTable`] with the backend it is for before it sends anything —
//! the workers then encapsulate its packets to that backend
//! (`sluice_core::probe_path`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use sluice_core::ids::BackendId;
use sluice_core::probe_path::{ProbeProto, ProbeTable, Ticket};
use sluice_core::snapshot::{ForwardingState, SnapshotCell};
use sluice_core::wire::proto::{TCP, UDP};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::driver::Transport;

/// What data-path probes need: the table the workers read, and the
/// published snapshot, which says which backend a VIP's probe is for and
/// by which port it leaves.
#[derive(Clone, Debug)]
pub struct DataPathContext {
    pub probes: Arc<ProbeTable>,
    pub snapshots: Arc<SnapshotCell>,
}

/// The first firewall mark of probe sockets: port `i`'s probes carry
/// `PROBE_MARK_BASE + i`, which the kernel's rule for it sends to table
/// [`PROBE_TABLE_BASE`]` + i`, whose routes lead into the port's TAP.
pub const PROBE_MARK_BASE: u32 = 0x5c1c_0000;
/// The first routing table of probe routes (one per port with a TAP).
pub const PROBE_TABLE_BASE: u32 = 0x5c1c_0000;

/// Where one probe socket goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The backend, by its id in the snapshot.
    pub backend: BackendId,
    /// The egress port's address of the VIP's family.
    pub source: IpAddr,
    /// The mark that routes it through the egress port's TAP.
    pub mark: u32,
}

/// The backend at `backend` of the service whose rule takes `protocol`
/// to `vip` port `port`, and how a probe to `to` leaves; None when the
/// snapshot has no such backend, or its egress port no address of `to`'s
/// family.
pub fn resolve(
    state: &ForwardingState,
    vip: SocketAddr,
    protocol: u8,
    backend: IpAddr,
    to: IpAddr,
) -> Option<Resolved> {
    let rule = state
        .rules
        .lookup(vip.ip(), protocol, Some(vip.port()))
        .ok()?;
    let service = state.service(rule.service)?;
    let b = service
        .backends
        .iter()
        .filter_map(|&id| state.backend(id))
        .find(|b| b.address == backend)?;
    let port = state.ports.get(usize::from(b.egress.port))?;
    let source = match to {
        IpAddr::V4(_) => IpAddr::V4(port.ipv4?),
        IpAddr::V6(_) => IpAddr::V6(port.ipv6?),
    };
    Some(Resolved {
        backend: b.id,
        source,
        mark: PROBE_MARK_BASE + u32::from(b.egress.port),
    })
}

/// A probe socket opened and registered: the socket (non-blocking,
/// connecting to the VIP) and its registration in the workers' table.
pub struct Opened {
    pub socket: Socket,
    pub ticket: Ticket,
}

/// Opens the socket of a run of a data-path probe of `backend` through
/// `vip`: bound to the egress port's address, marked, registered in the
/// table, then connecting (a stream) or connected (a datagram). None when
/// the snapshot does not say where it goes: the run is then not routed.
pub fn open(
    ctx: &DataPathContext,
    transport: Transport,
    vip: SocketAddr,
    backend: IpAddr,
) -> io::Result<Option<Opened>> {
    open_to(ctx, transport, vip, backend, vip, None)
}

/// [`open`], connecting to `to` instead of the VIP: the packets still
/// travel encapsulated as `vip`'s service sends them to `backend`, with
/// `to` as their inner destination (`sluice doctor` sends to the
/// backend's own address this way, to tell a tunnel the backend drops
/// from a VIP it does not hold). A stream's `mss`, when given, bounds the
/// segments both ways (`TCP_MAXSEG` before the handshake).
pub fn open_to(
    ctx: &DataPathContext,
    transport: Transport,
    vip: SocketAddr,
    backend: IpAddr,
    to: SocketAddr,
    mss: Option<u32>,
) -> io::Result<Option<Opened>> {
    let (ty, protocol, proto) = match transport {
        Transport::Handshake | Transport::Stream => (Type::STREAM, Protocol::TCP, ProbeProto::Tcp),
        Transport::Datagram => (Type::DGRAM, Protocol::UDP, ProbeProto::Udp),
    };
    let ip_proto = if proto == ProbeProto::Tcp { TCP } else { UDP };
    let Some(via) = resolve(&ctx.snapshots.load(), vip, ip_proto, backend, to.ip()) else {
        return Ok(None);
    };
    let socket = Socket::new(Domain::for_address(to), ty, Some(protocol))?;
    socket.set_nonblocking(true)?;
    socket.set_mark(via.mark)?;
    if let (Some(mss), Type::STREAM) = (mss, ty) {
        socket.set_mss(mss)?;
    }
    socket.bind(&SockAddr::from(SocketAddr::new(via.source, 0)))?;
    let port = socket
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("probe socket without a local port"))?;
    let ticket = ctx.probes.register(proto, port, via.backend);
    match socket.connect(&SockAddr::from(to)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => {
            ctx.probes.release(ticket);
            return Err(e);
        }
    }
    Ok(Some(Opened { socket, ticket }))
}
