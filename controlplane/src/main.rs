//! `sluice`: the load balancer appliance's command line.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod run;
#[cfg(feature = "test-hooks")]
mod test_hook;
/// Without the `test-hooks` feature `sluice run` has no test hooks and
/// takes none of their arguments.
#[cfg(not(feature = "test-hooks"))]
mod test_hook {
    #[derive(clap::Args, Clone, Debug, Default)]
    pub struct HookArgs {}
}

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    about = "Kernel-bypass L4 load balancer on DPDK"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the appliance.
    Run {
        /// Configuration file (TOML).
        #[arg(long, short)]
        config: PathBuf,
        /// Stop once no packet has arrived for this many milliseconds
        /// (replaying a pcap, tests, benchmarks).
        #[arg(long, value_name = "MS")]
        exit_on_idle: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// On exit, write the final metrics (Prometheus text) to this file,
        /// or `-` for standard output.
        #[arg(long, value_name = "FILE")]
        metrics_dump: Option<PathBuf>,
        /// Do not serve /metrics over HTTP.
        #[arg(long)]
        no_metrics_server: bool,
        /// Unix socket for `sluice reload` and `sluice status` (mode 0600).
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        #[command(flatten)]
        hooks: test_hook::HookArgs,
        /// Serve no control socket (reload with SIGHUP only).
        #[arg(long)]
        no_control_socket: bool,
        /// DPDK file prefix: names EAL's runtime directory
        /// (/var/run/dpdk/NAME for root) and hugepage files, so DPDK tools
        /// (dpdk-telemetry.py -f NAME, dpdk-dumpcap --file-prefix NAME)
        /// can attach. The systemd unit passes `sluice`; without it each
        /// run gets its own, `sluice-<pid>`. A `--file-prefix` in
        /// dataplane.eal_args takes precedence.
        #[arg(long, value_name = "NAME")]
        file_prefix: Option<String>,
    },
    /// Make the running sluice re-read its configuration file; prints the
    /// diagnostics and exits 2 if the new file is invalid (the running
    /// configuration then stays).
    Reload {
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
    },
    /// Print the running sluice's services and backends (health, weight,
    /// zone, pool, share of the table).
    Status {
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        /// JSON instead: version, uptime, configuration file, reloads and
        /// the latest one's error, per backend its state and packets.
        #[arg(long)]
        json: bool,
    },
    /// Explain what sluice does with a packet: rule, service, hashed fields,
    /// flow hash, table, Maglev slot, every backend's eligibility, the
    /// chosen backend, next hop, encapsulation and MTU outcome. With
    /// --config, offline under assumed health (every backend healthy but
    /// those given to --unhealthy).
    Explain(ExplainArgs),
    /// Validate configuration files; print every error; exit 2 on any.
    CheckConfig {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the BIRD 2 configuration that announces the VIPs of FILE's
    /// [bgp] section; exit 2 when FILE is invalid or has no [bgp].
    BirdConfig { file: PathBuf },
}

#[derive(clap::Args, Debug)]
struct ExplainArgs {
    /// The flow, as its first packet: `tcp 198.51.100.7:40000 ->
    /// 203.0.113.10:80`, `udp [2001:db8::7]:40000 -> [2001:db8:1::10]:53`,
    /// `icmp 198.51.100.7 -> 203.0.113.10`. Options go before it: every
    /// word after its first is part of the flow.
    #[arg(num_args = 0.., value_name = "FLOW", allow_hyphen_values = true)]
    flow: Vec<String>,
    /// Explain each packet of this (classic) pcap file instead (offline).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "flow",
        requires = "config"
    )]
    pcap: Option<PathBuf>,
    /// Configuration file to explain from, offline, under assumed health.
    /// Without it the running sluice answers (its published snapshot and
    /// real health) over the control socket.
    #[arg(long, short)]
    config: Option<PathBuf>,
    #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
    control_socket: PathBuf,
    /// The port the packet arrives on (default: the first).
    #[arg(long, value_name = "NAME")]
    port: Option<String>,
    /// Assume this backend address is unhealthy (repeatable; offline).
    #[arg(long, value_name = "ADDR", requires = "config")]
    unhealthy: Vec<std::net::IpAddr>,
    /// Print JSON (one document per packet, one per line).
    #[arg(long)]
    json: bool,
}

