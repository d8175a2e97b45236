//! Markdown as roff, for man pages made from the repository's own docs:
//! the subset those docs use — headings, paragraphs, bullet lists,
//! tables (each row a tagged paragraph: the first cell in bold, the
//! others after it), fenced code, `code`, **bold** and [links](…).

use std::fmt::Write as _;

/// `markdown` as the body of a man page (no `.TH`): the first `#`
/// heading is left out (the page's title says it), `##` become sections
/// and `###` subsections.
pub fn body(markdown: &str) -> String {
    let mut out = String::new();
    let mut para: Vec<&str> = Vec::new();
    let mut header: Option<Vec<String>> = None;
    let mut code = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            flush(&mut out, &mut para);
            out.push_str(if code { ".fi\n.RE\n" } else { ".RS 2\n.nf\n" });
            code = !code;
            continue;
        }
        if code {
            let _ = writeln!(out, "{}", self::line(escape(line)));
            continue;
        }
        let trimmed = line.trim();
        if trimmed.starts_with('|') {
            flush(&mut out, &mut para);
            let cells = cells(trimmed);
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| matches!(ch, '-' | ':')))
            {
                continue;
            }
            match &header {
                None => header = Some(cells),
                Some(h) => table_row(&mut out, h, &cells),
            }
            continue;
        }
        header = None;
        if let Some(title) = trimmed.strip_prefix("### ") {
            flush(&mut out, &mut para);
            let _ = writeln!(out, ".SS \"{}\"", quoted(&plain(title)));
        } else if let Some(title) = trimmed.strip_prefix("## ") {
            flush(&mut out, &mut para);
            let _ = writeln!(out, ".SH \"{}\"", quoted(&plain(title).to_uppercase()));
        } else if trimmed.starts_with("# ") || trimmed.is_empty() {
            flush(&mut out, &mut para);
        } else if let Some(item) = trimmed.strip_prefix("- ") {
            flush(&mut out, &mut para);
            out.push_str(".IP \\(bu 2\n");
            para.push(item);
        } else if line.starts_with("    ") && para.is_empty() {
            let _ = writeln!(out, ".RS 2\n.nf\n{}\n.fi\n.RE", self::line(escape(trimmed)));
        } else {
            para.push(trimmed);
        }
    }
    flush(&mut out, &mut para);
    out
}

/// A table's cells, outer pipes dropped (a `\|` stays in its cell).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cell.push('|');
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// One row as a tagged paragraph: its first cell the tag, the others
/// named by their column (but the last, the description).
fn table_row(out: &mut String, header: &[String], cells: &[String]) {
    let Some((first, rest)) = cells.split_first() else {
        return;
    };
    let _ = writeln!(out, ".TP\n\\fB{}\\fR", escape(&plain(first)));
    let n = rest.len();
    for (i, cell) in rest.iter().enumerate() {
        if cell.is_empty() {
            continue;
        }
        let name = header.get(i + 1).map(|h| plain(h)).unwrap_or_default();
        if i + 1 < n && !name.is_empty() {
            let _ = writeln!(out, "{}: {}", escape(&name), inline(cell));
        } else {
            let _ = writeln!(out, "{}", line(inline(cell)));
        }
        if i + 1 < n {
            out.push_str(".br\n");
        }
    }
}

fn flush(out: &mut String, para: &mut Vec<&str>) {
    if para.is_empty() {
        return;
    }
    let text = para.join(" ");
    para.clear();
    if !out.ends_with(".IP \\(bu 2\n") {
        out.push_str(".PP\n");
    }
    let _ = writeln!(out, "{}", line(inline(&text)));
}

/// Inline markup: `code` and **bold** in bold, [text](target) as text.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(['`', '*', '[']) {
        out.push_str(&escape(&rest[..i]));
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix('`') {
            if let Some(end) = after.find('`') {
                let _ = write!(out, "\\fB{}\\fR", escape(&after[..end]));
                rest = &after[end + 1..];
                continue;
            }
        } else if let Some(after) = rest.strip_prefix("**") {
            if let Some(end) = after.find("**") {
                let _ = write!(out, "\\fB{}\\fR", escape(&after[..end]));
                rest = &after[end + 2..];
                continue;
            }
        } else if let Some(after) = rest.strip_prefix('[') {
            if let Some((text, tail)) = after.split_once("](") {
                if let Some(end) = tail.find(')') {
                    out.push_str(&inline(text));
                    rest = &tail[end + 1..];
                    continue;
                }
            }
        }
        let c = rest.chars().next().map_or(1, char::len_utf8);
        out.push_str(&escape(&rest[..c]));
        rest = &rest[c..];
    }
    out.push_str(&escape(rest));
    out
}

/// A heading's text without markup.
fn plain(text: &str) -> String {
    text.replace(['`', '*'], "")
}

/// Text safe in roff: backslashes doubled, hyphens as minus signs (so
/// options copy and paste).
fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

/// An output line that roff does not take for a request: a leading dot
/// or quote is guarded.
fn line(text: String) -> String {
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

fn quoted(text: &str) -> String {
    escape(text).replace('"', "\\(dq")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_tables_lists_code_and_inline_markup() {
        let md = "# Title\n\nIntro `a-b` and **strong** [link](x.md).\n\n## `[dataplane]` (required)\n\n\
                  | field | default | meaning |\n|---|---|---|\n| `workers` | `1` | lcores \\| cores |\n\n\
                  - one\n- two\n\n```toml\nkey = 1\n.dot\n```\n";
        let r = body(md);
        assert!(!r.contains("Title"), "{r}");
        assert!(
            r.contains(".PP\nIntro \\fBa\\-b\\fR and \\fBstrong\\fR link.\n"),
            "{r}"
        );
        assert!(r.contains(".SH \"[DATAPLANE] (REQUIRED)\"\n"), "{r}");
        assert!(
            r.contains(".TP\n\\fBworkers\\fR\ndefault: \\fB1\\fR\n.br\nlcores | cores\n"),
            "{r}"
        );
        assert!(r.contains(".IP \\(bu 2\none\n.IP \\(bu 2\ntwo\n"), "{r}");
        assert!(
            r.contains(".RS 2\n.nf\nkey = 1\n\\&.dot\n.fi\n.RE\n"),
            "{r}"
        );
    }
}
