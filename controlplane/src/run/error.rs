//! Why `sluice run` stopped with an error, and the start-up hints.

use std::net::SocketAddr;
use std::path::PathBuf;

use controlplane::config::Config;
use controlplane::exception::{TapExists, TapSetupError};
use controlplane::memory_budget::ConntrackTooLarge;
use controlplane::start_hints::{self, Facts, Step};
use dataplane::dpdk::{DpdkError, LcoreId};

/// Why `sluice run` failed. A configuration file that does not validate
/// never gets here: `main` refuses it first, with exit status 2. Every
/// variant below ends the process with exit status 1
/// ([`RunError::exit_status`]): the host, a device or the process failed,
/// and a restart (systemd's `Restart=on-failure`) may succeed. By the time
/// one is returned everything started has been taken down, in order:
/// workers stopped and joined, then ports closed, the pool freed, EAL
/// cleaned up (`Runtime`'s drop).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Registering the SIGINT/SIGTERM/SIGHUP handlers failed; nothing was
    /// started.
    #[error("I/O: signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// A port's `tap` names an interface that exists already (net_tap
    /// would attach to it instead of creating it); refused before EAL.
    /// The text names the port, the interface and how to remove it.
    #[error(transparent)]
    TapExists(#[from] TapExists),
    /// The admin endpoint cannot listen on `metrics.listen` (taken, or not
    /// an address of this host); refused before EAL.
    #[error(
        "metrics.listen = \"{listen}\"{file}: cannot listen: {source}; {fix}, \
         or run with --no-metrics-server; nothing started"
    )]
    AdminListen {
        listen: SocketAddr,
        /// " in <config file>", or empty.
        file: String,
        source: std::io::Error,
        fix: &'static str,
    },
    /// The conntrack shards of all workers do not fit the memory this host
    /// has; refused before EAL, with the largest capacity that fits.
    #[error(transparent)]
    ConntrackMemory(#[from] ConntrackTooLarge),
    /// `rte_eal_init` failed (hugepages, VFIO, EAL arguments): usually
    /// [`RunError::Hinted`] with the cause on this host.
    #[error("DPDK: {0}")]
    Eal(#[source] DpdkError),
    /// EAL started fewer worker lcores than the configuration has workers
    /// (an `-l`/`--lcores` in `dataplane.eal_args` that is too short).
    #[error(
        "the configuration asks for {workers} worker(s) but EAL started {lcores} worker \
         lcore(s); give one more lcore than workers in dataplane.eal_args (-l/--lcores) or \
         drop them to let sluice choose"
    )]
    Lcores { workers: usize, lcores: usize },
    /// Creating the packet pool failed (EAL memory too small): usually
    /// [`RunError::Hinted`].
    #[error("DPDK: {0}")]
    PacketPool(#[source] DpdkError),
    /// Configuring or starting the DPDK port of config port `name` failed
    /// (device not bound or not probed, too few queues, MTU too large).
    #[error("port {name:?} ({device}): {source}")]
    Port {
        name: String,
        device: String,
        source: DpdkError,
    },
    /// Creating the TAP of config port `port`, or setting its MAC, failed
    /// in DPDK (`net_tap`: CAP_NET_ADMIN, /dev/net/tun).
    #[error("port {port:?} TAP {iface:?}: {source}")]
    TapDevice {
        port: String,
        iface: String,
        source: DpdkError,
    },
    /// Giving the kernel side of the TAP its MAC, addresses, MTU and
    /// routes (rtnetlink, sysctls) failed.
    #[error("port {port:?} TAP {iface:?}: {source}")]
    TapKernel {
        port: String,
        iface: String,
        source: TapSetupError,
    },
    /// Starting the control plane's threads (health prober, neighbour
    /// resolver) failed.
    #[error("I/O: {0}")]
    ControlThreads(#[source] std::io::Error),
    /// Creating a software-steering ring between two workers failed.
    #[error("DPDK: {0}")]
    SteeringRing(#[source] DpdkError),
    /// Creating a ring from a worker without a TAP queue pair to the
    /// worker that owns one (AP-4) failed.
    #[error("DPDK: {0}")]
    TapRelayRing(#[source] DpdkError),
    /// Launching worker `worker` on its lcore failed; the workers launched
    /// before it were stopped and joined before the ports closed.
    #[error("DPDK: launching worker {worker} on lcore {lcore}: {source}")]
    Launch {
        worker: usize,
        lcore: LcoreId,
        source: DpdkError,
    },
    /// Writing the final metrics to the `--metrics-dump` file failed, after
    /// an otherwise orderly stop.
    #[error("--metrics-dump {}: {source}", path.display())]
    MetricsDump {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `error`, with its likely cause and fix on this host on a line of
    /// its own (see `start_hints`).
    #[error("{error}\n  hint: {hint}")]
    Hinted { error: Box<RunError>, hint: String },
}

impl RunError {
    /// The process's exit status for this error: 1 for each, see the type.
    pub fn exit_status(&self) -> u8 {
        match self {
            RunError::Signals(_)
            | RunError::TapExists(_)
            | RunError::AdminListen { .. }
            | RunError::ConntrackMemory(_)
            | RunError::Eal(_)
            | RunError::Lcores { .. }
            | RunError::PacketPool(_)
            | RunError::Port { .. }
            | RunError::TapDevice { .. }
            | RunError::TapKernel { .. }
            | RunError::ControlThreads(_)
            | RunError::SteeringRing(_)
            | RunError::TapRelayRing(_)
            | RunError::Launch { .. }
            | RunError::MetricsDump { .. } => 1,
            RunError::Hinted { error, .. } => error.exit_status(),
        }
    }
}

/// `error`, the failure of `step` with `errno`, with the hint
/// [`start_hints`] gives for it from this host's state (read now, once).
pub fn hinted(
    step: Step<'_>,
    errno: i32,
    error: RunError,
    cfg: &Config,
    eal_args: &[String],
) -> RunError {
    let devices: Vec<&str> = cfg
        .dataplane
        .ports
        .iter()
        .map(|p| p.device.as_str())
        .collect();
    let facts = Facts::gather(eal_args, &devices);
    match start_hints::hint(step, errno, &error.to_string(), &facts) {
        Some(hint) => RunError::Hinted {
            error: Box::new(error),
            hint,
        },
        None => error,
    }
}
