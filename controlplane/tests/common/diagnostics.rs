//! Checks of the configuration errors an operator reads (AP-5): every
//! error names file:line, the field path, what is wrong and a hint.

use controlplane::config;

/// A broken configuration and the error it must give.
pub struct Case {
    pub name: &'static str,
    pub text: String,
    /// The error's line is the one containing this text.
    pub at_line_with: &'static str,
    pub path: &'static str,
    pub message: &'static str,
    pub hint: &'static str,
}

/// `base` with the first `from` replaced by `to` (which must be there).
pub fn replaced(base: &str, from: &str, to: &str) -> String {
    assert!(base.contains(from), "{from:?}");
    base.replacen(from, to, 1)
}

/// 1-based number of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in text"))
        + 1
}

/// The number of errors `text` (as `test.toml`) gives, and their text.
pub fn errors(text: &str) -> (usize, String) {
    match config::load_str(text, "test.toml") {
        Ok(_) => panic!("config unexpectedly valid:\n{text}"),
        Err(d) => (d.len(), d.to_string()),
    }
}

/// Checks that the first error of `case` is on the right line, with its
/// field path, message and hint; the number of errors.
pub fn check(case: &Case) -> usize {
    let (count, out) = errors(&case.text);
    let line = line_of(&case.text, case.at_line_with);
    let first = out.lines().next().unwrap();
    let ctx = format!("case {:?}:\n{out}", case.name);
    assert!(
        first.starts_with(&format!("test.toml:{line}:")),
        "wrong line (want {line}) in {ctx}"
    );
    assert!(
        first.contains(&format!(": error: {}: ", case.path)),
        "wrong path in {ctx}"
    );
    assert!(first.contains(case.message), "wrong message in {ctx}");
    let hint = out.lines().nth(1).unwrap();
    assert!(
        hint.starts_with("  hint: ") && hint.contains(case.hint.trim_start_matches("hint: ")),
        "wrong hint in {ctx}"
    );
    count
}
