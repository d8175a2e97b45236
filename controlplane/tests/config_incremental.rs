//! AP-5: a reload's loader (`config::Loader`), which parses only the
//! `[[backend_service]]` / `[[forwarding_rule]]` tables it has not seen,
//! gives exactly what parsing the whole file gives: the same
//! configuration, or the same errors at the same lines — over every
//! shipped file and over random files edited one step at a time (tables
//! added, removed, changed, duplicated, moved, and lines that make the
//! file ambiguous or wrong).

use std::fmt::Write;

use controlplane::config::{self, Loader};
use proptest::prelude::*;

/// `Ok(Debug of the configuration)` or `Err(the diagnostics as printed)`.
fn outcome(r: Result<config::Config, config::Diagnostics>) -> Result<String, String> {
    r.map(|c| format!("{c:?}")).map_err(|d| d.to_string())
}

fn assert_same(loader: &mut Loader, text: &str) {
    let whole = outcome(config::load_str(text, "t.toml"));
    let pieces = outcome(loader.load_str(text, "t.toml"));
    assert_eq!(
        pieces, whole,
        "the loader and the whole-file parse differ on:\n{text}"
    );
}

#[test]
fn ap_5_every_conf_file_loads_the_same_by_pieces() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf");
    let mut loader = Loader::new();
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert_same(&mut loader, &text);
            assert!(
                loader.last_parsed().is_some(),
                "{} cut into pieces",
                path.display()
            );
            // Again: every table from the cache, the same result.
            assert_same(&mut loader, &text);
            assert_eq!(loader.last_parsed(), Some(0), "{}", path.display());
            n += 1;
        }
    }
    assert!(n >= 3);
}

/// One service of a generated file.
#[derive(Clone, Debug)]
struct Service {
    name: u32,
    weights: Vec<u16>,
    /// `[[backend_service.backend]]` tables instead of an inline array.
    backend_tables: bool,
    tracking: bool,
    comment: bool,
}

#[derive(Clone, Debug)]
struct File {
    services: Vec<Service>,
    /// `[metrics]` after this many services (rules come after them all).
    metrics_at: usize,
    /// Rules after the one per service: (the name of rule `.0` when
    /// Some, else its own; the VIP of rule `.1` when Some, else its own)
    /// — a name used twice or an FR-2 overlap beside rules the loader
    /// keeps.
    extra_rules: Vec<(Option<usize>, Option<usize>)>,
}

const REST: &str = r#"# a comment with [[backend_service]] in it
[dataplane]
eal_args = ["--no-huge",
  "-m", "512", # [x]
  "--no-pci"]
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0"
mac = "02:00:00:00:00:01"
address = "10.0.0.1/8"
[[health_check]]
name = "hc"
type = "TCP"
port = 80
"#;

fn render(f: &File) -> String {
    let mut t = String::from(REST);
    for (i, s) in f.services.iter().enumerate() {
        if i == f.metrics_at {
            t.push_str("[metrics]\nlisten = \"127.0.0.1:19999\"\n");
        }
        let _ = writeln!(t, "[[backend_service]]\nname = \"s{}\"", s.name);
        if s.comment {
            t.push_str("# [[forwarding_rule]] is not a header here\n");
        }
        let backend = |j: usize, w: u16| {
            format!(
                "address = \"10.1.{}.{}\", mac = \"02:00:00:00:00:02\", weight = {w}",
                s.name % 250,
                j + 1
            )
        };
        if !s.backend_tables {
            t.push_str("backend = [\n");
            for (j, w) in s.weights.iter().enumerate() {
                let _ = writeln!(t, "  {{ {} }},", backend(j, *w));
            }
            t.push_str("]\n");
        }
        if s.tracking {
            t.push_str("[backend_service.connection_tracking]\nidle_timeout = \"30s\"\n");
        }
        if s.backend_tables {
            for (j, w) in s.weights.iter().enumerate() {
                let b = backend(j, *w).replace(", ", "\n");
                let _ = writeln!(t, "[[backend_service.backend]]\n{b}");
            }
        }
    }
    if f.metrics_at >= f.services.len() {
        t.push_str("[metrics]\nlisten = \"127.0.0.1:19999\"\n");
    }
    for (i, s) in f.services.iter().enumerate() {
        let _ = writeln!(
            t,
            "[[forwarding_rule]]\nname = \"r{i}\"\nvip = \"203.0.113.{}\"\nbackend_service = \"s{}\"",
            i + 1,
            s.name
        );
    }
    let n = f.services.len();
    for (k, (name_of, vip_of)) in f.extra_rules.iter().enumerate() {
        let name = name_of.map_or(format!("x{k}"), |i| format!("r{}", i % n));
        let vip = vip_of.map_or(format!("198.51.100.{}", k + 1), |i| {
            format!("203.0.113.{}", i % n + 1)
        });
        let _ = writeln!(
            t,
            "[[forwarding_rule]]\nname = \"{name}\"\nvip = \"{vip}\"\nbackend_service = \"s{}\"",
            f.services[0].name
        );
    }
    t
}

