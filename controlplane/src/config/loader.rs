//! Loading the same file again, parsing only what changed (AP-5).
//!
//! A provider's file holds a table per service and per rule: 10,000
//! services with ten backends each are ~7 MB of TOML, whose parse alone
//! took most of a reload that changed one weight. A [`Loader`] keeps each
//! `[[backend_service]]` and `[[forwarding_rule]]` table of the last load
//! parsed, with its exact text ([`super::segments`]); a load parses the
//! tables it has not seen and "the rest" (dataplane, metrics, zones,
//! health checks, BGP: small), then validates the whole configuration as
//! `load_str` does. Any doubt — the file does not cut cleanly, a piece does
//! not parse, the configuration does not validate — and it parses the
//! whole file instead, so errors and their lines are exactly
//! `check-config`'s. The cache holds the raw tables of the last load only:
//! its size follows the file's.

use std::path::Path;
use std::sync::Arc;

use ahash::AHashMap;

use serde::Deserialize;

use super::model::{BackendServiceConfig, ForwardingRuleConfig};
use super::raw::{RawConfig, RawRule, RawService};
use super::segments::{self, Item};
use super::validate::{validate_keeping, Kept};
use super::{Config, Diagnostics};

/// The parsed tables of the last load, with their text, in file order.
#[derive(Debug, Default)]
pub struct Loader {
    services: Vec<Parsed<Table<RawService, BackendServiceConfig>>>,
    rules: Vec<Parsed<Table<RawRule, ForwardingRuleConfig>>>,
    /// Everything outside the service and rule tables, as the last load
    /// read it: while it stays the same, so does what validating a table
    /// reads besides the table itself.
    rest: String,
    /// Tables the last load parsed (not found in the cache); None when it
    /// parsed the whole file.
    parsed: Option<usize>,
    /// Tables the last load took validated from the load before.
    kept: usize,
}

/// A table as parsed, and the item it validated to when its load was
/// accepted.
#[derive(Debug)]
struct Table<R, M> {
    /// Boxed: a load moves every table between lists a few times.
    raw: Box<R>,
    valid: Option<Arc<M>>,
}

impl<R, M> Table<R, M> {
    fn parsed(raw: Box<R>) -> Self {
        Self { raw, valid: None }
    }
}

/// One `[[backend_service]]` table parsed on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServicePiece {
    #[allow(clippy::vec_box)]
    backend_service: Vec<Box<RawService>>,
}

/// One `[[forwarding_rule]]` table parsed on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulePiece {
    #[allow(clippy::vec_box)]
    forwarding_rule: Vec<Box<RawRule>>,
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

    /// How many tables the last load took validated from the load before
    /// it instead of validating them again.
    pub fn last_kept(&self) -> usize {
        self.kept
    }

    fn load_pieces(&mut self, text: &str, origin: &str) -> Option<Config> {
        self.kept = 0;
        let layout = segments::split(text)?;
        let rest = layout.rest_text(text);
        let mut raw: RawConfig = toml::from_str(&rest).ok()?;
        if !raw.backend_service.is_empty() || !raw.forwarding_rule.is_empty() {
            // Items written another way (`backend_service = [...]`): the
            // whole file says in which order.
            return None;
        }
        let mut services = Matcher::new(std::mem::take(&mut self.services));
        let mut rules = Matcher::new(std::mem::take(&mut self.rules));
        for (item, range) in &layout.items {
            let piece = &text[range.clone()];
            match item {
                Item::Service => services.next(piece),
                Item::Rule => rules.next(piece),
            }
        }
        let mut parsed = 0;
        let (service_texts, services) = services.finish(&mut parsed, |p, earlier| {
            // A changed version of the old table in its place: only its
            // changed backend lines are parsed, when that is all it is.
            if let Some(raw) =
                earlier.and_then(|(text, old)| super::backend_lines::patch(&text, old.raw, p))
            {
                return Some(Table::parsed(raw));
            }
            one(toml::from_str::<ServicePiece>(p).ok()?.backend_service).map(Table::parsed)
        })?;
        let (rule_texts, rules) = rules.finish(&mut parsed, |p, _| {
            one(toml::from_str::<RulePiece>(p).ok()?.forwarding_rule).map(Table::parsed)
        })?;
        // Validated items are offered only while everything else reads the
        // same; a changed zone, health check or port validates them all.
        let same_rest = rest == self.rest;
        let (services, kept_services) = split_tables(services, same_rest);
        let (rules, kept_rules) = split_tables(rules, same_rest);
        raw.backend_service = services;
        raw.forwarding_rule = rules;
        let kept = Kept {
            services: kept_services,
            rules: kept_rules,
        };
        let cfg = validate_keeping(&raw, text, origin, &kept).ok();
        if let Some(c) = &cfg {
            self.kept = taken(&kept.services, &c.backend_services)
                + taken(&kept.rules, &c.forwarding_rules);
        }
        self.parsed = Some(parsed);
        self.rest = rest;
        // What this load validated to is what the next one may keep (only
        // from an accepted load: a refused one validated nothing).
        let (valid_services, valid_rules) = match &cfg {
            Some(c) => (
                c.backend_services.iter().cloned().map(Some).collect(),
                c.forwarding_rules.iter().cloned().map(Some).collect(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        self.services = join_tables(service_texts, raw.backend_service, valid_services);
        self.rules = join_tables(rule_texts, raw.forwarding_rule, valid_rules);
        cfg
    }
}

/// A table's text and what it parsed to.
type Parsed<T> = (Box<str>, T);

/// Finds each table of a load among the last load's tables of its kind,
/// by exact text. Tables mostly come back in the same order, so each is
/// compared first with the next old table in order (and the one after
/// it: the old one was changed or removed), which costs a comparison of
/// equal texts and no hashing; the few left over are looked up by text
/// among the old tables nothing took, and parsed when not found.
struct Matcher<'t, T> {
    old: Vec<Option<Parsed<T>>>,
    /// The next old table in order.
    cursor: usize,
    /// This load's tables in order.
    new: Vec<Entry<'t, T>>,
}

/// A table of this load as matched so far.
struct Entry<'t, T> {
    piece: &'t str,
    /// The old table found for it (None: not found in order).
    hit: Option<Parsed<T>>,
    /// When none was, the old table in its place (the one it may be a
    /// changed version of).
    earlier: Option<usize>,
}

