//! The `sluice` command line: its subcommands and options. The man pages
//! and shell completions are generated from these definitions
//! (`sluice generate`, [`crate::generate`]), so they cannot drift.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::test_hook;

#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version,
    propagate_version = true,
    about = "Kernel-bypass L4 load balancer on DPDK"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
        /// Unix socket for `sluice reload`, `status` and `explain`: mode
        /// 0600 (root and the user sluice runs as only), or 0660 with
        /// --control-socket-group. Directories it creates are 0700 (0710
        /// with the group). A path that holds anything but a socket is
        /// refused, never replaced; a stale socket is replaced.
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        /// Let the members of group NAME (or a numeric gid) use the control
        /// socket too: it is made 0660 with that group. Each client's
        /// credentials are checked (SO_PEERCRED): root, the user sluice
        /// runs as, and a client whose group is NAME or whose user /etc/group
        /// lists in NAME get in; others get `permission denied`.
        #[arg(long, value_name = "NAME")]
        control_socket_group: Option<String>,
        /// As --control-socket-group, but only when group NAME exists:
        /// without it the socket stays 0600 and sluice says so once (the
        /// systemd unit passes `sluice`, the group the package makes).
        #[arg(long, value_name = "NAME", conflicts_with = "control_socket_group")]
        control_socket_group_if_exists: Option<String>,
        #[command(flatten)]
        hooks: test_hook::HookArgs,
        /// Serve no control socket (reload with SIGHUP only).
        #[arg(long)]
        no_control_socket: bool,
        /// Conntrack hand-off file: at a stop by SIGTERM or SIGINT the live
        /// connections are written here; a start takes (and removes) a
        /// file written less than 5 minutes before by a sluice running the
        /// same configuration file, so connections continue on their
        /// backends across a restart. Default: conntrack.handoff in
        /// $RUNTIME_DIRECTORY (set by systemd), else in /run/sluice.
        #[arg(long, value_name = "PATH")]
        handoff_file: Option<PathBuf>,
        /// Neither take nor write a conntrack hand-off file.
        #[arg(long, conflicts_with = "handoff_file")]
        no_handoff: bool,
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
        /// Control socket of the running sluice.
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        /// Give up (exit 1) when the answer has not come within this many
        /// seconds. The running sluice waits up to 120 s for a reload to
        /// apply (a very large configuration takes seconds to build).
        #[arg(long, value_name = "SECONDS", default_value = "130", value_parser = seconds)]
        timeout: Duration,
    },
    /// Print the running sluice's services and backends (health, weight,
    /// zone, pool, share of the table).
    Status {
        /// Control socket of the running sluice.
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        /// JSON instead: version, uptime, configuration file, reloads and
        /// the latest one's error, per backend its state and packets.
        #[arg(long)]
        json: bool,
        /// Give up (exit 1) when the answer has not come within this many
        /// seconds.
        #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = seconds)]
        timeout: Duration,
    },
    /// Explain what sluice does with a packet: rule, service, hashed fields,
    /// flow hash, table, Maglev slot, every backend's eligibility, the
    /// chosen backend, next hop, encapsulation and MTU outcome. With
    /// --config, offline under assumed health (every backend healthy but
    /// those given to --unhealthy); without, the running sluice answers.
    #[command(after_long_help = EXPLAIN_EXIT_STATUS)]
    Explain(ExplainArgs),
    /// Check every path a client's packets take through the running sluice,
    /// per service, backend and VIP: the next hop, the backend directly,
    /// the VIP through the data path (encapsulated as clients' packets
    /// are), the backend's own address through the tunnel when the VIP is
    /// not answered, and full-size packets through the encapsulation. One
    /// line per path, and under a failing one what is wrong and the fix.
    #[command(after_long_help = DOCTOR_EXIT_STATUS)]
    Doctor {
        /// Control socket of the running sluice.
        #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
        control_socket: PathBuf,
        /// The report as JSON: per path each check's outcome, reason and
        /// detail, the problem and the hint.
        #[arg(long)]
        json: bool,
        /// Give up (exit 2) when the report has not come within this many
        /// seconds.
        #[arg(long, value_name = "SECONDS", default_value = "180", value_parser = seconds)]
        timeout: Duration,
    },
    /// Validate configuration files; print every error; exit 2 on any.
    CheckConfig {
        /// Configuration files (TOML).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the BIRD 2 configuration that announces the VIPs of FILE's
    /// [bgp] section; exit 2 when FILE is invalid or has no [bgp].
    BirdConfig {
        /// Configuration file (TOML).
        file: PathBuf,
    },
    /// Write the man pages or print a shell's completions, generated from
    /// these definitions (packaging: scripts/package/build-deb.sh).
    #[command(hide = true, subcommand)]
    Generate(Generate),
}

