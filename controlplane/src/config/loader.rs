//! Loading the same file again, parsing only what changed (AP-5).
//!
//! A provider's file holds a table per service and per rule: 10,000
//! services with ten backends each are ~7 MB of TOML, whose parse alone
//! took most of a reload that changed one weight. A [`Loader`] keeps each
//! `[[backend_service]]` and `[[forwarding_rule]]` table of the last load
//! parsed, keyed by its exact text ([`super::segments`]); a load parses the
//! tables it has not seen and "the rest" (dataplane, metrics, zones,
//! health checks, BGP: small), then validates the whole configuration as
//! `load_str` does. Any doubt — the file does not cut cleanly, a piece does
//! not parse, the configuration does not validate — and it parses the
//! whole file instead, so errors and their lines are exactly
//! `check-config`'s. The cache holds the raw tables of the last load only:
//! its size follows the file's.

use std::path::Path;

use ahash::AHashMap;

use serde::Deserialize;

use super::raw::{RawConfig, RawRule, RawService};
use super::segments::{self, Item};
use super::{Config, Diagnostics};

/// The parsed tables of the last load, by their text (a process-local
/// map: the fast keyed hasher).
#[derive(Debug, Default)]
pub struct Loader {
    services: AHashMap<Box<str>, RawService>,
    rules: AHashMap<Box<str>, RawRule>,
    /// Tables the last load parsed (not found in the cache); None when it
    /// parsed the whole file.
    parsed: Option<usize>,
}

/// One `[[backend_service]]` table parsed on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServicePiece {
    backend_service: Vec<RawService>,
}

/// One `[[forwarding_rule]]` table parsed on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulePiece {
    forwarding_rule: Vec<RawRule>,
}

impl Loader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads and validates a configuration file, as [`super::load_file`].
    pub fn load_file(&mut self, path: &Path) -> Result<Config, Diagnostics> {
        match super::read_config(path) {
            Ok(text) => self.load_str(&text, &path.display().to_string()),
            Err(_) => super::load_file(path),
        }
    }

    /// Validates configuration text, as [`super::load_str`].
    pub fn load_str(&mut self, text: &str, origin: &str) -> Result<Config, Diagnostics> {
        self.parsed = None;
        match self.load_pieces(text, origin) {
            Some(cfg) => Ok(cfg),
            None => {
                self.parsed = None;
                super::load_str(text, origin)
            }
        }
    }

    /// How many `[[backend_service]]` / `[[forwarding_rule]]` tables the
    /// last load parsed; None when it parsed the whole file instead.
    pub fn last_parsed(&self) -> Option<usize> {
        self.parsed
    }

    fn load_pieces(&mut self, text: &str, origin: &str) -> Option<Config> {
        let layout = segments::split(text)?;
        let mut raw: RawConfig = toml::from_str(&layout.rest_text(text)).ok()?;
        if !raw.backend_service.is_empty() || !raw.forwarding_rule.is_empty() {
            // Items written another way (`backend_service = [...]`): the
            // whole file says in which order.
            return None;
        }
        let mut old_services = std::mem::take(&mut self.services);
        let mut old_rules = std::mem::take(&mut self.rules);
        // Each table's text, kept (moved from the old cache when found
        // there) to key the new cache.
        let mut service_texts = Vec::new();
        let mut rule_texts = Vec::new();
        let mut parsed = 0;
        for (item, range) in &layout.items {
            let piece = &text[range.clone()];
            match item {
                Item::Service => {
                    let (key, s) = cached_or_parsed(&mut old_services, piece, &mut parsed, |p| {
                        one(toml::from_str::<ServicePiece>(p).ok()?.backend_service)
                    })?;
                    raw.backend_service.push(s);
                    service_texts.push(key);
                }
                Item::Rule => {
                    let (key, r) = cached_or_parsed(&mut old_rules, piece, &mut parsed, |p| {
                        one(toml::from_str::<RulePiece>(p).ok()?.forwarding_rule)
                    })?;
                    raw.forwarding_rule.push(r);
                    rule_texts.push(key);
                }
            }
        }
        let cfg = super::validate::validate(&raw, text, origin).ok();
        self.parsed = Some(parsed);
        self.services = service_texts.into_iter().zip(raw.backend_service).collect();
        self.rules = rule_texts.into_iter().zip(raw.forwarding_rule).collect();
        cfg
    }
}

/// `piece`'s table from the last load's cache (with its key), else parsed
/// (counted in `parsed`); None if it does not parse.
fn cached_or_parsed<T>(
    cache: &mut AHashMap<Box<str>, T>,
    piece: &str,
    parsed: &mut usize,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<(Box<str>, T)> {
    if let Some(hit) = cache.remove_entry(piece) {
        return Some(hit);
    }
    *parsed += 1;
    Some((Box::from(piece), parse(piece)?))
}

/// The only item of `items`.
fn one<T>(items: Vec<T>) -> Option<T> {
    let mut items = items.into_iter();
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
