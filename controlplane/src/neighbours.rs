//! Egress port and next-hop MAC of every backend, from the kernel's route
//! and neighbour tables (the appliance's addresses live on the exception
//! path's TAPs, so the kernel routes and resolves exactly as the
//! dataplane must forward).
//!
//! A thread asks the kernel with `ip -j route get` (per backend, cached for
//! [`ROUTE_TTL`]) and `ip -j neigh show` (the whole table, once a round),
//! and publishes a map backend address → [`Egress`]. A backend whose next
//! hop has no usable entry is published unresolved (the dataplane drops its
//! packets under `next_hop_unresolved`) and resolution is triggered by
//! sending an empty UDP datagram to the backend's discard port: the kernel
//! resolves the next hop to send it. The same nudge keeps a STALE entry
//! confirmed, since the dataplane's own traffic never passes the kernel.
//!
//! `ip` is the first step the design allows; a netlink socket would notice
//! changes without polling.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;
use sluice_core::backend::Egress;

use crate::exception::IpCommandError;

/// Round interval while every backend is resolved.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Round interval while some backend is unresolved: first packets wait on it.
pub const REFRESH_UNRESOLVED: Duration = Duration::from_millis(100);
/// How long a route lookup is reused.
pub const ROUTE_TTL: Duration = Duration::from_secs(10);
/// The discard port (RFC 863): the resolution nudge's destination.
const DISCARD_PORT: u16 = 9;

/// The resolver thread's handle.
pub struct NeighbourResolver {
    targets: Arc<Mutex<Vec<IpAddr>>>,
    /// The latest resolution of every target.
    pub table: Arc<Mutex<HashMap<IpAddr, Egress>>>,
    /// One message per change of `table`.
    pub events: Receiver<()>,
    stop: Sender<()>,
}

impl std::fmt::Debug for NeighbourResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NeighbourResolver").finish_non_exhaustive()
    }
}

impl Drop for NeighbourResolver {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

impl NeighbourResolver {
    /// Starts the thread. `taps[i]` is port i's TAP interface, if any: a
    /// route through it means "egress on port i".
    pub fn spawn(taps: Vec<Option<String>>) -> std::io::Result<Self> {
        let targets = Arc::new(Mutex::new(Vec::new()));
        let table = Arc::new(Mutex::new(HashMap::new()));
        let (events_tx, events) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        let (t, tb) = (Arc::clone(&targets), Arc::clone(&table));
        thread::Builder::new()
            .name("sluice-neigh".into())
            .spawn(move || resolver_loop(&taps, &t, &tb, &events_tx, &stop_rx))?;
        Ok(Self {
            targets,
            table,
            events,
            stop,
        })
    }