impl<'t, T> Matcher<'t, T> {
    fn new(old: Vec<Parsed<T>>) -> Self {
        Self {
            old: old.into_iter().map(Some).collect(),
            cursor: 0,
            new: Vec::new(),
        }
    }

    /// The next table of this load, `piece`.
    fn next(&mut self, piece: &'t str) {
        let found = (self.cursor..self.old.len().min(self.cursor + 2)).find(|&i| {
            self.old[i]
                .as_ref()
                .is_some_and(|(text, _)| &**text == piece)
        });
        let hit = found.and_then(|i| {
            self.cursor = i + 1;
            self.old[i].take()
        });
        // Not found in order: the old table in its place may be its
        // earlier version (this one changed), or it is new or moved here.
        let earlier = (hit.is_none() && self.cursor < self.old.len()).then_some(self.cursor);
        self.new.push(Entry {
            piece,
            hit,
            earlier,
        });
    }

    /// Every table of this load, in order, with its text: from the old
    /// tables, else made by `parse` from its text and the old table in its
    /// place if no other took it (counted in `parsed`); None if one does
    /// not parse.
    fn finish(
        mut self,
        parsed: &mut usize,
        parse: impl Fn(&str, Option<Parsed<T>>) -> Option<T>,
    ) -> Option<(Vec<Box<str>>, Vec<T>)> {
        // The tables not found in order, by text (a table changed, added
        // or moved: usually few), are looked for among the old tables
        // nothing took.
        let mut missing: AHashMap<&str, Vec<usize>> = AHashMap::new();
        for (i, e) in self.new.iter().enumerate() {
            if e.hit.is_none() {
                missing.entry(e.piece).or_default().push(i);
            }
        }
        if !missing.is_empty() {
            for old in &mut self.old {
                let Some(i) = old
                    .as_ref()
                    .and_then(|(text, _)| missing.get_mut(&**text))
                    .and_then(Vec::pop)
                else {
                    continue;
                };
                self.new[i].hit = old.take();
            }
        }
        let mut texts = Vec::with_capacity(self.new.len());
        let mut items = Vec::with_capacity(self.new.len());
        for Entry {
            piece,
            hit,
            earlier,
        } in self.new
        {
            let (text, item) = match hit {
                Some(hit) => hit,
                None => {
                    *parsed += 1;
                    let earlier = earlier.and_then(|i| self.old[i].take());
                    (Box::from(piece), parse(piece, earlier)?)
                }
            };
            texts.push(text);
            items.push(item);
        }
        Some((texts, items))
    }
}

/// The raw tables to validate, and the validated items offered for them
/// (none unless `offer`).
fn split_tables<R, M>(tables: Vec<Table<R, M>>, offer: bool) -> (Vec<Box<R>>, Vec<Option<Arc<M>>>) {
    let mut raw = Vec::with_capacity(tables.len());
    let mut valid = Vec::with_capacity(if offer { tables.len() } else { 0 });
    for t in tables {
        raw.push(t.raw);
        if offer {
            valid.push(t.valid);
        }
    }
    (raw, valid)
}

/// How many of the `offered` items validation took as they were.
fn taken<M>(offered: &[Option<Arc<M>>], items: &[Arc<M>]) -> usize {
    offered
        .iter()
        .zip(items)
        .filter(|(o, i)| o.as_ref().is_some_and(|o| Arc::ptr_eq(o, i)))
        .count()
}

/// The cache of one kind of table: each text with its raw table and the
/// item it validated to (`valid` is empty, or one per table).
fn join_tables<R, M>(
    texts: Vec<Box<str>>,
    raw: Vec<Box<R>>,
    valid: Vec<Option<Arc<M>>>,
) -> Vec<Parsed<Table<R, M>>> {
    let mut valid = valid.into_iter();
    texts
        .into_iter()
        .zip(raw)
        .map(|(text, raw)| {
            let valid = valid.next().flatten();
            (text, Table { raw, valid })
        })
        .collect()
}

/// The only item of `items`.
fn one<T>(items: Vec<T>) -> Option<T> {
    let mut items = items.into_iter();
    let first = items.next()?;
    items.next().is_none().then_some(first)
}
