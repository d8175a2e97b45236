//! The validation context every section checker writes to: the source
//! map that turns a byte span into file:line:column, the diagnostics
//! collected so far, and the checks shared by every section (numbers in
//! range, durations, ratios, names, unique names).

use ahash::AHashMap;
use std::fmt::Display;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::diagnostics::{Diagnostic, Diagnostics, SourceMap};
use super::raw::Number;
use super::values::{self, Problem};

/// An item's field path, `kind "name"`, formatted only for an error.
#[derive(Clone, Copy)]
pub(crate) struct Named<'a>(pub &'static str, pub &'a str);

impl Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.0, self.1)
    }
}

/// `item.field`, formatted only for an error.
#[derive(Clone, Copy)]
pub(crate) struct Field<D>(pub D, pub &'static str);

impl<D: Display> Display for Field<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

pub(crate) struct Ctx<'a> {
    pub map: SourceMap<'a>,
    pub diags: Diagnostics,
    /// What `check-config` prints as warnings: the file is accepted.
    pub warnings: Diagnostics,
}

/// Names listed in a hint that offers the defined ones: enough to spot a
/// misspelling, without a hint per error as long as the file.
const NAMES_LISTED: usize = 10;

impl Ctx<'_> {
    /// Records an error at `span`. `path` is any text (often
    /// `format_args!`): formatted only if the error is kept, so a valid
    /// file of 100,000 backends formats no field path.
    pub(super) fn err(&mut self, span: Range<usize>, path: impl Display, problem: Problem) {
        self.report(span, || (path.to_string(), problem));
    }

    /// Records an error at `span`; `describe` gives its field path and
    /// problem, and is only called when the error is among those whose
    /// text is kept ([`Diagnostics::offer`]). For checks that may fail once
    /// per item of a large file.
    pub(super) fn report(
        &mut self,
        span: Range<usize>,
        describe: impl FnOnce() -> (String, Problem),
    ) {
        let (line, column) = self.map.line_col(span.start);
        self.diags.offer(Some(line), Some(column), || {
            let (path, (message, hint)) = describe();
            Diagnostic {
                line: Some(line),
                column: Some(column),
                path,
                message,
                hint,
            }
        });
    }

    /// Records a warning at `span`: not an error, the file is accepted
    /// (`describe` as for [`Ctx::report`]).
    pub(super) fn warn(
        &mut self,
        span: Range<usize>,
        describe: impl FnOnce() -> (String, Problem),
    ) {
        let (line, column) = self.map.line_col(span.start);
        self.warnings.offer(Some(line), Some(column), || {
            let (path, (message, hint)) = describe();
            Diagnostic {
                line: Some(line),
                column: Some(column),
                path,
                message,
                hint,
            }
        });
    }

    /// The line `offset` is on, for messages that point at another item.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.map.line_col(offset).0
    }

    /// Parses a spanned string; on failure records the error and gives None.
    pub(super) fn parse<T>(
        &mut self,
        v: &Spanned<String>,
        path: impl Display,
        f: impl FnOnce(&str) -> Result<T, Problem>,
    ) -> Option<T> {
        match f(v.get_ref()) {
            Ok(t) => Some(t),
            Err(p) => {
                self.err(v.span(), path, p);
                None
            }
        }
    }

    pub(super) fn int<T: TryFrom<i64>>(
        &mut self,
        v: &Option<Spanned<i64>>,
        default: T,
        (lo, hi): (i64, i64),
        path: impl Display,
        what: &str,
    ) -> T {
        match v {
            None => default,
            Some(v) => match values::int_in(*v.get_ref(), lo, hi, what) {
                Ok(t) => t,
                Err(p) => {
                    self.err(v.span(), path, p);
                    default
                }
            },
        }
    }

    pub(super) fn duration(
        &mut self,
        v: &Option<Spanned<String>>,
        default: Duration,
        path: impl Display,
    ) -> Duration {
        v.as_ref()
            .and_then(|v| self.parse(v, path, values::duration))
            .unwrap_or(default)
    }

    pub(super) fn ratio(&mut self, v: &Option<Spanned<Number>>, path: impl Display) -> f64 {
        let Some(v) = v else { return 0.0 };
        let r = v.get_ref().as_f64();
        if !(0.0..=1.0).contains(&r) {
            self.err(
                v.span(),
                path,
                (
                    format!("ratio {r} is outside [0.0, 1.0]"),
                    "use a fraction between 0.0 and 1.0".into(),
                ),
            );
            return 0.0;
        }
        r
    }

    /// GCP resource names: RFC 1035 labels. They become metric labels and
    /// appear in logs, so keep them unambiguous.
    pub(super) fn name(&mut self, v: &Spanned<String>, kind: &str) {
        let s = v.get_ref();
        let ok = s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            self.err(
                v.span(),
                format!("{kind} {s:?}.name"),
                (
                    format!("invalid name {s:?}"),
                    "names are 1-63 characters: lowercase letters, digits and hyphens, \
                     starting with a letter and not ending with a hyphen"
                        .into(),
                ),
            );
        }
    }

    /// Records duplicate names within one kind of section.
    pub(super) fn unique<'n>(
        &mut self,
        names: impl Iterator<Item = &'n Spanned<String>>,
        kind: &str,
    ) {
        let mut seen: AHashMap<&str, usize> = AHashMap::with_capacity(names.size_hint().0);
        for n in names {
            let name = n.get_ref();
            let Some(&first) = seen.get(name.as_str()) else {
                seen.insert(name, n.span().start);
                continue;
            };
            let line = self.line_of(first);
            self.report(n.span(), || {
                (
                    format!("{kind} {name:?}.name"),
                    (
                        format!("duplicate {kind} name {name:?} (first defined on line {line})"),
                        format!("give each {kind} a unique name"),
                    ),
                )
            });
        }
    }
}

/// The names a reference may use, quoted, for a hint: the first
/// [`NAMES_LISTED`] and how many more.
pub(crate) fn names_listed<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> String {
    let total = names.len();
    let mut listed: Vec<String> = names.take(NAMES_LISTED).map(|n| format!("{n:?}")).collect();
    if total > NAMES_LISTED {
        listed.push(format!("… ({} more)", total - NAMES_LISTED));
    }
    listed.join(", ")
}

/// Index of each name in a section, for references to it: the first of a
/// repeated name (repeats are errors of their own, [`Ctx::unique`]).
pub(crate) fn name_index<'n>(
    names: impl Iterator<Item = &'n Spanned<String>>,
) -> AHashMap<&'n str, usize> {
    let mut index = AHashMap::with_capacity(names.size_hint().0);
    for (i, n) in names.enumerate() {
        index.entry(n.get_ref().as_str()).or_insert(i);
    }
    index
}
