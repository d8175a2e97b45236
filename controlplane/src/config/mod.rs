//! Configuration: TOML in GCP's vocabulary → validated [`Config`] (AP-5).
//!
//! Loading is two passes. serde reads the file into a span-carrying raw
//! model (`deny_unknown_fields` everywhere, so a misspelt key is an error
//! rather than a silently ignored setting); then `validate` checks every
//! value and cross-reference, collecting all errors with their line, column,
//! field path and a hint. See `docs/configuration.md` for every field.

mod addresses;
mod diagnostics;
mod frames;
mod model;
mod raw;
mod rules;
mod service;
mod validate;
mod values;

use std::path::Path;

pub use diagnostics::{Diagnostic, Diagnostics};
pub use model::*;

/// Reads and validates a configuration file.
pub fn load_file(path: &Path) -> Result<Config, Diagnostics> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &origin),
        Err(e) => {
            let mut d = Diagnostics::new(origin);
            d.push(Diagnostic {
                line: None,
                column: None,
                path: String::new(),
                message: format!("cannot read the configuration file: {e}"),
                hint: "check the path and the file's permissions".into(),
            });
            Err(d)
        }
    }
}

/// Validates configuration text; `origin` names it in diagnostics (usually
/// the file path).
pub fn load_str(text: &str, origin: &str) -> Result<Config, Diagnostics> {
    let map = diagnostics::SourceMap::new(text);
    match toml::from_str::<raw::RawConfig>(text) {
        Ok(raw) => validate::validate(raw, text, origin),
        Err(e) => {
            let mut d = Diagnostics::new(origin);
            d.push(map.toml_error_diagnostic(&e));
            Err(d)
        }
    }
}
