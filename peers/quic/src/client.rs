//! Client mode: K connections, each on an endpoint (a UDP socket) of its
//! own, each looping requests until the duration is over. At a third of
//! the duration every endpoint rebinds to a new source port, at two thirds
//! to a new source address: the connections migrate in the middle of
//! their transfers. A connection survives when every request it made was
//! answered within the timeout, requests made after each move were
//! answered, and one server answered them all.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::{ClientConfig, Endpoint, EndpointConfig, TokioRuntime, TransportConfig};
use serde_json::json;

use crate::tls;

pub struct Options {
    pub connect: SocketAddr,
    pub bind: IpAddr,
    pub rebind_to: IpAddr,
    pub connections: usize,
    pub duration: Duration,
    pub timeout: Duration,
    pub size: usize,
    /// Between requests, so many connections share the CPU with the rest.
    pub pause: Duration,
    pub idle_timeout: Duration,
}

/// Where a connection is in the run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    First,
    NewPort,
    NewAddress,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::First, Phase::NewPort, Phase::NewAddress];

    /// The phase after this one (the last one's is itself).
    fn next(self) -> Phase {
        match self {
            Phase::First => Phase::NewPort,
            Phase::NewPort | Phase::NewAddress => Phase::NewAddress,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::First => "first",
            Phase::NewPort => "new_port",
            Phase::NewAddress => "new_address",
        }
    }
}

#[derive(Debug, Default)]
struct Report {
    /// Requests answered, by the phase they were made in.
    answered: BTreeMap<&'static str, u64>,
    servers: BTreeSet<String>,
    /// The first failure: the phase and what happened.
    failure: Option<(Phase, String)>,
    /// The local addresses the connection used, in order.
    local: Vec<String>,
}

impl Report {
    fn survived(&self) -> bool {
        self.failure.is_none()
            && self.servers.len() == 1
            && Phase::ALL
                .iter()
                .all(|p| self.answered.get(p.name()).copied().unwrap_or(0) > 0)
    }

    fn to_json(&self, id: usize) -> serde_json::Value {
        json!({
            "id": id,
            "survived": self.survived(),
            "servers": self.servers,
            "answered": self.answered,
            "failed_in": self.failure.as_ref().map(|(p, _)| p.name()),
            "error": self.failure.as_ref().map(|(_, e)| e.clone()),
            "local": self.local,
        })
    }
}

pub async fn run(o: Options) -> Result<serde_json::Value, String> {
    let o = Arc::new(o);
    let mut transport = TransportConfig::default();
    transport.max_idle_timeout(Some(
        o.idle_timeout
            .try_into()
            .map_err(|e| format!("idle timeout: {e}"))?,
    ));
    let mut config = ClientConfig::new(tls::client_crypto()?);
    config.transport_config(Arc::new(transport));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let socket = UdpSocket::bind(SocketAddr::new(o.bind, 0))
            .map_err(|e| format!("bind {}: {e}", o.bind))?;
        let mut endpoint = Endpoint::new(
            EndpointConfig::default(),
            None,
            socket,
            Arc::new(TokioRuntime),
        )
        .map_err(|e| format!("endpoint: {e}"))?;
        endpoint.set_default_client_config(config.clone());
        tasks.push(tokio::spawn(connection(endpoint, o.clone(), start)));
    }
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(task.await.map_err(|e| format!("connection task: {e}"))?);
    }
    let lost = |phase: Phase| {
        reports
            .iter()
            .filter(|r| r.failure.as_ref().is_some_and(|(p, _)| *p == phase))
            .count()
    };
    let mut per_server: BTreeMap<String, usize> = BTreeMap::new();
    for r in &reports {
        for s in &r.servers {
            *per_server.entry(s.clone()).or_default() += 1;
        }
    }
    Ok(json!({
        "connections": reports.len(),
        "survived": reports.iter().filter(|r| r.survived()).count(),
        "lost": reports.iter().filter(|r| !r.survived()).count(),
        "lost_first": lost(Phase::First),
        "lost_new_port": lost(Phase::NewPort),
        "lost_new_address": lost(Phase::NewAddress),
        "more_than_one_server": reports.iter().filter(|r| r.servers.len() > 1).count(),
        "requests": reports.iter().flat_map(|r| r.answered.values()).sum::<u64>(),
        "connections_per_server": per_server,
        "seconds": start.elapsed().as_secs_f64(),
        "details": reports.iter().enumerate().map(|(i, r)| r.to_json(i)).collect::<Vec<_>>(),
    }))
}