/// `sluice generate`'s outputs.
#[derive(Subcommand, Debug)]
pub enum Generate {
    /// Write sluice.1 and one page per subcommand (sluice-run.1, …) into
    /// DIR.
    Man { dir: PathBuf },
    /// Print the completion script for SHELL.
    Completions { shell: clap_complete::Shell },
}

/// `sluice explain`'s exit statuses, in its long help and man page.
const EXPLAIN_EXIT_STATUS: &str = "Exit status: 0 when every packet was explained \
(a packet the appliance drops is explained too); 1 when the running sluice could \
not be asked or its answer is malformed; 2 when the question is refused: a malformed \
flow or capture, a capture past the live limits, an unknown --port or --unhealthy \
address, an invalid --config file.";

/// `sluice doctor`'s exit statuses, in its long help and man page.
const DOCTOR_EXIT_STATUS: &str = "Exit status: 0 when every path checked works; 1 when \
one or more fail (each named with its hint); 2 when no report could be had (no running \
sluice at the socket, not allowed, or no answer within --timeout).";

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The flow, as its first packet: `tcp 198.51.100.7:40000 ->
    /// 203.0.113.10:80`, `udp [2001:db8::7]:40000 -> [2001:db8:1::10]:53`,
    /// `icmp 198.51.100.7 -> 203.0.113.10`. Options go before it: every
    /// word after its first is part of the flow.
    #[arg(num_args = 0.., value_name = "FLOW", allow_hyphen_values = true)]
    pub flow: Vec<String>,
    /// Explain each packet of this (classic) pcap file instead. Live, one
    /// request carries the whole capture: at most 1024 packets and 4 MiB
    /// (frames in hex); a bigger capture is refused before anything is
    /// sent.
    #[arg(long, value_name = "FILE", conflicts_with = "flow")]
    pub pcap: Option<PathBuf>,
    /// Configuration file to explain from, offline, under assumed health.
    /// Without it the running sluice answers (its published snapshot and
    /// real health) over the control socket.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Control socket of the running sluice (without --config).
    #[arg(long, value_name = "PATH", default_value = controlplane::control_socket::DEFAULT_PATH)]
    pub control_socket: PathBuf,
    /// The port the packet arrives on (default: the first).
    #[arg(long, value_name = "NAME")]
    pub port: Option<String>,
    /// What if the backend at this address were unhealthy (repeatable):
    /// offline, on the snapshot built from --config; live, on a copy of
    /// the published snapshot (the running appliance is unchanged; the
    /// answer says so). Eligibility, failover and the Maglev tables are
    /// rebuilt as after a failed health check.
    #[arg(long, value_name = "ADDR")]
    pub unhealthy: Vec<std::net::IpAddr>,
    /// Print JSON (one document per packet, one per line).
    #[arg(long)]
    pub json: bool,
    /// Live, give up (exit 1) when the answer has not come within this
    /// many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = seconds)]
    pub timeout: Duration,
}

/// A `--timeout`: a positive number of seconds (fractions allowed).
fn seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400 (e.g. 30 or 2.5)"
        )),
    }
}
