//! A backend without a decapsulation device refuses the tunnel out loud:
//! its kernel answers a VXLAN, GENEVE or GUE packet with an ICMP port
//! unreachable for the tunnel's UDP port, a GRE or IPIP packet with a
//! protocol unreachable (ICMPv6: port unreachable, or a parameter problem
//! naming the next header). Those reach the appliance's port address and
//! the workers pass them to its kernel; raw ICMP sockets listening while
//! `sluice doctor` runs collect them, so that a backend with no device is
//! told from one that drops the tunnel's packets silently (another VNI or
//! MAC, a reverse-path filter). Without the privilege of raw sockets the
//! doctor runs on without this distinction.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

/// What a backend refused: the quoted packet's protocol, and its
/// destination port when it was UDP.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Refused {
    pub protocol: u8,
    pub port: Option<u16>,
}

const UDP: u8 = 17;

/// One ICMP error about a packet the appliance sent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Notice {
    /// The destination refused the packet.
    Refused(IpAddr, Refused),
    /// A router could not pass the packet to the destination: its MTU.
    TooBig(IpAddr, u32),
}

/// The ICMP errors heard since [`Listener::start`], by the packet's
/// destination (the backend).
#[derive(Default)]
pub(super) struct Listener {
    heard: Mutex<HashMap<IpAddr, Vec<Refused>>>,
    too_big: Mutex<HashMap<IpAddr, u32>>,
    stop: AtomicBool,
}