fn service() -> impl Strategy<Value = Service> {
    (
        0u32..40,
        prop::collection::vec(0u16..4, 1..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(name, weights, backend_tables, tracking, comment)| Service {
                name,
                weights,
                backend_tables,
                tracking,
                comment,
            },
        )
}

/// One edit of the file between two loads.
#[derive(Clone, Debug)]
enum Edit {
    Weight(usize, u16),
    Remove(usize),
    Add(Service),
    Duplicate(usize),
    Swap(usize, usize),
    MoveMetrics(usize),
    /// A line inserted before line `.0` of the rendered text.
    Line(usize, &'static str),
    ExtraRule(Option<usize>, Option<usize>),
    RemoveExtraRule(usize),
}

const LINES: &[&str] = &[
    "[backend_service]",
    "[backend_service.zonal_affinity]",
    "[[forwarding_rule]]",
    "[metrics]",
    "x = [",
    "]",
    "a = '''",
    "a = \"\"\"\n[[backend_service]]\n\"\"\"",
    "[\"backend_service\"]",
    "[ zone ]",
    "# [[backend_service]]",
    "backend_service = []",
    "[[backend_service.backend]]",
    "\"\"\"",
    "x = { a = 1,\n b = [2,\n[3]] }",
    "[[zone]]\nname = \"z\"",
    "\r",
    "[[backend_service]]\nname = \"s0\"",
];

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<usize>(), 0u16..4).prop_map(|(i, w)| Edit::Weight(i, w)),
        1 => any::<usize>().prop_map(Edit::Remove),
        1 => service().prop_map(Edit::Add),
        1 => any::<usize>().prop_map(Edit::Duplicate),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
        1 => any::<usize>().prop_map(Edit::MoveMetrics),
        2 => (any::<usize>(), prop::sample::select(LINES)).prop_map(|(at, l)| Edit::Line(at, l)),
        1 => (any::<Option<usize>>(), any::<Option<usize>>()).prop_map(|(n, v)| Edit::ExtraRule(n, v)),
        1 => any::<usize>().prop_map(Edit::RemoveExtraRule),
    ]
}

