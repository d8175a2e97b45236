//! How `sluice run` was asked to run: its command-line options.

use std::path::PathBuf;
use std::time::Duration;

pub struct RunOptions {
    pub exit_on_idle: Option<Duration>,
    pub duration: Option<Duration>,
    pub metrics_dump: Option<PathBuf>,
    pub metrics_server: bool,
    /// The file `cfg` came from: SIGHUP and `sluice reload` re-read it.
    pub config_path: Option<PathBuf>,
    /// The loader that read it, holding its parsed tables, so that a
    /// reload parses only the tables that changed.
    pub config_loader: controlplane::config::Loader,
    /// Unix socket for `sluice reload` / `sluice status` (None: none).
    pub control_socket: Option<PathBuf>,
    /// Who may use it besides root and sluice's own user (AP-5).
    pub control_socket_group: Option<controlplane::control_socket::Group>,
    /// The conntrack hand-off file (None: no hand-off).
    pub handoff: Option<PathBuf>,
    /// EAL file prefix (None: `sluice-<pid>`, one per process).
    pub file_prefix: Option<String>,
    /// The test hooks asked for (taken by the runtime when it starts).
    #[cfg(feature = "test-hooks")]
    pub hooks: Option<Box<dyn super::hooks::RunHooks>>,
}