async fn connection(endpoint: Endpoint, o: Arc<Options>, start: Instant) -> Report {
    let mut report = Report::default();
    let local = |e: &Endpoint| e.local_addr().map(|a| a.to_string()).unwrap_or_default();
    report.local.push(local(&endpoint));
    let connecting = match endpoint.connect(o.connect, "localhost") {
        Ok(c) => c,
        Err(e) => {
            report.failure = Some((Phase::First, format!("connect: {e}")));
            return report;
        }
    };
    let connection = match tokio::time::timeout(o.timeout, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            report.failure = Some((Phase::First, format!("handshake: {e}")));
            return report;
        }
        Err(_) => {
            report.failure = Some((Phase::First, "handshake timed out".into()));
            return report;
        }
    };
    let end = start + o.duration;
    let moves = [
        (start + o.duration / 3, Phase::NewPort, o.bind),
        (start + o.duration * 2 / 3, Phase::NewAddress, o.rebind_to),
    ];
    let mut last = Phase::First;
    // The moves happen on their own schedule, while a request is in
    // flight; each request is counted in the phase it ended in.
    let rebinder = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let mut locals = Vec::new();
            for (at, _, addr) in moves {
                tokio::time::sleep_until(at.into()).await;
                let moved = UdpSocket::bind(SocketAddr::new(addr, 0))
                    .map_err(|e| format!("bind {addr}: {e}"))
                    .and_then(|s| endpoint.rebind(s).map_err(|e| format!("rebind: {e}")));
                locals.push(moved.map(|()| local(&endpoint)));
            }
            locals
        })
    };
    let phase_at = |t: Instant| {
        moves
            .iter()
            .filter(|(at, _, _)| t >= *at)
            .map(|&(_, p, _)| p)
            .max()
            .unwrap_or(Phase::First)
    };
    // The start phase of the last request answered: it proves the
    // connection survived the moves before it.
    let mut proven = Phase::First;
    while Instant::now() < end {
        let started = phase_at(Instant::now());
        let result = tokio::time::timeout(o.timeout, request(&connection, o.size)).await;
        // An answer counts in the phase its request started in; a failure
        // is blamed on the first move after the last proven phase (its
        // timeout may expire after the next move).
        let phase = match &result {
            Ok(Ok(_)) => {
                proven = started;
                started
            }
            _ => phase_at(Instant::now()).min(proven.next()),
        };
        last = phase;
        match result {
            Ok(Ok(server)) => {
                *report.answered.entry(phase.name()).or_default() += 1;
                report.servers.insert(server);
            }
            Ok(Err(e)) => {
                report.failure = Some((phase, e));
                break;
            }
            Err(_) => {
                report.failure = Some((phase, format!("no answer within {:?}", o.timeout)));
                break;
            }
        }
        tokio::time::sleep(o.pause).await;
    }
    match rebinder.await {
        Ok(locals) => {
            for l in locals {
                match l {
                    Ok(addr) => report.local.push(addr),
                    Err(e) if report.failure.is_none() => {
                        report.failure = Some((last, e));
                    }
                    Err(_) => {}
                }
            }
        }
        Err(e) => report.failure = Some((last, format!("rebind task: {e}"))),
    }
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    report
}

/// One request: the server's name from the answer, after checking its
/// length.
async fn request(connection: &quinn::Connection, size: usize) -> Result<String, String> {
    let (mut send, mut recv) = connection
        .open_bi()
        .await
        .map_err(|e| format!("open stream: {e}"))?;
    send.write_all(size.to_string().as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    send.finish().map_err(|e| format!("finish: {e}"))?;
    let answer = recv
        .read_to_end(size + 256)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let newline = answer
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("answer without a name")?;
    if answer.len() - newline - 1 != size {
        return Err(format!(
            "answer of {} payload bytes, asked for {size}",
            answer.len() - newline - 1
        ));
    }
    Ok(String::from_utf8_lossy(&answer[..newline]).into_owned())
}
