//! The behaviour rules and the repository agree. `docs/behaviour.md`
//! defines every rule id (`### CT-5 — …`) in chapters (`## 3. …`); this
//! checks, over every tracked file (sources, tests, scripts, docs,
//! configuration), that:
//!
//! - every rule id a file cites is defined there — ids written out
//!   (`CT-5`, `SPEC CT-5`), grouped (`HA-1/2/4`), as runs (`EL-3…6`,
//!   `CT-1 … CT-11`) or in test names (`za_3_za_4_…`, `fr_1_to_4_…`);
//! - every rule defined there is cited somewhere else, or its section says
//!   it is not yet cited (and then nothing cites it);
//! - every `SPEC §n` names a chapter of it;
//! - no file sends the reader to a contract outside the repository (a
//!   sibling `shared/` directory), except to the optional replay corpus.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The rule families, in chapter order.
const FAMILIES: [&str; 9] = ["FR", "HA", "CT", "EL", "MG", "ZA", "HC", "FO", "AP"];

const BEHAVIOUR: &str = "docs/behaviour.md";
/// This file: it spells out citation forms as test input, so it cites
/// nothing.
const THIS_FILE: &str = "core/tests/behaviour_ids.rs";
/// The marker of a rule that no file cites yet.
const NOT_YET_CITED: &str = "Not yet cited";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RuleId {
    family: usize,
    number: u32,
    suffix: Option<char>,
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", FAMILIES[self.family], self.number)?;
        match self.suffix {
            Some(c) => write!(f, "{c}"),
            None => Ok(()),
        }
    }
}

