//! Operator-facing configuration errors.
//!
//! Every error names the file, line and column, the field path (in the
//! config's own vocabulary, e.g. `backend_service "web" backend[2].address`),
//! what is wrong, and how to fix it. Validation collects every error in one
//! run so an operator fixes a file in one pass, not one error per attempt.

use std::fmt;
use std::ops::Range;

/// One configuration error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based; `None` when the error is not about a place in the file
    /// (e.g. the file cannot be read).
    pub line: Option<usize>,
    /// 1-based, in characters.
    pub column: Option<usize>,
    /// Where in the configuration, e.g. `forwarding_rule "web-vip".ports`.
    pub path: String,
    pub message: String,
    pub hint: String,
}

/// Every error found in one configuration file. `Display` prints them all,
/// one `FILE:LINE:COL: error: PATH: MESSAGE` line each plus an indented hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics {
    origin: String,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new(origin: impl Into<String>) -> Self {
        Self {
            origin: origin.into(),
            items: Vec::new(),
        }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Orders errors by position so the output reads top to bottom; errors
    /// without a position come first (they are about the whole file).
    pub(crate) fn sort(&mut self) {
        self.items.sort_by_key(|d| (d.line, d.column));
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.origin)?;
            if let (Some(l), Some(c)) = (d.line, d.column) {
                write!(f, ":{l}:{c}")?;
            }
            write!(f, ": error: ")?;
            if !d.path.is_empty() {
                write!(f, "{}: ", d.path)?;
            }
            write!(f, "{}\n  hint: {}", d.message, d.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Maps byte offsets of the source text to 1-based line and column.
pub(crate) struct SourceMap<'a> {
    text: &'a str,
}

impl<'a> SourceMap<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self { text }
    }

    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }

    pub(crate) fn diagnostic(
        &self,
        span: Range<usize>,
        path: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Diagnostic {
        let (line, column) = self.line_col(span.start);
        Diagnostic {
            line: Some(line),
            column: Some(column),
            path: path.into(),
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// Turns a TOML syntax or shape error (unknown field, wrong type, missing
    /// field) into a diagnostic. toml reports a span but no key path, so the
    /// path is reconstructed from the table headers above the error.
    pub(crate) fn toml_error_diagnostic(&self, err: &toml::de::Error) -> Diagnostic {
        let offset = err.span().map_or(0, |s| s.start);
        let message = err.message().trim().lines().collect::<Vec<_>>().join(": ");
        let path = self.path_at(offset);
        let hint = hint_for_toml_message(&message);
        let (line, column) = self.line_col(offset);
        Diagnostic {
            line: Some(line),
            column: Some(column),
            path,
            message,
            hint,
        }
    }

    /// The table path at `offset`: the nearest `[header]` / `[[header]]`
    /// above it (array-of-tables headers indexed by how many precede), plus
    /// the key on the error's own line when there is one.
    fn path_at(&self, offset: usize) -> String {
        let offset = offset.min(self.text.len());
        let before = self.text.get(..offset).unwrap_or("");
        let mut counts: Vec<(String, usize)> = Vec::new();
        let mut table = String::new();
        // The error's own line counts: toml points missing-field errors at
        // the table's header.
        let line_end = self.text[offset..]
            .find('\n')
            .map_or(self.text.len(), |i| offset + i);
        for line in self.text[..line_end].lines() {
            let t = line.trim();
            if let Some(h) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
                let h = h.trim().to_string();
                let n = match counts.iter_mut().find(|(k, _)| *k == h) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        counts.push((h.clone(), 0));
                        0
                    }
                };
                table = format!("{h}[{n}]");
            } else if let Some(h) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
                table = h.trim().to_string();
            }
        }
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = self.text[line_start..].lines().next().unwrap_or("");
        let is_ident = |k: &str| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
        };
        let line_key = line
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| is_ident(k));
        // toml points at the offending key itself for unknown fields, which
        // may sit inside an inline table (`x = { bad = 1 }`).
        let word: String = self.text[offset..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_-".contains(*c))
            .collect();
        let mut parts: Vec<&str> = Vec::new();
        if !table.is_empty() {
            parts.push(&table);
        }
        if let Some(k) = line_key {
            parts.push(k);
        }
        if is_ident(&word)
            && line_key != Some(word.as_str())
            && !word.chars().all(|c| c.is_ascii_digit())
        {
            parts.push(&word);
        }
        parts.join(".")
    }
}

fn hint_for_toml_message(message: &str) -> String {
    if message.contains("duplicate key") {
        "each key and each [table] may appear once; remove or merge the repeated one".into()
    } else if message.starts_with("unknown field") {
        "remove the field or fix its spelling (the valid names are listed above); \
         see docs/configuration.md"
            .into()
    } else if message.starts_with("missing field") {
        "add the required field to this table; see docs/configuration.md".into()
    } else if message.starts_with("invalid type") {
        "give the value the type the field expects (strings in quotes, numbers \
         without, lists in [ ])"
            .into()
    } else if message.starts_with("invalid value") {
        "use a value in the range the field allows; see docs/configuration.md".into()
    } else {
        "fix the TOML syntax here (quotes, brackets, `key = value`)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_from_one() {
        let m = SourceMap::new("a = 1\nbé = \"x\"\n");
        assert_eq!(m.line_col(0), (1, 1));
        assert_eq!(m.line_col(6), (2, 1));
        assert_eq!(m.line_col(10), (2, 4));
    }

    #[test]
    fn path_from_headers() {
        let text = "[dataplane]\n[[backend_service]]\nname='a'\n[[backend_service]]\nbogus = 1\n";
        let m = SourceMap::new(text);
        let off = text.find("bogus").unwrap();
        assert_eq!(m.path_at(off), "backend_service[1].bogus");
    }
}
