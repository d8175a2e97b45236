//! Operator-facing configuration errors.
//!
//! Every error names the file, line and column, the field path (in the
//! config's own vocabulary, e.g. `backend_service "web" backend[2].address`),
//! what is wrong, and how to fix it. Validation finds every error in one
//! run so an operator fixes a file in one pass, not one error per attempt;
//! it keeps the text of the first [`KEPT`] in file order and counts the
//! rest, so a file with errors by the hundred thousand is refused in
//! bounded time, memory and output.

use std::fmt;

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

/// Errors kept with their text: the first ones in file order. Past this
/// many an error is only counted, so a file with a million errors costs a
/// counter rather than a million strings, and what is printed, replied
/// or logged stays readable.
pub const KEPT: usize = 100;

/// Longest path, message or hint printed, in bytes: a value the file
/// repeats into an error (a name, an address) may be megabytes long.
const MAX_FIELD: usize = 1024;

/// Every error found in one configuration file: the first [`KEPT`] in
/// file order with their text, and how many more there are. `Display`
/// prints the kept ones, one `FILE:LINE:COL: error: PATH: MESSAGE` line
/// each plus an indented hint, then `… and N more errors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics {
    origin: String,
    /// What each one is, as printed: `error` or `warning`.
    severity: &'static str,
    /// Sorted by position; at most [`KEPT`].
    kept: Vec<Kept>,
    /// Errors found but not kept.
    dropped: usize,
    /// Errors offered so far: orders errors at one position by arrival.
    arrivals: u64,
}

/// Where an error sorts: errors without a position first (they are about
/// the whole file), then by line and column, then by arrival.
type Position = (Option<usize>, Option<usize>, u64);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept {
    at: Position,
    diagnostic: Diagnostic,
}

impl Diagnostics {
    pub fn new(origin: impl Into<String>) -> Self {
        Self::with_severity(origin, "error")
    }

    /// Warnings about a file that is accepted: printed as
    /// `FILE:LINE:COL: warning: …`, kept and counted as errors are.
    pub fn warnings(origin: impl Into<String>) -> Self {
        Self::with_severity(origin, "warning")
    }

    fn with_severity(origin: impl Into<String>, severity: &'static str) -> Self {
        Self {
            origin: origin.into(),
            severity,
            kept: Vec::new(),
            dropped: 0,
            arrivals: 0,
        }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Every error found, the kept and the only counted ones.
    pub fn len(&self) -> usize {
        self.kept.len() + self.dropped
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kept errors (the first [`KEPT`] in file order), top to bottom.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.kept.iter().map(|k| &k.diagnostic)
    }

    /// The errors printed with their text: the first `shown` kept ones,
    /// then how many more there are.
    pub fn shown(&self, shown: usize) -> Shown<'_> {
        Shown { all: self, shown }
    }

    pub fn push(&mut self, d: Diagnostic) {
        self.offer(d.line, d.column, || d);
    }

    /// Records an error at `line`:`column`; `make` builds its text only
    /// when the error is among the first [`KEPT`] in file order, so
    /// counting errors past them formats nothing.
    pub(crate) fn offer(
        &mut self,
        line: Option<usize>,
        column: Option<usize>,
        make: impl FnOnce() -> Diagnostic,
    ) {
        let at = (line, column, self.arrivals);
        self.arrivals += 1;
        if self.kept.len() == KEPT && self.kept.last().is_some_and(|worst| worst.at < at) {
            self.dropped += 1;
            return;
        }
        let i = self.kept.partition_point(|k| k.at < at);
        let diagnostic = make();
        self.kept.insert(i, Kept { at, diagnostic });
        if self.kept.len() > KEPT {
            self.kept.pop();
            self.dropped += 1;
        }
    }
}

/// [`Diagnostics`] printed up to a number of errors; see
/// [`Diagnostics::shown`].
pub struct Shown<'a> {
    all: &'a Diagnostics,
    shown: usize,
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = &self.all.origin;
        for (i, d) in self.all.iter().take(self.shown).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{origin}")?;
            if let (Some(l), Some(c)) = (d.line, d.column) {
                write!(f, ":{l}:{c}")?;
            }
            write!(f, ": {}: ", self.all.severity)?;
            if !d.path.is_empty() {
                write!(f, "{}: ", elided(&d.path))?;
            }
            write!(f, "{}\n  hint: {}", elided(&d.message), elided(&d.hint))?;
        }
        let printed = self.all.kept.len().min(self.shown);
        let more = self.all.len() - printed;
        if more > 0 {
            if printed > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{origin}: … and {more} more {}{} (the first {printed} in file order are shown)",
                self.all.severity,
                if more == 1 { "" } else { "s" }
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shown(KEPT).fmt(f)
    }
}

impl std::error::Error for Diagnostics {}

/// `text` cut to about [`MAX_FIELD`] bytes: its start and its end, which
/// carry the field path's head and the message's fix, around a `…`.
fn elided(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_FIELD {
        return text.into();
    }
    let half = MAX_FIELD / 2;
    let head_end = (0..=half)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let tail_start = (text.len() - half..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    let cut = tail_start - head_end;
    format!(
        "{} … ({cut} bytes elided) … {}",
        &text[..head_end],
        &text[tail_start..]
    )
    .into()
}

/// Bytes per checkpoint of [`SourceMap`]'s character count: a column
/// costs at most this many bytes counted, however long its line.
const CHAR_BLOCK: usize = 1024;

/// Maps byte offsets of the source text to 1-based line and column in
/// O(log lines + [`CHAR_BLOCK`]), so errors cost the same anywhere in a
/// large file.
pub(crate) struct SourceMap<'a> {
    text: &'a str,
    /// Built at the first error: a valid file of 10 MB needs none.
    index: std::cell::OnceCell<LineIndex>,
}