fn id(family: usize, number: u32) -> RuleId {
    RuleId {
        family,
        number,
        suffix: None,
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading decimal number of `s` and the rest.
fn number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// An upper-case id at the start of `s` (`CT-5`, `CT-8a`), not followed
/// by more of a word, and the rest.
fn upper_id(s: &str) -> Option<(RuleId, &str)> {
    let family = FAMILIES
        .iter()
        .position(|f| s.starts_with(f) && s[f.len()..].starts_with('-'))?;
    let (number, rest) = number(&s[FAMILIES[family].len() + 1..])?;
    let mut chars = rest.chars();
    match (chars.next(), chars.next()) {
        (Some(c), next) if c.is_ascii_lowercase() && !next.is_some_and(is_word) => Some((
            RuleId {
                family,
                number,
                suffix: Some(c),
            },
            &rest[1..],
        )),
        (Some(c), _) if is_word(c) => None,
        _ => Some((id(family, number), rest)),
    }
}

/// The ids that continue `first` in `rest`: `/2/4` (more of its family) or
/// a run to a later number (`…6`, `.. 6`, ` … CT-11`).
fn continuation(first: RuleId, rest: &str, out: &mut Vec<RuleId>) {
    let family = FAMILIES[first.family];
    let mut r = rest;
    let mut grouped = false;
    while let Some((n, after)) = r.strip_prefix('/').and_then(number) {
        if after.starts_with(is_word) {
            break;
        }
        out.push(id(first.family, n));
        r = after;
        grouped = true;
    }
    if grouped {
        return;
    }
    let r = rest.trim_start();
    let Some(r) = ["…", "...", ".."].iter().find_map(|d| r.strip_prefix(d)) else {
        return;
    };
    let r = r.trim_start();
    let r = r
        .strip_prefix(family)
        .and_then(|x| x.strip_prefix('-'))
        .unwrap_or(r);
    if let Some((last, after)) = number(r) {
        if !after.starts_with(is_word) {
            out.extend((first.number + 1..=last).map(|n| id(first.family, n)));
        }
    }
}

/// The ids in one identifier: `ct_1_syn_…`, `hc_3_ct_5_mg_1_defaults`,
/// `fr_1_to_4_rule_lookup`. Only identifiers that start with an id count.
fn snake_ids(word: &str, out: &mut Vec<RuleId>) {
    let parts: Vec<&str> = word.split('_').collect();
    let family = |p: &str| FAMILIES.iter().position(|f| p == f.to_ascii_lowercase());
    let num = |p: &str| match number(p) {
        Some((n, "")) => Some(n),
        _ => None,
    };
    if parts.len() < 2 || family(parts[0]).is_none() || num(parts[1]).is_none() {
        return;
    }
    // The last id and the index just past it, for `_to_N`.
    let mut last: Option<(RuleId, usize)> = None;
    let mut i = 0;
    while i + 1 < parts.len() {
        if let (Some(f), Some(n)) = (family(parts[i]), num(parts[i + 1])) {
            out.push(id(f, n));
            last = Some((id(f, n), i + 2));
            i += 2;
        } else if let (Some((first, at)), "to", Some(n)) = (last, parts[i], num(parts[i + 1])) {
            if at == i {
                out.extend((first.number + 1..=n).map(|k| id(first.family, k)));
            }
            i += 2;
        } else {
            i += 1;
        }
    }
}

/// Every rule id `text` cites.
fn cited(text: &str) -> Vec<RuleId> {
    let mut out = Vec::new();
    let mut prev: Option<char> = None;
    let mut word_start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        let boundary = !prev.is_some_and(is_word);
        if boundary && c.is_ascii_uppercase() {
            if let Some((first, rest)) = upper_id(&text[i..]) {
                out.push(first);
                continuation(first, rest, &mut out);
            }
        }
        match (is_word(c), word_start) {
            (true, None) => word_start = Some(i),
            (false, Some(s)) => {
                snake_ids(&text[s..i], &mut out);
                word_start = None;
            }
            _ => {}
        }
        prev = Some(c);
    }
    if let Some(s) = word_start {
        snake_ids(&text[s..], &mut out);
    }
    out
}

/// The repository's root (the workspace holding this crate).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's files, relative to the root: what git tracks, or, in
/// a tree without git, every file outside hidden and build directories.
fn files() -> Vec<String> {
    let root = root();
    let git = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output();
    if let Ok(out) = git {
        if out.status.success() && !out.stdout.is_empty() {
            return String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }
    let mut found = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(root.join(&dir)).expect("list the repository");
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let skip = ["target", "__pycache__", "corpus", "artifacts"];
            if name.starts_with('.') || skip.contains(&name.as_str()) {
                continue;
            }
            let rel = dir.join(&name);
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(rel);
            } else {
                found.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    found
}

/// Every text file of the repository (UTF-8, no NUL) with its contents.
fn texts() -> Vec<(String, String)> {
    let root = root();
    files()
        .into_iter()
        .filter_map(|path| {
            let text = String::from_utf8(std::fs::read(root.join(&path)).ok()?).ok()?;
            (!text.contains('\0')).then_some((path, text))
        })
        .collect()
}

/// What `docs/behaviour.md` defines.
struct Contract {
    /// Each rule and the text of its section.
    rules: BTreeMap<RuleId, String>,
    chapters: BTreeSet<u32>,
}

fn contract() -> Contract {
    let path = root().join(BEHAVIOUR);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{BEHAVIOUR}: {e}"));
    let mut rules: BTreeMap<RuleId, String> = BTreeMap::new();
    let mut chapters = BTreeSet::new();
    let mut current: Option<RuleId> = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            current = upper_id(heading).map(|(rule, _)| rule);
            if let Some(rule) = current {
                assert!(
                    rules.insert(rule, String::new()).is_none(),
                    "{BEHAVIOUR}: {rule} is defined twice"
                );
            }
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            current = None;
            if let Some((n, rest)) = number(heading) {
                if rest.starts_with(". ") {
                    chapters.insert(n);
                }
            }
            continue;
        }
        if let Some(rule) = current {
            let section = rules.get_mut(&rule).expect("inserted at its heading");
            section.push_str(line);
            section.push('\n');
        }
    }
    let families: BTreeSet<usize> = rules.keys().map(|r| r.family).collect();
    for (f, name) in FAMILIES.iter().enumerate() {
        assert!(
            families.contains(&f),
            "{BEHAVIOUR} defines no {name}-n rule"
        );
    }
    Contract { rules, chapters }
}

/// Every file's citations, this file and `docs/behaviour.md` excluded.
fn citations() -> BTreeMap<RuleId, BTreeSet<String>> {
    let mut by_rule: BTreeMap<RuleId, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in texts() {
        if path == THIS_FILE || path == BEHAVIOUR {
            continue;
        }
        for rule in cited(&text) {
            by_rule.entry(rule).or_default().insert(path.clone());
        }
    }
    by_rule
}

