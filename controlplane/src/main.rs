//! `sluice`: the load balancer appliance's command line.
#![forbid(unsafe_code)]
// A binary: nothing in it is reachable from outside, so the workspace's
// `unreachable_pub` would only ask `pub` to be spelt `pub(crate)`.
#![allow(unreachable_pub)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cli::{Cli, Command, ExplainArgs};

mod cli;
mod generate;
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
        Command::Generate(what) => generate::generate(&what),
        Command::Explain(args) => explain(&args),
        Command::Reload {
            control_socket,
            timeout,
        } => ask(&control_socket, "reload", timeout),
        Command::Status {
            control_socket,
            json,
            timeout,
        } => ask(
            &control_socket,
            if json { "status-json" } else { "status" },
            timeout,
        ),
        Command::Doctor {
            control_socket,
            json,
            timeout,
        } => doctor(&control_socket, json, timeout),
        Command::Run {
            config,
            exit_on_idle,
            duration,
            metrics_dump,
            no_metrics_server,
            control_socket,
            control_socket_group,
            control_socket_group_if_exists,
            no_control_socket,
            handoff_file,
            no_handoff,
            file_prefix,
            hooks,
        } => {
            let handoff = (!no_handoff)
                .then(|| handoff_file.unwrap_or_else(controlplane::handoff::store::default_path));
            let control_socket = (!no_control_socket).then_some(control_socket);
            let group = match (control_socket_group, control_socket_group_if_exists) {
                (Some(name), _) => Some(SocketGroup::Required(name)),
                (None, Some(name)) => Some(SocketGroup::IfExists(name)),
                (None, None) => None,
            };
            let control_socket_group = match check_control_socket(control_socket.as_deref(), group)
            {
                Ok(group) => group,
                Err(e) => {
                    controlplane::error!("sluice: {e}; nothing started");
                    return ExitCode::FAILURE;
                }
            };
            let mut config_loader = controlplane::config::Loader::new();
            let cfg = match config_loader.load_file(&config) {
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
                config_loader,
                control_socket,
                control_socket_group,
                handoff,
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

/// The control socket's group as the command line names it.
enum SocketGroup {
    /// `--control-socket-group`: it must exist.
    Required(String),
    /// `--control-socket-group-if-exists`: used when it exists.
    IfExists(String),
}

/// Before anything starts (AP-5): the control socket's path holds
/// nothing or a socket, and its group exists (or, when optional, whether
/// it does).
fn check_control_socket(
    socket: Option<&std::path::Path>,
    group: Option<SocketGroup>,
) -> Result<Option<controlplane::control_socket::Group>, String> {
    use controlplane::control_socket::{check_path, BindError, Group};
    if let Some(path) = socket {
        match check_path(path) {
            // A live socket: `run` warns and runs without one.
            Ok(_) | Err(BindError::Live { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    match (socket, group) {
        (None, Some(SocketGroup::Required(_))) => Err("--control-socket-group without a \
                                                       control socket (--no-control-socket): \
                                                       drop one of them"
            .into()),
        (None, Some(SocketGroup::IfExists(_))) => Err("--control-socket-group-if-exists \
                                                       without a control socket \
                                                       (--no-control-socket): drop one of them"
            .into()),
        (_, Some(SocketGroup::Required(name))) => Group::resolve(&name).map(Some),
        (_, Some(SocketGroup::IfExists(name))) => {
            Ok(Group::resolve_if_exists(&name)?.or_else(|| {
                controlplane::info!(
                    "sluice: no group {name} on this host: the control socket is for root only \
                 (mode 0600); `addgroup --system {name}` lets its members use it from the \
                 next start"
                );
                None
            }))
        }
        (_, None) => Ok(None),
    }
}

/// Sends one request over the control socket; exit 2 when it was
/// refused, 1 when no answer came.
fn ask(socket: &std::path::Path, request: &str, timeout: Duration) -> ExitCode {
    match controlplane::control_socket::request(socket, request, timeout) {
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

/// `sluice doctor`: the running sluice's report, as a table or JSON, and
/// the exit status of its verdict.
fn doctor(socket: &std::path::Path, json: bool, timeout: Duration) -> ExitCode {
    let report = match controlplane::control_socket::request(socket, "doctor", timeout) {
        Ok((true, text)) => serde_json::from_str::<controlplane::doctor::Report>(&text)
            .map_err(|e| format!("sluice doctor: the running sluice's report is malformed: {e}")),
        Ok((false, text)) => Err(text.trim_end().to_string()),
        Err(e) => Err(format!("sluice doctor: {e}")),
    };
    match report {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(t) => println!("{t}"),
                    Err(e) => eprintln!("sluice doctor: {e}"),
                }
            } else {
                print!("{}", controlplane::doctor::render::text(&report));
            }
            ExitCode::from(report.exit_status())
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn explain(args: &ExplainArgs) -> ExitCode {
    use controlplane::explain::client::{self, Packets};
    let flow = args.flow.join(" ");
    let packets = match (&args.pcap, flow.is_empty()) {
        (Some(path), _) => Packets::Pcap(path),
        (None, false) => Packets::Flow(&flow),
        (None, true) => {
            eprintln!(
                "sluice explain: give a FLOW (e.g. `tcp 198.51.100.7:40000 -> 203.0.113.10:80`) \
                 or --pcap FILE"
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let Some(config) = &args.config else {
        let answer = client::request(&packets, args.json, args.port.as_deref(), &args.unhealthy)
            .and_then(|req| client::ask(&args.control_socket, &req, args.timeout));
        return match answer {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(e.exit_status())
            }
        };
    };
    match explain_offline(args, config, &packets) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `sluice explain --config`: the explanations, or the error to print.
fn explain_offline(
    args: &ExplainArgs,
    config: &std::path::Path,
    packets: &controlplane::explain::client::Packets<'_>,
) -> Result<String, String> {
    use controlplane::explain::client::Packets;
    use controlplane::explain::{packet, render, Explainer};
    let cfg = controlplane::config::load_file(config)
        .map_err(|diags| format!("{diags}\n{}: {} error(s)", config.display(), diags.len()))?;
    let frames = match packets {
        Packets::Pcap(path) => packet::frames_of_pcap(path),
        Packets::Flow(flow) => packet::frame_of_flow(flow).map(|f| vec![f]),
    }
    .map_err(|e| format!("sluice explain: {e}"))?;
    let ex = Explainer::offline(&cfg, &args.unhealthy)
        .map_err(|e| format!("sluice explain: {}: {e}", config.display()))?;
    let rx_port = match &args.port {
        None => 0,
        Some(name) => ex.port_index(name).ok_or_else(|| {
            format!(
                "sluice explain: {}: no [[dataplane.port]] named {name:?}",
                config.display()
            )
        })?,
    };
    let docs = frames
        .iter()
        .map(|frame| {
            let e = ex.explain(frame, rx_port);
            (render::json(&ex, &e), render::text(&ex, &e))
        })
        .collect();
    Ok(render::join(docs, args.json))
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
        match controlplane::config::check_file(f) {
            Ok((cfg, warnings)) => {
                println!("{}: ok", f.display());
                // Warnings never refuse the file (nor change the status).
                if !warnings.is_empty() {
                    eprintln!("{warnings}");
                }
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
