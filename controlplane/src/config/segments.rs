//! The configuration file cut into the pieces a reload can reuse: each
//! `[[backend_service]]` and `[[forwarding_rule]]` table (with the
//! sub-tables that follow its header, `[backend_service.connection_tracking]`
//! and the like) is one piece, everything else is "the rest".
//!
//! A scanner, not a parser: it follows strings, comments and brackets only
//! far enough to know where table headers are (a `[` that starts a line
//! outside any string or value). Whatever it is not sure of — a quoted
//! header, an unterminated string, a sub-table away from its item, a
//! bracket that does not close, a key before the first table — makes it
//! give up, and the caller parses
//! the whole file instead. Pieces are parsed with the same TOML parser as
//! the whole file, and `tests/config_incremental.rs` checks that both
//! ways give the same configuration.

use std::ops::Range;

/// Which array of tables a piece is an item of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    Service,
    Rule,
}

impl Item {
    fn of(header: &str) -> Option<Self> {
        match header {
            "backend_service" => Some(Self::Service),
            "forwarding_rule" => Some(Self::Rule),
            _ => None,
        }
    }
}

/// The file as pieces: each item's byte range, in file order, and the
/// rest's ranges (which, put together, are a TOML document of their own).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Layout {
    pub items: Vec<(Item, Range<usize>)>,
    pub rest: Vec<Range<usize>>,
}

impl Layout {
    /// The rest as one document.
    pub(super) fn rest_text(&self, text: &str) -> String {
        let mut out = String::with_capacity(self.rest.iter().map(|r| r.len() + 1).sum());
        for r in &self.rest {
            out.push_str(&text[r.clone()]);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

/// Cuts `text` into pieces, or None when the scanner is not sure where
/// its tables start.
pub(crate) fn split(text: &str) -> Option<Layout> {
    let headers = headers(text)?;
    let mut layout = Layout::default();
    // The piece being collected: an item (kind, start) or the rest (start).
    let mut current: (Option<Item>, usize) = (None, 0);
    let close = |current: (Option<Item>, usize), end: usize, layout: &mut Layout| {
        let range = current.1..end;
        match current.0 {
            Some(item) => layout.items.push((item, range)),
            None if range.is_empty() => {}
            None => layout.rest.push(range),
        }
    };
    for h in headers {
        let first = h.name.split('.').next().unwrap_or_default();
        let item = Item::of(first);
        match (item, h.array, h.name.contains('.')) {
            // A new item.
            (Some(item), true, false) => {
                close(current, h.start, &mut layout);
                current = (Some(item), h.start);
            }
            // A sub-table of the item just above: part of it.
            (Some(item), _, true) if current.0 == Some(item) => {}
            // `[backend_service]`, or a sub-table away from its item: the
            // whole-file parse says what it means (or what is wrong).
            (Some(_), _, _) => return None,
            // Any other table: the rest.
            (None, _, _) => {
                if current.0.is_some() {
                    close(current, h.start, &mut layout);
                    current = (None, h.start);
                }
            }
        }
    }
    close(current, text.len(), &mut layout);
    Some(layout)
}

/// A table header: where its line starts, its name without spaces, and
/// whether it is an array-of-tables header.
struct Header<'a> {
    start: usize,
    name: std::borrow::Cow<'a, str>,
    array: bool,
}

/// The bytes the header scanner looks at; a run of any others is skipped
/// whole (most of a file: keys, addresses, names).
const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut k = 0;
    let bytes = b"\n \t\r#[]{}\"'";
    while k < bytes.len() {
        t[bytes[k] as usize] = true;
        k += 1;
    }
    t
};

/// Every table header of `text`, or None when unsure.
fn headers(text: &str) -> Option<Vec<Header<'_>>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // Open `[` / `{` of values.
    let mut depth = 0usize;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let at_line_start = std::mem::replace(&mut line_start, false);
        if !SPECIAL[usize::from(c)] {
            // A key or a bare value: nothing here opens or closes.
            if out.is_empty() {
                // A key before the first table is a top-level key: it
                // might be `backend_service = [...]`, which only the
                // whole file can order against the tables.
                return None;
            }
            i += 1;
            while i < b.len() && !SPECIAL[usize::from(b[i])] {
                i += 1;
            }
            continue;
        }
        match c {
            b'#' => i = line_end(b, i),
            // A key before the first table is a top-level key: it might
            // be `backend_service = [...]`, which only the whole file can
            // order against the tables.
            _ if out.is_empty() && c != b'[' => return None,
            b'[' if depth == 0 && at_line_start => {
                let (header, next) = header(text, i)?;
                out.push(header);
                i = next;
            }
            b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            b'"' | b'\'' => i = string_end(b, i)?,
            _ => i += 1,
        }
    }
    (depth == 0).then_some(out)
}

fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |n| i + n)
}

/// The header starting at `i` (a `[` at the start of a line), and where
/// scanning goes on (its line's end). None for a quoted or odd header.
fn header(text: &str, i: usize) -> Option<(Header<'_>, usize)> {
    let b = text.as_bytes();
    let end = line_end(b, i);
    let line = &text[i..end];
    let array = line.starts_with("[[");
    let open = if array { 2 } else { 1 };
    let close = if array { "]]" } else { "]" };
    // A `]` can only end the name: a quoted name is refused below.
    let inner_end = line.bytes().position(|c| c == b']')?;
    if !line[inner_end..].starts_with(close) {
        return None;
    }
    let inner = line.get(open..inner_end)?;
    let after = line[inner_end + close.len()..].trim_start();
    if !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    let name: std::borrow::Cow<'_, str> = if inner.bytes().any(|c| c.is_ascii_whitespace()) {
        inner.chars().filter(|c| !c.is_ascii_whitespace()).collect()
    } else {
        inner.into()
    };
    let plain = name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.');
    if name.is_empty() || !plain {
        return None;
    }
    // The start of the header's line, so an item's piece begins there.
    let start = text[..i].rfind('\n').map_or(0, |n| n + 1);
    Some((Header { start, name, array }, end))
}

/// Past the string that opens at `i`; None if it never closes.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let q = b[i];
    let triple = b.get(i..i + 3) == Some(&[q, q, q][..]);
    if triple {
        let mut j = i + 3;
        loop {
            match b.get(j)? {
                b'\\' if q == b'"' => j += 2,
                &c if c == q && b.get(j..j + 3) == Some(&[q, q, q][..]) => {
                    // Up to two more quotes belong to the content.
                    let mut k = j + 3;
                    while k < j + 5 && b.get(k) == Some(&q) {
                        k += 1;
                    }
                    return Some(k);
                }
                _ => j += 1,
            }
        }
    }
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' if q == b'"' => j += 2,
            b'\n' => return None,
            &c if c == q => return Some(j + 1),
            _ => j += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Option<(Vec<(Item, &str)>, String)> {
        let l = split(text)?;
        let items = l
            .items
            .iter()
            .map(|(k, r)| (*k, &text[r.clone()]))
            .collect();
        Some((items, l.rest_text(text)))
    }

    #[test]
    fn items_with_their_sub_tables_and_the_rest() {
        let text = "[dataplane]\nworkers = 1\n\
            [[backend_service]]\nname = \"a\"\nbackend = [\n  { address = \"10.0.0.1\" },\n]\n\
            [backend_service.connection_tracking]\nidle_timeout = \"5s\"\n\
            [[forwarding_rule]]\nname = \"r\" # [[x]]\n\
            [metrics]\nlisten = \"[::1]:9\"\n";
        let (items, rest) = pieces(text).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].0, Item::Service);
        assert!(items[0].1.starts_with("[[backend_service]]"));
        assert!(items[0].1.ends_with("idle_timeout = \"5s\"\n"));
        assert_eq!(
            items[1],
            (Item::Rule, "[[forwarding_rule]]\nname = \"r\" # [[x]]\n")
        );
        assert_eq!(
            rest,
            "[dataplane]\nworkers = 1\n[metrics]\nlisten = \"[::1]:9\"\n"
        );
    }

    #[test]
    fn brackets_in_strings_and_arrays_are_not_headers() {
        let text = "[dataplane]\neal_args = [\n[\"a\"],\n\"\"\"\n[[backend_service]]\n\"\"\",\n'''\n[x]'''\n]\n\
            [[backend_service]]\nname = 'b'\n";
        let (items, rest) = pieces(text).unwrap();
        assert_eq!(
            items,
            vec![(Item::Service, "[[backend_service]]\nname = 'b'\n")]
        );
        assert!(rest.contains("[[backend_service]]\n\"\"\""));
    }

    #[test]
    fn unsure_means_none() {
        for text in [
            "[\"backend_service\"]\n",
            "[[backend_service]]\n[metrics]\n[backend_service.zonal_affinity]\n",
            "[backend_service]\nname = \"a\"\n",
            "a = \"open\n",
            "a = [1, 2\n",
            "a = ]\n",
            "[[forwarding_rule]] x\n",
            "backend_service = []\n[[backend_service]]\n",
            "x = 1\n[metrics]\n",
        ] {
            assert_eq!(split(text), None, "{text:?}");
        }
    }
}