#[test]
fn every_cited_rule_id_is_defined_in_behaviour_md() {
    let contract = contract();
    let mut cited_by = citations();
    let own = std::fs::read_to_string(root().join(BEHAVIOUR)).expect("read behaviour.md");
    for rule in cited(&own) {
        cited_by.entry(rule).or_default().insert(BEHAVIOUR.into());
    }
    let undefined: Vec<String> = cited_by
        .iter()
        .filter(|(rule, _)| !contract.rules.contains_key(rule))
        .map(|(rule, paths)| {
            let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
            format!("{rule} (cited by {})", paths.join(", "))
        })
        .collect();
    assert!(
        undefined.is_empty(),
        "rule ids cited but not defined in {BEHAVIOUR} (add a `### ID — title` section):\n  {}",
        undefined.join("\n  ")
    );
}

#[test]
fn every_defined_rule_is_cited_or_marked_not_yet_cited() {
    let contract = contract();
    let cited_by = citations();
    let mut wrong = Vec::new();
    for (rule, section) in &contract.rules {
        let marked = section.contains(NOT_YET_CITED);
        match (cited_by.get(rule), marked) {
            (None, false) => wrong.push(format!(
                "{rule}: no file cites it; say \"{NOT_YET_CITED}\" in its section"
            )),
            (Some(paths), true) => wrong.push(format!(
                "{rule}: marked \"{NOT_YET_CITED}\" but cited by {}",
                paths.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{BEHAVIOUR}:\n  {}", wrong.join("\n  "));
}

#[test]
fn every_spec_chapter_reference_names_a_chapter_of_behaviour_md() {
    let contract = contract();
    let mut missing = Vec::new();
    for (path, text) in texts() {
        for (at, _) in text.match_indices("SPEC §") {
            // `SPEC §n` with a letter is how the documents name the form.
            let Some((chapter, _)) = number(&text[at + "SPEC §".len()..]) else {
                continue;
            };
            if !contract.chapters.contains(&chapter) {
                let line = text[..at].lines().count().max(1);
                missing.push(format!("{path}:{line}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "`SPEC §n` without a chapter `## n.` in {BEHAVIOUR}:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn no_file_refers_to_a_contract_outside_the_repository() {
    // Spelt in pieces so that this file does not match itself.
    let documents = [concat!("SPEC", ".md"), concat!("DESIGN", ".md")];
    let outside = concat!("..", "/shared/");
    // The one thing a sibling `shared/` directory may provide: captures an
    // optional test replays when they are there.
    let allowed = "corpus/";
    let mut found = Vec::new();
    for (path, text) in texts() {
        for (n, line) in text.lines().enumerate() {
            let refers = documents.iter().any(|d| line.contains(d))
                || line
                    .match_indices(outside)
                    .any(|(at, _)| !line[at + outside.len()..].starts_with(allowed));
            if refers {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files refer to documents outside the repository (the contract is {BEHAVIOUR}):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn citation_forms_are_read() {
    let ids = |text: &str| -> Vec<String> {
        let set: BTreeSet<RuleId> = cited(text).into_iter().collect();
        set.iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        ids("SPEC CT-5, (CT-8) and `AP-3`."),
        ["CT-5", "CT-8", "AP-3"]
    );
    assert_eq!(
        ids("HA-1/2/4, FR-1/3/4/5"),
        ["FR-1", "FR-3", "FR-4", "FR-5", "HA-1", "HA-2", "HA-4"]
    );
    assert_eq!(ids("EL-3…6"), ["EL-3", "EL-4", "EL-5", "EL-6"]);
    assert_eq!(ids("ZA-8 … ZA-10"), ["ZA-8", "ZA-9", "ZA-10"]);
    assert_eq!(ids("EL-1/EL-2/EL-4/"), ["EL-1", "EL-2", "EL-4"]);
    assert_eq!(
        ids("fn za_3_za_4_za_8_worked_example()"),
        ["ZA-3", "ZA-4", "ZA-8"]
    );
    assert_eq!(
        ids("fn fr_1_to_4_rule_lookup()"),
        ["FR-1", "FR-2", "FR-3", "FR-4"]
    );
    assert_eq!(
        ids("fn hc_3_ct_5_mg_1_defaults()"),
        ["CT-5", "MG-1", "HC-3"]
    );
    assert_eq!(ids("fn ap_5_the_sleep_bound_is_1_us_to_10_ms()"), ["AP-5"]);
    assert_eq!(ids("CT-8a, and CT-8b."), ["CT-8a", "CT-8b"]);
    // Not rule ids: other prefixes, parts of longer words or numbers.
    assert!(ids("UTF-8 BSD-3 OUT-0.pcap XCT-5 CT-5x2 CT-55ab snap_1 heap_ct_1 CT-").is_empty());
    assert!(ids("FNV-1a and sha-256").is_empty());
}
