//! The validation context every section checker writes to: the source
//! map that turns a byte span into file:line:column, the diagnostics
//! collected so far, and the checks shared by every section (numbers in
//! range, durations, ratios, names, unique names).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::diagnostics::{Diagnostics, SourceMap};
use super::raw::Number;
use super::values::{self, Problem};

pub(crate) struct Ctx<'a> {
    pub map: SourceMap<'a>,
    pub diags: Diagnostics,
}

impl Ctx<'_> {
    pub fn err(&mut self, span: Range<usize>, path: &str, (message, hint): Problem) {
        let d = self.map.diagnostic(span, path, message, hint);
        self.diags.push(d);
    }

    /// Parses a spanned string; on failure records the error and gives None.
    pub fn parse<T>(
        &mut self,
        v: &Spanned<String>,
        path: &str,
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

    pub fn int<T: TryFrom<i64>>(
        &mut self,
        v: &Option<Spanned<i64>>,
        default: T,
        (lo, hi): (i64, i64),
        path: &str,
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

    pub fn duration(
        &mut self,
        v: &Option<Spanned<String>>,
        default: Duration,
        path: &str,
    ) -> Duration {
        v.as_ref()
            .and_then(|v| self.parse(v, path, values::duration))
            .unwrap_or(default)
    }

    pub fn ratio(&mut self, v: &Option<Spanned<Number>>, path: &str) -> f64 {
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
    pub fn name(&mut self, v: &Spanned<String>, kind: &str) {
        let s = v.get_ref();
        let ok = s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            self.err(
                v.span(),
                &format!("{kind} {s:?}.name"),
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
    pub fn unique<'n>(&mut self, names: impl Iterator<Item = &'n Spanned<String>>, kind: &str) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for n in names {
            if let Some(&first) = seen.get(n.get_ref().as_str()) {
                let (line, _) = self.map.line_col(first);
                self.err(
                    n.span(),
                    &format!("{kind} {:?}.name", n.get_ref()),
                    (
                        format!(
                            "duplicate {kind} name {:?} (first defined on line {line})",
                            n.get_ref()
                        ),
                        format!("give each {kind} a unique name"),
                    ),
                );
            } else {
                seen.insert(n.get_ref(), n.span().start);
            }
        }
    }
}
