//! Configuration: TOML in GCP's vocabulary → validated [`Config`] (AP-5).
//!
//! Loading is two passes. serde reads the file into a span-carrying raw
//! model (`deny_unknown_fields` everywhere, so a misspelt key is an error
//! rather than a silently ignored setting); then `validate` checks every
//! value and cross-reference, collecting all errors with their line, column,
//! field path and a hint. See `docs/configuration.md` for every field.

mod addresses;
mod backend_lines;
mod bgp;
pub mod bird_syntax;
mod context;
mod diagnostics;
mod encapsulation;
mod frames;
mod health_check;
mod idle;
mod interfaces;
mod loader;
pub(crate) mod model;
mod overlap;
mod quic_lb;
mod raw;
mod rules;
mod segments;
mod service;
mod validate;
mod values;

use std::path::Path;

pub use diagnostics::{Diagnostic, Diagnostics, Shown, KEPT};
pub use health_check::{HttpCheck, ProbeKind, TcpCheck, UdpCheck};
pub use loader::Loader;
pub use model::*;
pub(crate) use values::mac_text;

/// Largest configuration file read. 65,535 services with a backend each
/// take ~5 MiB; anything much larger is not a configuration.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads and validates a configuration file.
pub fn load_file(path: &Path) -> Result<Config, Diagnostics> {
    let origin = path.display().to_string();
    match read_config(path) {
        Ok(text) => load_str(&text, &origin),
        Err((message, hint)) => {
            let mut d = Diagnostics::new(origin);
            d.push(Diagnostic {
                line: None,
                column: None,
                path: String::new(),
                message,
                hint,
            });
            Err(d)
        }
    }
}

/// The file's text, if it is a regular file of at most
/// [`MAX_CONFIG_BYTES`]. Opened without blocking and checked on the open
/// descriptor (no race with a rename), so a FIFO or a device can neither
/// block `check-config` nor a reload, and nothing endless is read.
fn read_config(path: &Path) -> Result<String, (String, String)> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    let unreadable = |e: std::io::Error| {
        (
            format!("cannot read the configuration file: {e}"),
            "check the path and the file's permissions".to_string(),
        )
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    let kind = meta.file_type();
    let not_regular = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else {
        None
    };
    if let Some(what) = not_regular {
        return Err((
            format!("the configuration path is {what}, not a regular file"),
            "give the path of the TOML file itself (write it elsewhere and rename it into \
             place to replace it atomically)"
                .into(),
        ));
    }
    let too_big = |len: u64| {
        (
            format!(
                "the configuration file is {len} bytes; at most {MAX_CONFIG_BYTES} ({} MiB) are read",
                MAX_CONFIG_BYTES >> 20
            ),
            "check the path: no configuration is this large".to_string(),
        )
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_big(meta.len()));
    }
    // The file may grow after fstat: read one byte past the cap at most.
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big(text.len() as u64));
    }
    Ok(text)
}

/// [`load_file`] with the warnings about an accepted file
/// (`sluice check-config` prints them; they never refuse it).
pub fn check_file(path: &Path) -> Result<(Config, Diagnostics), Diagnostics> {
    let origin = path.display().to_string();
    match read_config(path) {
        Ok(text) => check_str(&text, &origin),
        Err(_) => load_file(path).map(|c| (c, Diagnostics::warnings(origin))),
    }
}

/// [`load_str`] with the warnings about accepted text.
pub fn check_str(text: &str, origin: &str) -> Result<(Config, Diagnostics), Diagnostics> {
    match toml::from_str::<raw::RawConfig>(text) {
        Ok(raw) => validate::validate_warning(&raw, text, origin),
        Err(_) => load_str(text, origin).map(|c| (c, Diagnostics::warnings(origin))),
    }
}

/// Validates configuration text; `origin` names it in diagnostics (usually
/// the file path).
pub fn load_str(text: &str, origin: &str) -> Result<Config, Diagnostics> {
    match toml::from_str::<raw::RawConfig>(text) {
        Ok(raw) => validate::validate(&raw, text, origin),
        Err(e) => {
            let mut d = Diagnostics::new(origin);
            d.push(diagnostics::SourceMap::new(text).toml_error_diagnostic(&e));
            Err(d)
        }
    }
}
