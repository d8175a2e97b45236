//! `sluice generate`: the man pages and shell completions, generated from
//! the command line's own definitions ([`crate::cli`]) so they name every
//! subcommand and option the binary takes. The .deb runs it at build time
//! (scripts/package/build-deb.sh); hidden from `--help`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory as _;

use crate::cli::{Cli, Generate};

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

/// sluice.1 and one page per visible subcommand (sluice-run.1, …) in `dir`.
fn man(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(|e| format!("{}: {e}", dir.display()))
}

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
