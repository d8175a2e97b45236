//! `quic-peer`: a QUIC server issuing QUIC-LB connection IDs, and a client
//! whose connections change source port and address mid-transfer, for
//! sluice's live QUIC-LB test (scripts/e2e/quic_lb.py).

// A binary: nothing in it is reachable from outside, so the workspace's
// `unreachable_pub` would only ask `pub` to be spelt `pub(crate)`.
#![allow(unreachable_pub)]

mod cid;
mod client;
mod server;
mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sluice_core::quic_lb::cid::CidLengths;

#[derive(Parser)]
#[command(
    name = "quic-peer",
    about = "QUIC server and client for sluice's QUIC-LB live test"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Answer requests with this server's name and a payload.
    Server(ServerArgs),
    /// Connections that migrate mid-transfer; prints a JSON report.
    Client(ClientArgs),
}

#[derive(Args)]
struct ServerArgs {
    /// Address and UDP port to listen on (the VIP, for direct server return).
    #[arg(long)]
    listen: SocketAddr,
    /// Put in every answer.
    #[arg(long)]
    name: String,
    /// Issue quinn's own random connection IDs instead of QUIC-LB ones.
    #[arg(long, conflicts_with_all = ["server_id", "key", "next_config_id"])]
    random_cids: bool,
    #[command(flatten)]
    lb: LbArgs,
    /// Config rotation: the config id to switch to when --switch-file
    /// appears (same lengths and server ID).
    #[arg(long, requires = "switch_file")]
    next_config_id: Option<u8>,
    /// The next configuration's key (32 hex digits); none: plaintext.
    #[arg(long, requires = "next_config_id")]
    next_key: Option<String>,
    #[arg(long, requires = "next_config_id")]
    switch_file: Option<PathBuf>,
    /// Connection IDs are retired and replaced after this long (ms);
    /// 0: never.
    #[arg(long, default_value_t = 0)]
    cid_lifetime_ms: u64,
    #[arg(long, default_value_t = 10_000)]
    idle_timeout_ms: u64,
}

#[derive(Args)]
struct LbArgs {
    /// The config rotation bits (0–6).
    #[arg(long, default_value_t = 0)]
    config_id: u8,
    #[arg(long, default_value_t = 3)]
    server_id_length: u8,
    #[arg(long, default_value_t = 6)]
    nonce_length: u8,
    /// This server's ID, server-id-length bytes in hex.
    #[arg(long, required_unless_present = "random_cids")]
    server_id: Option<String>,
    /// AES-128 key, 32 hex digits: encrypted connection IDs.
    #[arg(long)]
    key: Option<String>,
}

#[derive(Args)]
struct ClientArgs {
    /// The service: VIP:PORT.
    #[arg(long)]
    connect: SocketAddr,
    /// Source address of the connections.
    #[arg(long)]
    bind: IpAddr,
    /// Source address they move to at two thirds of the duration.
    #[arg(long)]
    rebind_to: IpAddr,
    #[arg(long, default_value_t = 24)]
    connections: usize,
    /// Seconds of requests per connection.
    #[arg(long, default_value_t = 9.0)]
    duration: f64,
    /// A request unanswered after this long (ms) ends its connection.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
    /// Payload bytes asked for per request.
    #[arg(long, default_value_t = 65_536)]
    size: usize,
    #[arg(long, default_value_t = 20)]
    pause_ms: u64,
    #[arg(long, default_value_t = 10_000)]
    idle_timeout_ms: u64,
}

fn server_options(a: ServerArgs) -> Result<server::Options, String> {
    let ms = Duration::from_millis;
    let mut o = server::Options {
        listen: a.listen,
        name: a.name,
        quic_lb: None,
        cid_lifetime: (a.cid_lifetime_ms > 0).then(|| ms(a.cid_lifetime_ms)),
        switch: None,
        idle_timeout: ms(a.idle_timeout_ms),
    };
    if a.random_cids {
        return Ok(o);
    }
    let lengths = |config_id| {
        CidLengths::new(config_id, a.lb.server_id_length, a.lb.nonce_length)
            .map_err(|e| e.to_string())
    };
    let key = |k: &Option<String>| k.as_deref().map(cid::parse_key).transpose();
    let sid = cid::parse_hex(a.lb.server_id.as_deref().unwrap_or_default())?;
    o.quic_lb = Some(cid::ServerConfig::new(
        lengths(a.lb.config_id)?,
        sid.clone(),
        key(&a.lb.key)?,
    )?);
    if let (Some(next), Some(path)) = (a.next_config_id, a.switch_file) {
        let config = cid::ServerConfig::new(lengths(next)?, sid, key(&a.next_key)?)?;
        o.switch = Some((path, config));
    }
    Ok(o)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("quic-peer: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.mode {
        Mode::Server(a) => server_options(a).and_then(|o| runtime.block_on(server::run(o))),
        Mode::Client(a) => {
            let ms = Duration::from_millis;
            let o = client::Options {
                connect: a.connect,
                bind: a.bind,
                rebind_to: a.rebind_to,
                connections: a.connections,
                duration: Duration::from_secs_f64(a.duration),
                timeout: ms(a.timeout_ms),
                size: a.size,
                pause: ms(a.pause_ms),
                idle_timeout: ms(a.idle_timeout_ms),
            };
            runtime.block_on(client::run(o)).map(|report| {
                println!("{report}");
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quic-peer: {e}");
            ExitCode::FAILURE
        }
    }
}
