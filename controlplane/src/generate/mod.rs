//! `sluice generate`: the man pages and shell completions, generated from
//! the command line's own definitions ([`crate::cli`]) so they name every
//! subcommand and option the binary takes. The .deb runs it at build time
//! (scripts/package/build-deb.sh); hidden from `--help`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory as _;

use crate::cli::{Cli, Generate};

mod roff;

pub fn generate(what: &Generate) -> ExitCode {
    let result = match what {
        Generate::Man { dir } => man(dir),
        Generate::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut visible_command(), "sluice", &mut script);
            std::io::stdout()
                .write_all(&script)
                .map_err(|e| format!("standard output: {e}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice generate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// sluice.1 (with the sections an operator looks for besides the
/// options), one page per visible subcommand (sluice-run.1, …) and
/// sluice.toml.5, the configuration reference, in `dir`.
fn man(dir: &Path) -> Result<(), String> {
    let at = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(at)?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(at)?;
    let top = dir.join("sluice.1");
    let mut page = std::fs::read_to_string(&top).map_err(at)?;
    page.push_str(SLUICE_1_SECTIONS);
    std::fs::write(&top, page).map_err(at)?;
    std::fs::write(dir.join("sluice.toml.5"), config_page()).map_err(at)
}

/// The configuration reference this binary was built with.
const CONFIGURATION_MD: &str = include_str!("../../../docs/configuration.md");

/// sluice.toml(5): docs/configuration.md as a man page.
fn config_page() -> String {
    let head = format!(
        ".TH SLUICE.TOML 5 \"\" \"sluice {}\" \"File Formats\"\n",
        env!("CARGO_PKG_VERSION")
    );
    head + CONFIG_PAGE_HEAD + &roff::body(CONFIGURATION_MD) + CONFIG_PAGE_TAIL
}

const CONFIG_PAGE_HEAD: &str = r#".SH NAME
sluice.toml \- configuration file of the sluice load balancer
.SH SYNOPSIS
/etc/sluice/sluice.toml
.SH DESCRIPTION
"#;

const CONFIG_PAGE_TAIL: &str = r#".SH "SEE ALSO"
\fBsluice\fR(1), \fBsluice\-run\fR(1), \fBsluice\-check\-config\fR(1);
/usr/share/doc/sluice/configuration.md.gz (this page's source),
/usr/share/doc/sluice/behaviour.md.gz (the rule ids)
"#;

/// What sluice(1) says beyond its options: exit statuses, environment,
/// signals, files and related pages.
const SLUICE_1_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
success; for \fBrun\fR, a stop by a signal, \-\-duration or \-\-exit\-on\-idle
.TP
\fB1\fR
the command failed: \fBrun\fR could not start or stopped on an error (the log says which, with a hint), a running sluice could not be asked; for \fBdoctor\fR, a path checked fails (the report names it, with its hint)
.TP
\fB2\fR
the configuration file or the question is invalid (every error is printed, with its file, line, field and fix); under systemd such a start is not retried (RestartPreventExitStatus=2); for \fBdoctor\fR, no report could be had
.SH ENVIRONMENT
.TP
\fBSLUICE_LOG\fR
log filter (tracing EnvFilter syntax): a level (error, warn, info, debug, trace) and target=level pairs, e.g. \fBinfo,dpdk=warn\fR; default info. The packaged unit reads it from /etc/default/sluice
.TP
\fBRUST_LOG\fR
used when SLUICE_LOG is unset
.TP
\fBRUNTIME_DIRECTORY\fR
(set by systemd) where \fBrun\fR keeps its conntrack hand-off file when \-\-handoff\-file is not given; else /run/sluice
.TP
\fBNOTIFY_SOCKET\fR, \fBWATCHDOG_USEC\fR
(set by systemd) readiness, reload and stop notifications, and the watchdog
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
stop: with [bgp], withdraw the VIPs and keep forwarding for bgp.drain_time first; then stop the workers, write the conntrack hand-off file for the next start, and exit. A second signal stops at once
.TP
\fBSIGHUP\fR
re\-read the configuration file (as \fBsluice reload\fR); a refused file leaves the running configuration
.SH FILES
.TP
/etc/sluice/sluice.toml
the configuration (\fBsluice.toml\fR(5))
.TP
/etc/default/sluice
the unit's environment (SLUICE_LOG)
.TP
/run/sluice/sluice.sock
the control socket of \fBreload\fR, \fBstatus\fR, \fBexplain\fR and \fBdoctor\fR
.TP
/run/sluice/conntrack.handoff
the connections a stopping sluice hands to the next start
.TP
/run/dpdk/sluice
EAL's runtime directory under the unit's \-\-file\-prefix sluice (dpdk\-dumpcap and dpdk\-telemetry.py attach there)
.SH "SEE ALSO"
\fBsluice.toml\fR(5), \fBsluice\-run\fR(1), \fBsluice\-status\fR(1), \fBsluice\-explain\fR(1), \fBsluice\-doctor\fR(1), \fBdpdk\-dumpcap\fR(1), \fBbird\fR(8), \fBsystemd.service\fR(5); /usr/share/doc/sluice/ (operations.md, deployment.md, configuration.md, scale\-out.md)
"#;

/// The command line without its hidden subcommands (`generate`), which
/// the completion scripts would otherwise offer.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = clap::Command::new("sluice")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true)
        .subcommands(visible);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd
}
