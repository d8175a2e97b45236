//! A service table changed only in lines of its backend array, parsed
//! again line by line (AP-5).
//!
//! One service with 100,000 backends is one `[[backend_service]]` table
//! of ~6 MB; a reload that changes one backend's weight changes that
//! table, whose parse was most of the reload. When the table is written
//! one backend per line (`{ address = …, … },`, as large generated files
//! are) and the new text differs from the old one only in such lines,
//! the old table's backends are kept and only the changed lines are
//! parsed. Anything else — lines added or removed, a change outside the
//! backend lines, a line that is not exactly one inline table — and the
//! caller parses the whole table.

use serde::Deserialize;
use toml::Spanned;

use super::raw::{RawBackend, RawService};

/// One backend line parsed on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendLine {
    backend: Vec<Spanned<RawBackend>>,
}

/// `old` (what `old_text` parsed to) made what `new_text` parses to, by
/// parsing only the backend lines that differ; None when the texts differ
/// in any other way (see the module doc).
pub(super) fn patch(
    old_text: &str,
    mut old: Box<RawService>,
    new_text: &str,
) -> Option<Box<RawService>> {
    // A line inside a multi-line string is not a backend line, whatever
    // it looks like.
    if [old_text, new_text]
        .iter()
        .any(|t| t.contains("\"\"\"") || t.contains("'''"))
    {
        return None;
    }
    let mut old_lines = old_text.split_inclusive('\n');
    let mut new_lines = new_text.split_inclusive('\n');
    // Backend lines in order: the k-th is backend k.
    let mut k = 0;
    let mut changed: Vec<(usize, &str)> = Vec::new();
    loop {
        match (old_lines.next(), new_lines.next()) {
            (None, None) => break,
            (Some(o), Some(n)) if o == n => {
                if starts_backend(o) {
                    if !one_backend(o) {
                        return None;
                    }
                    k += 1;
                }
            }
            (Some(o), Some(n)) if one_backend(o) && one_backend(n) => {
                changed.push((k, n));
                k += 1;
            }
            _ => return None,
        }
    }
    if k != old.backend.len() {
        return None;
    }
    for (i, line) in changed {
        let parsed = toml::from_str::<BackendLine>(&format!("backend = [{line}]")).ok()?;
        let [b] = <[_; 1]>::try_from(parsed.backend).ok()?;
        old.backend[i] = b;
    }
    Some(old)
}

/// Whether `line` starts an inline table (in a service table, only a
/// backend array's element does).
fn starts_backend(line: &str) -> bool {
    line.trim_start().starts_with('{')
}