/// Exit status of `sluice run` for an invalid configuration, and of
/// `check-config` / `reload` when they refuse one. The systemd unit's
/// `RestartPreventExitStatus=2` relies on it: restarting cannot fix a file.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    controlplane::log::init();
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { files } => check_config(&files),
        Command::BirdConfig { file } => bird_config(&file),
        Command::Explain(args) => explain(&args),
        Command::Reload { control_socket } => ask(&control_socket, "reload"),
        Command::Status {
            control_socket,
            json,
        } => ask(&control_socket, if json { "status-json" } else { "status" }),
        Command::Run {
            config,
            exit_on_idle,
            duration,
            metrics_dump,
            no_metrics_server,
            control_socket,
            no_control_socket,
            file_prefix,
            hooks,
        } => {
            let cfg = match controlplane::config::load_file(&config) {
                Ok(cfg) => cfg,
                Err(diags) => {
                    controlplane::error!(
                        "{diags}\nsluice: {} error(s) in {}; nothing started",
                        diags.len(),
                        config.display()
                    );
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            let opts = run::RunOptions {
                exit_on_idle: exit_on_idle.map(Duration::from_millis),
                duration: duration.map(Duration::from_secs_f64),
                metrics_dump,
                metrics_server: !no_metrics_server,
                config_path: Some(config),
                control_socket: (!no_control_socket).then_some(control_socket),
                file_prefix,
                #[cfg(feature = "test-hooks")]
                hooks: Some(Box::new(test_hook::TestHooks::new(hooks))),
            };
            #[cfg(not(feature = "test-hooks"))]
            let test_hook::HookArgs {} = hooks;
            match run::run(cfg, opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    controlplane::error!("sluice: {e}");
                    ExitCode::from(e.exit_status())
                }
            }
        }
    }
}

/// Sends one request over the control socket; exit 2 when it failed.
fn ask(socket: &std::path::Path, request: &str) -> ExitCode {
    match controlplane::control_socket::request(socket, request) {
        Ok((true, text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok((false, text)) => {
            controlplane::error!("{text}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e) => {
            controlplane::error!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}

fn explain(args: &ExplainArgs) -> ExitCode {
    use controlplane::explain::{live, packet, render, Explainer};
    let Some(config) = &args.config else {
        if args.flow.is_empty() {
            eprintln!(
                "sluice explain: give a FLOW (e.g. `tcp 198.51.100.7:40000 -> 203.0.113.10:80`)"
            );
            return ExitCode::from(EXIT_CONFIG);
        }
        let line = live::request_line(args.json, args.port.as_deref(), &args.flow.join(" "));
        return ask(&args.control_socket, &line);
    };
    let cfg = match controlplane::config::load_file(config) {
        Ok(cfg) => cfg,
        Err(diags) => {
            eprintln!("{diags}\n{}: {} error(s)", config.display(), diags.len());
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let frames = match (&args.pcap, args.flow.is_empty()) {
        (Some(path), _) => packet::frames_of_pcap(path),
        (None, false) => packet::frame_of_flow(&args.flow.join(" ")).map(|f| vec![f]),
        (None, true) => {
            eprintln!("sluice explain: give a FLOW (e.g. `tcp 198.51.100.7:40000 -> 203.0.113.10:80`) or --pcap FILE");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let frames = match frames {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sluice explain: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let ex = Explainer::offline(&cfg, &args.unhealthy);
    let rx_port = match &args.port {
        None => 0,
        Some(name) => match ex.port_index(name) {
            Some(i) => i,
            None => {
                eprintln!(
                    "sluice explain: {}: no [[dataplane.port]] named {name:?}",
                    config.display()
                );
                return ExitCode::from(EXIT_CONFIG);
            }
        },
    };
    for (i, frame) in frames.iter().enumerate() {
        let e = ex.explain(frame, rx_port);
        if args.json {
            let mut v = render::json(&ex, &e);
            v["packet_index"] = serde_json::json!(i);
            println!("{v}");
        } else {
            if frames.len() > 1 {
                println!("# packet {}", i + 1);
            }
            print!("{}", render::text(&ex, &e));
        }
    }
    ExitCode::SUCCESS
}

fn bird_config(file: &std::path::Path) -> ExitCode {
    let cfg = match controlplane::config::load_file(file) {
        Ok(cfg) => cfg,
        Err(diags) => {
            eprintln!("{diags}\n{}: {} error(s)", file.display(), diags.len());
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match controlplane::announce::bird::render(&cfg, &file.display().to_string()) {
        Some(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "{}: error: no [bgp] section to render a BIRD configuration from\n  \
                 hint: add [bgp] with asn and a [[bgp.peer]] (docs/configuration.md)",
                file.display()
            );
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn check_config(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for f in files {
        match controlplane::config::load_file(f) {
            Ok(cfg) => {
                println!("{}: ok", f.display());
                // The file is valid; whether its TAP names are free is a
                // matter of the host it runs on, which may not be this one.
                for tap in controlplane::exception::existing_taps(&cfg.dataplane.ports) {
                    eprintln!(
                        "{}: warning: {tap} (sluice run refuses to start on this host)",
                        f.display(),
                    );
                }
            }
            Err(diags) => {
                failed = true;
                eprintln!("{diags}");
                eprintln!("{}: {} error(s)", f.display(), diags.len());
            }
        }
    }
    if failed {
        ExitCode::from(EXIT_CONFIG)
    } else {
        ExitCode::SUCCESS
    }
}
