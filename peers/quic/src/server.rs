//! Server mode: accepts connections on one address and answers each
//! bidirectional stream. A request is the number of payload bytes wanted
//! (ASCII decimal); the answer is the server's name, a newline, and that
//! many bytes, so the client knows which server served it.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Endpoint, EndpointConfig, TokioRuntime, TransportConfig};

use crate::cid::{Active, ServerConfig};
use crate::tls;

/// The largest answer a request may ask for.
pub const MAX_PAYLOAD: usize = 16 << 20;

pub struct Options {
    pub listen: SocketAddr,
    pub name: String,
    /// None: quinn's own connection IDs (no QUIC-LB).
    pub quic_lb: Option<ServerConfig>,
    /// Issued IDs are retired after this long (quinn issues new ones).
    pub cid_lifetime: Option<Duration>,
    /// When this file appears, switch to `next` (config rotation).
    pub switch: Option<(PathBuf, ServerConfig)>,
    pub idle_timeout: Duration,
}

pub async fn run(o: Options) -> Result<(), String> {
    let mut endpoint_config = EndpointConfig::default();
    let active = o.quic_lb.clone().map(Active::new);
    if let Some(active) = &active {
        let active = active.clone();
        let lifetime = o.cid_lifetime;
        endpoint_config.cid_generator(move || Box::new(active.generator(lifetime)));
    }
    let mut server_config = quinn::ServerConfig::with_crypto(tls::server_crypto(&o.name)?);
    let mut transport = TransportConfig::default();
    transport.max_idle_timeout(Some(
        o.idle_timeout
            .try_into()
            .map_err(|e| format!("idle timeout: {e}"))?,
    ));
    server_config.transport_config(Arc::new(transport));
    // Clients move (that is what is tested).
    server_config.migration(true);
    let socket = UdpSocket::bind(o.listen).map_err(|e| format!("bind {}: {e}", o.listen))?;
    let endpoint = Endpoint::new(
        endpoint_config,
        Some(server_config),
        socket,
        Arc::new(TokioRuntime),
    )
    .map_err(|e| format!("endpoint: {e}"))?;
    eprintln!(
        "quic-peer server {} on {} ({})",
        o.name,
        o.listen,
        match &o.quic_lb {
            Some(c) => format!("QUIC-LB connection IDs of {} bytes", c.cid_len()),
            None => "quinn's own connection IDs".into(),
        }
    );
    if let (Some(active), Some((path, next))) = (active, o.switch) {
        tokio::spawn(switch_when_present(active, path, next));
    }
    let name: Arc<str> = o.name.into();
    while let Some(incoming) = endpoint.accept().await {
        let name = name.clone();
        tokio::spawn(async move {
            if let Ok(connection) = incoming.await {
                serve(connection, name).await;
            }
        });
    }
    Ok(())
}

async fn switch_when_present(active: Active, path: PathBuf, next: ServerConfig) {
    while !path.exists() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match active.switch(next) {
        Ok(()) => eprintln!("quic-peer: issuing connection IDs of the next configuration"),
        Err(e) => eprintln!("quic-peer: cannot switch: {e}"),
    }
}

async fn serve(connection: quinn::Connection, name: Arc<str>) {
    while let Ok((mut send, mut recv)) = connection.accept_bi().await {
        let name = name.clone();
        tokio::spawn(async move {
            let Ok(request) = recv.read_to_end(32).await else {
                return;
            };
            let size = std::str::from_utf8(&request)
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(0)
                .min(MAX_PAYLOAD);
            let mut answer = Vec::with_capacity(name.len() + 1 + size);
            answer.extend_from_slice(name.as_bytes());
            answer.push(b'\n');
            answer.resize(name.len() + 1 + size, b'q');
            if send.write_all(&answer).await.is_ok() {
                let _ = send.finish();
            }
        });
    }
}