struct LineIndex {
    /// Byte offset of each line's first byte.
    line_starts: Vec<usize>,
    /// Characters before each multiple of [`CHAR_BLOCK`].
    chars_before_block: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        // One entry per whole block and one for the start, so every offset
        // up to the text's end has its block's entry.
        let mut chars = 0;
        let chars_before_block = std::iter::once(0)
            .chain(text.as_bytes().chunks_exact(CHAR_BLOCK).map(|block| {
                chars += char_starts(block);
                chars
            }))
            .collect();
        Self {
            line_starts,
            chars_before_block,
        }
    }
}

impl<'a> SourceMap<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            index: std::cell::OnceCell::new(),
        }
    }

    fn index(&self) -> &LineIndex {
        self.index.get_or_init(|| LineIndex::new(self.text))
    }

    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let starts = &self.index().line_starts;
        let line = starts.partition_point(|&s| s <= offset);
        let line_start = starts[line - 1];
        let column = self.chars_before(offset) - self.chars_before(line_start) + 1;
        (line, column)
    }

    /// Characters that start before byte `offset`.
    fn chars_before(&self, offset: usize) -> usize {
        let block = offset / CHAR_BLOCK;
        self.index().chars_before_block[block]
            + char_starts(&self.text.as_bytes()[block * CHAR_BLOCK..offset])
    }

    /// Turns a TOML syntax or shape error (unknown field, wrong type, missing
    /// field) into a diagnostic. toml reports a span but no key path, so the
    /// path is reconstructed from the table headers above the error.
    pub(crate) fn toml_error_diagnostic(&self, err: &toml::de::Error) -> Diagnostic {
        let offset = err.span().map_or(0, |s| s.start);
        let message = err.message().trim().lines().collect::<Vec<_>>().join(": ");
        // Only these point at a key; other errors point into a value,
        // which the path must not repeat (it may be a secret).
        let at_key = message.starts_with("unknown field") || message.contains("duplicate key");
        let path = self.path_at(offset, at_key);
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
    fn path_at(&self, offset: usize, at_key: bool) -> String {
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
        if at_key
            && is_ident(&word)
            && line_key != Some(word.as_str())
            && !word.chars().all(|c| c.is_ascii_digit())
        {
            parts.push(&word);
        }
        parts.join(".")
    }
}

/// Characters starting in `bytes` (UTF-8: every byte that is not a
/// continuation byte starts one).
fn char_starts(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b & 0xC0 != 0x80).count()
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

    /// Columns count characters on lines far longer than a checkpoint
    /// block, with multi-byte characters across block boundaries.
    #[test]
    fn line_col_on_long_lines() {
        let line = "é".repeat(3000) + "x";
        let text = format!("a\n{line}\n{line}");
        let m = SourceMap::new(&text);
        let x = text.find('x').unwrap();
        assert_eq!(m.line_col(x), (2, 3001));
        assert_eq!(m.line_col(text.len()), (3, 3002));
        assert_eq!(m.line_col(text.len() + 5), (3, 3002));
        assert_eq!(SourceMap::new("").line_col(0), (1, 1));
    }

    fn at(line: usize) -> Diagnostic {
        Diagnostic {
            line: Some(line),
            column: Some(1),
            path: "p".into(),
            message: format!("m{line}"),
            hint: "h".into(),
        }
    }

    /// The first KEPT errors in file order are kept whatever order they
    /// are found in; the rest are counted without building their text.
    #[test]
    fn keeps_the_first_errors_in_file_order_and_counts_the_rest() {
        let mut d = Diagnostics::new("f.toml");
        for line in (1..=KEPT * 3).rev() {
            d.push(at(line));
        }
        for line in KEPT + 1..KEPT * 2 {
            d.offer(Some(line), Some(1), || panic!("built a dropped error"));
        }
        assert_eq!(d.len(), KEPT * 4 - 1);
        let lines: Vec<usize> = d.iter().filter_map(|e| e.line).collect();
        assert_eq!(lines, (1..=KEPT).collect::<Vec<_>>());
        let shown = d.shown(2).to_string();
        assert!(
            shown.starts_with("f.toml:1:1: error: p: m1\n  hint: h\nf.toml:2:1:"),
            "{shown}"
        );
        assert!(
            shown.ends_with(&format!(
                "f.toml: … and {} more errors (the first 2 in file order are shown)",
                KEPT * 4 - 3
            )),
            "{shown}"
        );
        assert_eq!(d.to_string().matches(": error: ").count(), KEPT);
    }

    #[test]
    fn long_fields_are_elided_in_the_middle() {
        let long = format!("head{}tail", "x".repeat(10 * MAX_FIELD));
        let shown = elided(&long);
        assert!(shown.len() < MAX_FIELD + 64, "{}", shown.len());
        assert!(
            shown.starts_with("head") && shown.ends_with("tail"),
            "{shown}"
        );
        assert!(shown.contains("bytes elided"), "{shown}");
        assert_eq!(elided("short"), "short");
    }

    #[test]
    fn path_from_headers() {
        let text = "[dataplane]\n[[backend_service]]\nname='a'\n[[backend_service]]\nbogus = 1\n";
        let m = SourceMap::new(text);
        let off = text.find("bogus").unwrap();
        assert_eq!(m.path_at(off, true), "backend_service[1].bogus");
        // A syntax error inside a value does not repeat the value.
        let text = "[dataplane]\nflow_hash_key = 0a1b2c3d\n";
        let m = SourceMap::new(text);
        let off = text.find("a1b2").unwrap();
        assert_eq!(m.path_at(off, false), "dataplane.flow_hash_key");
    }
}