impl Listener {
    /// Listens on both families until [`Listener::stop`].
    pub(super) fn start() -> Arc<Listener> {
        let l = Arc::new(Listener::default());
        for (domain, proto) in [
            (Domain::IPV4, Protocol::ICMPV4),
            (Domain::IPV6, Protocol::ICMPV6),
        ] {
            let Ok(socket) = Socket::new(domain, Type::RAW, Some(proto)) else {
                continue;
            };
            if socket
                .set_read_timeout(Some(Duration::from_millis(100)))
                .is_err()
            {
                continue;
            }
            let me = Arc::clone(&l);
            let _ = std::thread::Builder::new()
                .name("doctor-icmp".into())
                .spawn(move || me.listen(&socket, domain == Domain::IPV4));
        }
        l
    }

    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// What `backend` refused so far.
    pub(super) fn refused(&self, backend: IpAddr) -> Vec<Refused> {
        self.heard
            .lock()
            .map(|h| h.get(&backend).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// The smallest MTU a router reported on the way to `backend`.
    pub(super) fn too_big(&self, backend: IpAddr) -> Option<u32> {
        self.too_big.lock().ok()?.get(&backend).copied()
    }

    fn listen(&self, socket: &Socket, v4: bool) {
        let mut buf = [0u8; 1500];
        while !self.stop.load(Ordering::Relaxed) {
            let n = match std::io::Read::read(&mut &*socket, &mut buf) {
                Ok(n) => n,
                Err(_) => continue,
            };
            let bytes = buf.get(..n).unwrap_or_default();
            let parsed = if v4 {
                refusal_v4(bytes)
            } else {
                refusal_v6(bytes)
            };
            match parsed {
                Some(Notice::Refused(to, what)) => {
                    if let Ok(mut heard) = self.heard.lock() {
                        let list = heard.entry(to).or_default();
                        if !list.contains(&what) && list.len() < 8 {
                            list.push(what);
                        }
                    }
                }
                Some(Notice::TooBig(to, mtu)) => {
                    if let Ok(mut heard) = self.too_big.lock() {
                        let least = heard.entry(to).or_insert(mtu);
                        *least = (*least).min(mtu);
                    }
                }
                None => {}
            }
        }
    }
}

/// An IPv4 packet as a raw ICMP socket reads it: a port or protocol
/// unreachable (the refused packet's destination and what it carried),
/// or a fragmentation needed (its destination and the router's MTU).
fn refusal_v4(p: &[u8]) -> Option<Notice> {
    let ihl = usize::from(p.first()? & 0x0f) * 4;
    let icmp = p.get(ihl..)?;
    let (kind, code) = (*icmp.first()?, *icmp.get(1)?);
    // Destination unreachable: protocol (2), port (3), fragmentation
    // needed (4).
    if kind != 3 || !(2..=4).contains(&code) {
        return None;
    }
    let quote = icmp.get(8..)?;
    let qihl = usize::from(quote.first()? & 0x0f) * 4;
    let protocol = *quote.get(9)?;
    let dst: [u8; 4] = quote.get(16..20)?.try_into().ok()?;
    let to = IpAddr::V4(Ipv4Addr::from(dst));
    if code == 4 {
        let mtu = u16::from_be_bytes(icmp.get(6..8)?.try_into().ok()?);
        return Some(Notice::TooBig(to, u32::from(mtu)));
    }
    let port = (protocol == UDP)
        .then(|| udp_dst_port(quote.get(qihl..)?))
        .flatten();
    Some(Notice::Refused(to, Refused { protocol, port }))
}

/// An ICMPv6 message as a raw ICMPv6 socket reads it (no IPv6 header):
/// a port unreachable, a parameter problem at an unknown next header, or
/// a packet too big (with the router's MTU).
fn refusal_v6(icmp: &[u8]) -> Option<Notice> {
    let (kind, code) = (*icmp.first()?, *icmp.get(1)?);
    let refused = (kind == 1 && code == 4) || (kind == 4 && code == 1);
    if !refused && kind != 2 {
        return None;
    }
    let quote = icmp.get(8..)?;
    let protocol = *quote.get(6)?;
    let dst: [u8; 16] = quote.get(24..40)?.try_into().ok()?;
    let to = IpAddr::V6(Ipv6Addr::from(dst));
    if kind == 2 {
        let mtu = u32::from_be_bytes(icmp.get(4..8)?.try_into().ok()?);
        return Some(Notice::TooBig(to, mtu));
    }
    let port = (protocol == UDP)
        .then(|| udp_dst_port(quote.get(40..)?))
        .flatten();
    Some(Notice::Refused(to, Refused { protocol, port }))
}

/// Whether `refused` is the tunnel of `encap`: its UDP port, or its IP
/// protocol.
pub(super) fn is_tunnel(encap: sluice_core::encap::Encapsulation, r: Refused) -> bool {
    use sluice_core::encap::Encapsulation as E;
    match encap {
        E::L2 => false,
        E::Gre(_) => r.protocol == 47,
        E::Ipip(_) => r.protocol == 4 || r.protocol == 41,
        E::Gue(g) => r.port == Some(g.port),
        E::Geneve(g) => r.port == Some(g.port),
        E::Vxlan(v) => r.port == Some(v.port),
    }
}

fn udp_dst_port(udp: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(udp.get(2..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port unreachable quoting a VXLAN packet names its backend and
    /// port, a fragmentation needed / packet too big its MTU; an echo
    /// reply, or a truncated quote, names nothing.
    #[test]
    fn hc_9_a_refused_tunnel_is_read_from_the_icmp_error() {
        let mut p = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 14, 10, 0, 0, 2,
        ];
        p.extend([3, 3, 0, 0, 0, 0, 0, 0]);
        p.extend([
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 14,
        ]);
        p.extend([0xc0, 0x01, 0x12, 0xb5, 0, 0, 0, 0]);
        let to: IpAddr = "10.0.0.14".parse().unwrap();
        let vxlan = Refused {
            protocol: UDP,
            port: Some(4789),
        };
        assert_eq!(refusal_v4(&p), Some(Notice::Refused(to, vxlan)));
        let mut frag_needed = p.clone();
        frag_needed[21] = 4;
        frag_needed[26..28].copy_from_slice(&1400u16.to_be_bytes());
        assert_eq!(refusal_v4(&frag_needed), Some(Notice::TooBig(to, 1400)));
        let mut echo = p.clone();
        echo[20] = 0;
        assert_eq!(refusal_v4(&echo), None);
        assert_eq!(refusal_v4(&p[..40]), None);

        let mut v6 = vec![1, 4, 0, 0, 0, 0, 0, 0];
        let mut quote = vec![0x60, 0, 0, 0, 0, 16, 47, 64];
        quote.extend([0u8; 16]);
        quote.extend("fd99::14".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend(&quote);
        let to: IpAddr = "fd99::14".parse().unwrap();
        let gre = Refused {
            protocol: 47,
            port: None,
        };
        assert_eq!(refusal_v6(&v6), Some(Notice::Refused(to, gre)));
        let mut too_big = v6.clone();
        too_big[0] = 2;
        too_big[1] = 0;
        too_big[4..8].copy_from_slice(&1280u32.to_be_bytes());
        assert_eq!(refusal_v6(&too_big), Some(Notice::TooBig(to, 1280)));
    }
}