    /// The backend addresses to resolve (replaces the previous set).
    pub fn set_targets(&self, mut addrs: Vec<IpAddr>) {
        addrs.sort_unstable();
        addrs.dedup();
        *self.targets.lock().unwrap_or_else(|p| p.into_inner()) = addrs;
    }
}

fn resolver_loop(
    taps: &[Option<String>],
    targets: &Mutex<Vec<IpAddr>>,
    table: &Mutex<HashMap<IpAddr, Egress>>,
    events: &Sender<()>,
    stop: &Receiver<()>,
) {
    let mut routes: HashMap<IpAddr, (Instant, Result<Route, LookupError>)> = HashMap::new();
    let mut nudger = Nudger::default();
    // The last warning per backend, so each reason is logged once.
    let mut warned: HashMap<IpAddr, String> = HashMap::new();
    loop {
        let addrs = targets.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // A failed lookup is retried next round; a route is reused a while.
        routes.retain(|a, (at, r)| addrs.contains(a) && r.is_ok() && at.elapsed() < ROUTE_TTL);
        let neighbours = neighbour_table().unwrap_or_default();
        let mut next = HashMap::with_capacity(addrs.len());
        let mut unresolved = false;
        for &addr in &addrs {
            let (_, route) = routes
                .entry(addr)
                .or_insert_with(|| (Instant::now(), route_get(addr)));
            let egress = match resolve(addr, route.as_ref(), taps, &neighbours) {
                Ok((egress, fresh)) => {
                    if warned.remove(&addr).is_some() {
                        crate::info!(
                            "sluice: backend {addr}: next hop resolved: {}",
                            egress
                                .next_hop_mac
                                .map_or("-".into(), |m| crate::config::mac_text(&m))
                        );
                    }
                    if !fresh {
                        nudger.nudge(addr);
                    }
                    egress
                }
                Err((egress, why)) => {
                    let why = why.to_string();
                    if warned.get(&addr) != Some(&why) {
                        crate::warn!("sluice: backend {addr}: next hop unresolved: {why}");
                        warned.insert(addr, why);
                    }
                    unresolved = true;
                    nudger.nudge(addr);
                    egress
                }
            };
            next.insert(addr, egress);
        }
        {
            let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
            if *t != next {
                *t = next;
                let _ = events.send(());
            }
        }
        let wait = if unresolved {
            REFRESH_UNRESOLVED
        } else {
            REFRESH
        };
        match stop.recv_timeout(wait) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Why a backend's next hop has no MAC to send to.
#[derive(Debug, thiserror::Error)]
enum Unresolved<'a> {
    #[error("no route: {0}")]
    NoRoute(&'a LookupError),
    #[error(
        "the kernel routes it via {:?}, which is no port's TAP; \
         give the port an address on the backend's subnet or a route via it",
        .dev.unwrap_or("nothing")
    )]
    NotThroughATap { dev: Option<&'a str> },
    #[error("next hop {next_hop}: no neighbour entry yet")]
    NoNeighbour { next_hop: IpAddr },
    #[error("next hop {next_hop}: neighbour state {}", .state.join(","))]
    NeighbourState {
        next_hop: IpAddr,
        state: &'a [String],
    },
}

/// The egress of `addr`: Ok((egress, entry is fresh)) when the next hop's
/// MAC is known, Err((egress without MAC, why)) otherwise.
fn resolve<'a>(
    addr: IpAddr,
    route: Result<&'a Route, &'a LookupError>,
    taps: &[Option<String>],
    neighbours: &'a [Neighbour],
) -> Result<(Egress, bool), (Egress, Unresolved<'a>)> {
    let egress = |port: usize, next_hop_mac: Option<[u8; 6]>| Egress {
        port: port as u16,
        next_hop_mac,
    };
    let route = route.map_err(|e| (egress(0, None), Unresolved::NoRoute(e)))?;
    let dev = route.dev.as_deref();
    let Some(port) = dev.and_then(|d| taps.iter().position(|t| t.as_deref() == Some(d))) else {
        return Err((egress(0, None), Unresolved::NotThroughATap { dev }));
    };
    let next_hop = route.gateway.unwrap_or(addr);
    let entry = neighbours
        .iter()
        .find(|n| n.dst == next_hop && n.dev.as_deref() == dev);
    match entry.map(|n| (n, n.usable_mac())) {
        Some((n, Some(mac))) => Ok((egress(port, Some(mac)), n.is_fresh())),
        Some((n, None)) => Err((
            egress(port, None),
            Unresolved::NeighbourState {
                next_hop,
                state: &n.state,
            },
        )),
        None => Err((egress(port, None), Unresolved::NoNeighbour { next_hop })),
    }
}

/// Sends the resolution nudges, at most one per target per second.
#[derive(Default)]
struct Nudger {
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
    last: HashMap<IpAddr, Instant>,
}

impl Nudger {
    fn nudge(&mut self, addr: IpAddr) {
        if self
            .last
            .get(&addr)
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last.insert(addr, Instant::now());
        let sock = match addr {
            IpAddr::V4(_) => &mut self.v4,
            IpAddr::V6(_) => &mut self.v6,
        };
        if sock.is_none() {
            let any: SocketAddr = match addr {
                IpAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
                IpAddr::V6(_) => ([0u16; 8], 0).into(),
            };
            *sock = UdpSocket::bind(any).ok();
        }
        if let Some(s) = sock {
            // Errors (no route, EHOSTUNREACH after failed resolution) are
            // what the next round reports; nothing to do here.
            let _ = s.send_to(&[], SocketAddr::new(addr, DISCARD_PORT));
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
struct Route {
    dev: Option<String>,
    gateway: Option<IpAddr>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
struct Neighbour {
    dst: IpAddr,
    dev: Option<String>,
    lladdr: Option<String>,
    #[serde(default)]
    state: Vec<String>,
}

impl Neighbour {
    /// The MAC, when the entry may be used to send (RFC 4861 §7.3.2: STALE
    /// may send; the kernel re-confirms it).
    fn usable_mac(&self) -> Option<[u8; 6]> {
        let usable = self.state.iter().any(|s| {
            matches!(
                s.as_str(),
                "REACHABLE" | "STALE" | "DELAY" | "PROBE" | "PERMANENT" | "NOARP"
            )
        });
        usable.then(|| self.lladdr.as_deref().and_then(parse_mac))?
    }

    fn is_fresh(&self) -> bool {
        self.state
            .iter()
            .any(|s| matches!(s.as_str(), "REACHABLE" | "PERMANENT" | "NOARP"))
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Why asking the kernel for a route or its neighbour table failed.
#[derive(Debug, thiserror::Error)]
enum LookupError {
    #[error(transparent)]
    Ip(#[from] IpCommandError),
    /// `ip -j` printed something other than the JSON array it prints.
    #[error("ip -j {what}: unexpected output: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    /// `ip -j route get` succeeded with an empty array.
    #[error("ip -j route get: no route in the answer")]
    Empty,
}

fn ip_json(args: &[&str]) -> Result<Vec<u8>, IpCommandError> {
    let mut all = vec!["-j"];
    all.extend_from_slice(args);
    crate::exception::run_ip(&all)
}

fn route_get(addr: IpAddr) -> Result<Route, LookupError> {
    let out = ip_json(&["route", "get", &addr.to_string()])?;
    parse_route(&out)
}

fn parse_route(json: &[u8]) -> Result<Route, LookupError> {
    let routes: Vec<Route> = serde_json::from_slice(json).map_err(|source| LookupError::Json {
        what: "route get",
        source,
    })?;
    routes.into_iter().next().ok_or(LookupError::Empty)
}

fn neighbour_table() -> Result<Vec<Neighbour>, LookupError> {
    parse_neighbours(&ip_json(&["neigh", "show"])?)
}

fn parse_neighbours(json: &[u8]) -> Result<Vec<Neighbour>, LookupError> {
    // Entries without a parsable dst (none in practice) are skipped, not fatal.
    let raw: Vec<serde_json::Value> =
        serde_json::from_slice(json).map_err(|source| LookupError::Json {
            what: "neigh show",
            source,
        })?;
    Ok(raw
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taps() -> Vec<Option<String>> {
        vec![None, Some("sl-b".into())]
    }

    #[test]
    fn parses_ip_route_get_with_and_without_gateway() {
        let direct = br#"[{"dst":"10.0.0.11","dev":"sl-b","prefsrc":"10.0.0.2","flags":[],"uid":0,"cache":[]}]"#;
        let r = parse_route(direct).unwrap();
        assert_eq!(r.dev.as_deref(), Some("sl-b"));
        assert_eq!(r.gateway, None);
        let via = br#"[{"dst":"10.9.0.1","gateway":"10.0.0.1","dev":"sl-b","prefsrc":"10.0.0.2","flags":[],"uid":0,"cache":[]}]"#;
        assert_eq!(
            parse_route(via).unwrap().gateway,
            Some("10.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn resolves_through_the_tap_and_the_gateway() {
        let route = Route {
            dev: Some("sl-b".into()),
            gateway: Some("10.0.0.1".parse().unwrap()),
        };
        let neigh = parse_neighbours(
            br#"[{"dst":"10.0.0.1","dev":"sl-b","lladdr":"02:00:00:00:00:01","state":["STALE"]},
                 {"dst":"10.0.0.9","dev":"sl-b","state":["FAILED"]}]"#,
        )
        .unwrap();
        let (egress, fresh) =
            resolve("10.9.0.1".parse().unwrap(), Ok(&route), &taps(), &neigh).unwrap();
        assert_eq!(egress.port, 1);
        assert_eq!(egress.next_hop_mac, Some([2, 0, 0, 0, 0, 1]));
        assert!(!fresh, "STALE is usable but asks for a nudge");

        let direct = Route {
            dev: Some("sl-b".into()),
            gateway: None,
        };
        let (egress, why) =
            resolve("10.0.0.9".parse().unwrap(), Ok(&direct), &taps(), &neigh).unwrap_err();
        assert_eq!(egress.next_hop_mac, None);
        assert_eq!(why.to_string(), "next hop 10.0.0.9: neighbour state FAILED");
    }

    #[test]
    fn a_route_outside_the_taps_is_unresolved_and_says_why() {
        let route = Route {
            dev: Some("eth0".into()),
            gateway: None,
        };
        let (_, why) = resolve("192.0.2.1".parse().unwrap(), Ok(&route), &taps(), &[]).unwrap_err();
        assert!(why.to_string().contains("via \"eth0\""), "{why}");
    }

    /// A failed route lookup says what `ip` answered, not only "no route".
    #[test]
    fn a_failed_route_lookup_says_what_ip_answered() {
        let failed = LookupError::Ip(IpCommandError::Refused {
            command: "-j route get 198.51.100.1".into(),
            stderr: "RTNETLINK answers: Network is unreachable".into(),
        });
        let (egress, why) =
            resolve("198.51.100.1".parse().unwrap(), Err(&failed), &taps(), &[]).unwrap_err();
        assert_eq!(egress.next_hop_mac, None);
        assert_eq!(
            why.to_string(),
            "no route: ip -j route get 198.51.100.1: RTNETLINK answers: Network is unreachable"
        );
        assert!(matches!(parse_route(b"[]"), Err(LookupError::Empty)));
        assert!(matches!(
            parse_route(b"nope"),
            Err(LookupError::Json {
                what: "route get",
                ..
            })
        ));
    }

    #[test]
    fn parses_macs() {
        assert_eq!(
            parse_mac("02:aa:00:00:00:0f"),
            Some([2, 0xaa, 0, 0, 0, 0xf])
        );
        assert_eq!(parse_mac("02:aa:00:00:00"), None);
        assert_eq!(parse_mac("02:aa:00:00:00:0f:01"), None);
    }
}