/// The next text: `file` edited (a `Line` edit changes only the text).
fn apply(file: &mut File, e: &Edit) -> String {
    let n = file.services.len();
    match e {
        Edit::Weight(i, w) if n > 0 => {
            let s = &mut file.services[i % n];
            s.weights[0] = *w;
        }
        Edit::Remove(i) if n > 1 => {
            file.services.remove(i % n);
        }
        Edit::Add(s) => file.services.push(s.clone()),
        Edit::Duplicate(i) if n > 0 => {
            let s = file.services[i % n].clone();
            file.services.push(s);
        }
        Edit::Swap(a, b) if n > 0 => file.services.swap(a % n, b % n),
        Edit::MoveMetrics(at) => file.metrics_at = at % (n + 1),
        Edit::ExtraRule(name_of, vip_of) => file.extra_rules.push((*name_of, *vip_of)),
        Edit::RemoveExtraRule(i) if !file.extra_rules.is_empty() => {
            let k = i % file.extra_rules.len();
            file.extra_rules.remove(k);
        }
        _ => {}
    }
    let text = render(file);
    match e {
        Edit::Line(at, line) => {
            let mut lines: Vec<&str> = text.lines().collect();
            let at = at % (lines.len() + 1);
            lines.insert(at, line);
            lines.join("\n") + "\n"
        }
        _ => text,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ap_5_pieces_and_whole_agree_over_edits(
        services in prop::collection::vec(service(), 1..6),
        metrics_at in 0usize..6,
        edits in prop::collection::vec(edit(), 1..12),
    ) {
        let mut file = File { services, metrics_at, extra_rules: Vec::new() };
        let mut loader = Loader::new();
        assert_same(&mut loader, &render(&file));
        for e in &edits {
            let text = apply(&mut file, e);
            assert_same(&mut loader, &text);
        }
    }
}

/// A change to one service of many parses that service's table alone;
/// tables that moved are not parsed again.
#[test]
fn ap_5_one_change_parses_one_table() {
    let services: Vec<Service> = (0..30)
        .map(|name| Service {
            name,
            weights: vec![1, 1],
            backend_tables: name % 3 == 0,
            tracking: name % 2 == 0,
            comment: name % 5 == 0,
        })
        .collect();
    let mut file = File {
        services,
        metrics_at: 7,
        extra_rules: Vec::new(),
    };
    let mut loader = Loader::new();
    assert_same(&mut loader, &render(&file));
    assert_eq!(loader.last_parsed(), Some(60), "30 services and 30 rules");
    assert_eq!(loader.last_kept(), 0, "nothing validated before");
    let text = apply(&mut file, &Edit::Weight(12, 3));
    assert_same(&mut loader, &text);
    assert_eq!(loader.last_parsed(), Some(1));
    assert_eq!(loader.last_kept(), 59, "every table but the changed one");
    // Tables that moved are found by their text: two services swapped
    // parse only the two rules that name them (rules are numbered by
    // position).
    let text = apply(&mut file, &Edit::Swap(3, 20));
    assert_same(&mut loader, &text);
    assert_eq!(loader.last_parsed(), Some(2), "two services swapped");
    assert_eq!(
        loader.last_kept(),
        58,
        "the two moved services are kept, the two rules naming them are not"
    );
    // A file the scanner is unsure of is parsed whole, and still agrees.
    let text = apply(&mut file, &Edit::Line(40, "[\"backend_service\"]"));
    assert_same(&mut loader, &text);
    assert_eq!(loader.last_parsed(), None);
}

/// A validated item is kept only while what its validation reads stays
/// the same: a rule whose service moved names the new position, and a
/// health check inserted before the one services use (which shifts its
/// position) validates every service again.
#[test]
fn ap_5_kept_items_follow_what_they_refer_to() {
    let two = |first: &str, second: &str| {
        format!(
            "{REST}[[backend_service]]\nname = \"{first}\"\nhealth_check = \"hc\"\nbackend = [{{ address = \"10.1.0.1\", mac = \"02:00:00:00:00:02\" }}]\n\
             [[backend_service]]\nname = \"{second}\"\nbackend = [{{ address = \"10.1.0.2\", mac = \"02:00:00:00:00:02\" }}]\n\
             [[forwarding_rule]]\nname = \"ra\"\nvip = \"203.0.113.1\"\nbackend_service = \"a\"\n\
             [[forwarding_rule]]\nname = \"rb\"\nvip = \"203.0.113.2\"\nbackend_service = \"b\"\n"
        )
    };
    let mut loader = Loader::new();
    assert_same(&mut loader, &two("a", "b"));
    assert_same(&mut loader, &two("a", "b"));
    assert_eq!(
        loader.last_kept(),
        4,
        "the same file again keeps every item"
    );
    let services_swapped = {
        let t = two("a", "b");
        let at = |h: &str| t.find(&format!("\n{h}")).unwrap() + 1;
        let first = at("[[backend_service]]\nname = \"a\"");
        let second = at("[[backend_service]]\nname = \"b\"");
        let rules = at("[[forwarding_rule]]");
        format!(
            "{}{}{}{}",
            &t[..first],
            &t[second..rules],
            &t[first..second],
            &t[rules..]
        )
    };
    assert_same(&mut loader, &services_swapped);
    assert_eq!(loader.last_parsed(), Some(0), "every table found by text");
    assert_eq!(
        loader.last_kept(),
        2,
        "both services kept; both rules validated again (their services moved)"
    );
    let cfg = loader.load_str(&services_swapped, "t.toml").unwrap();
    assert_eq!(
        cfg.backend_services[cfg.forwarding_rules[0].backend_service].name,
        "a"
    );
    // A health check before "hc": the service naming "hc" now names the
    // second check.
    let inserted = services_swapped.replace(
        "[[health_check]]\nname = \"hc\"",
        "[[health_check]]\nname = \"other\"\ntype = \"TCP\"\nport = 81\n[[health_check]]\nname = \"hc\"",
    );
    assert_ne!(inserted, services_swapped);
    assert_same(&mut loader, &inserted);
    assert_eq!(loader.last_kept(), 0, "the rest changed: nothing kept");
    let cfg = loader.load_str(&inserted, "t.toml").unwrap();
    let a = cfg.service("a").unwrap();
    assert_eq!(cfg.health_checks[a.health_check.unwrap()].name, "hc");
}