/// Whether `line` is exactly one inline table and an optional comma: a
/// `{` that opens it and the `}` that closes it at its end, at most one
/// level of inline tables inside (`quic_server_ids = { … }`), and no
/// bracket or comment anywhere (a string holding one makes the caller
/// parse the table, or the line's own parse says what it holds).
fn one_backend(line: &str) -> bool {
    let t = line.trim();
    let t = t.strip_suffix(',').unwrap_or(t).trim_end();
    if !t.starts_with('{') || !t.ends_with('}') {
        return false;
    }
    let mut depth = 0u32;
    for (i, c) in t.bytes().enumerate() {
        match c {
            b'{' if depth < 2 => depth += 1,
            b'}' if depth > 0 => {
                depth -= 1;
                // Closed before the end: two tables, or a brace in a string.
                if depth == 0 && i + 1 != t.len() {
                    return false;
                }
            }
            b'{' | b'}' | b'[' | b']' | b'#' => return false,
            _ => {}
        }
    }
    depth == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Box<RawService> {
        #[derive(Deserialize)]
        struct Piece {
            backend_service: Vec<RawService>,
        }
        Box::new(
            toml::from_str::<Piece>(text)
                .unwrap()
                .backend_service
                .pop()
                .unwrap(),
        )
    }

    const OLD: &str = "[[backend_service]]\nname = \"s\"\nbackend = [\n  { address = \"10.0.0.1\" },\n  { address = \"10.0.0.2\", weight = 2 },\n]\n";

    /// Each backend's fields (spans differ: a patched line was parsed
    /// on its own).
    fn backends(s: &RawService) -> Vec<String> {
        s.backend
            .iter()
            .map(|b| {
                let b = b.get_ref();
                format!(
                    "{} {:?} {:?} {:?} {:?} {:?} {:?}",
                    b.address.get_ref(),
                    b.mac.as_ref().map(|m| m.get_ref()),
                    b.zone.as_ref().map(|z| z.get_ref()),
                    b.failover,
                    b.weight.as_ref().map(|w| *w.get_ref()),
                    b.quic_server_id.as_ref().map(|q| q.get_ref()),
                    b.quic_server_ids.as_ref().map(|q| q
                        .get_ref()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.get_ref().clone()))
                        .collect::<Vec<_>>()),
                )
            })
            .collect()
    }

    #[test]
    fn ap_5_changed_backend_lines_only_are_parsed() {
        for new in [
            OLD.replace("weight = 2", "weight = 3"),
            OLD.replace(
                "\"10.0.0.1\" }",
                "\"10.0.0.7\", mac = \"02:00:00:00:00:07\", failover = true }",
            ),
            OLD.replace("  {", "{"),
            // QUIC-LB server IDs, with one level of inline table.
            OLD.replace("weight = 2 }", "weight = 2, quic_server_id = \"0a0b02\" }"),
            OLD.replace(
                "weight = 2 }",
                "quic_server_id = \"0a0b02\", quic_server_ids = { \"1\" = \"c002\" } }",
            ),
        ] {
            let got = patch(OLD, parse(OLD), &new).expect("backend lines changed");
            let whole = parse(&new);
            assert_eq!(backends(&got), backends(&whole), "{new}");
            assert_eq!(got.name.get_ref(), whole.name.get_ref());
        }
    }

    #[test]
    fn anything_else_is_left_to_the_whole_parse() {
        for new in [
            OLD.replace("name = \"s\"", "name = \"t\""),
            OLD.replace("  { address = \"10.0.0.1\" },\n", ""),
            OLD.replace("},\n]", "},\n  { address = \"10.0.0.3\" },\n]"),
            OLD.replace("weight = 2 }", "weight = 2 } # [x]"),
            OLD.replace(
                "{ address = \"10.0.0.1\" }",
                "{ address = \"10.0.0.1\" }, { address = \"10.0.0.9\" }",
            ),
            OLD.replace("{ address = \"10.0.0.1\" },", "{ address = \"10.0.0.1\","),
            // Two tables on a line, however nested; deeper nesting.
            OLD.replace(
                "{ address = \"10.0.0.1\" }",
                "{ address = \"10.0.0.1\", quic_server_ids = { \"1\" = \"c001\" } }, { address = \"10.0.0.9\" }",
            ),
            OLD.replace(
                "{ address = \"10.0.0.1\" }",
                "{ address = \"10.0.0.1\", quic_server_ids = { \"1\" = { x = \"c001\" } } }",
            ),
            OLD.replace("{ address = \"10.0.0.1\" }", "{ address = \"10.0.0.1}{\" }"),
        ] {
            assert!(patch(OLD, parse(OLD), &new).is_none(), "{new}");
        }
        // A line of a multi-line string that looks like a backend line.
        let quoted = "[[backend_service]]\nname = \"s\"\nencapsulation = \"\"\"\n{ address = \"10.0.0.9\" }\n\"\"\"\nbackend = [{ address = \"10.0.0.1\" }]\n";
        let new = quoted.replace("0.0.9", "0.0.8");
        assert!(patch(quoted, parse(quoted), &new).is_none());
        // A table whose backends are not one per line.
        let packed = "[[backend_service]]\nname = \"s\"\nbackend = [{ address = \"10.0.0.1\" }, { address = \"10.0.0.2\" }]\n";
        let new = packed.replace("0.2\"", "0.2\", weight = 2");
        assert!(patch(packed, parse(packed), &new).is_none());
    }
}
