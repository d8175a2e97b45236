//! AP-6 (the announcement through BIRD): every `[bgp]` section that
//! `sluice check-config` accepts renders (`sluice bird-config`) into a
//! configuration the real BIRD parses (`bird -p -c FILE`); what cannot be
//! rendered faithfully is refused by check-config with file:line:col, the
//! field and the fix.
//!
//! The generated sections roam the accepted space: peer names up to the
//! 63-character limit (past BIRD's 64-character symbols once prefixed),
//! names that would take the configuration's own symbols, passwords of
//! every printable and awkward character, hold times at their bounds, ASNs,
//! kernel tables, communities and MEDs over their whole ranges, BFD
//! settings, IPv4 and IPv6 peers, many peers. BIRD is scripts/setup.sh's
//! `/usr/sbin/bird`; without it the tests say so loudly and pass.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use controlplane::announce::bird;
use controlplane::config;
use controlplane::config::bird_syntax;
use proptest::prelude::*;

const BIRD: &str = "/usr/sbin/bird";

const PORTS: &str = r#"
[dataplane]
eal_args = ["--no-huge"]

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"
address6 = "2001:db8::2/64"
tap = "sl-up"

[[dataplane.port]]
name = "uplink-b"
device = "net_null1"
address = "198.51.100.2/24"
address6 = "fe80::2/64"
tap = "sl-up.b_2"

[[backend_service]]
name = "web"
backend = [ { address = "192.0.2.10", mac = "02:00:00:00:00:10" } ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
backend_service = "web"

[[forwarding_rule]]
name = "web-vip6"
vip = "2001:db8:1::10"
backend_service = "web"
"#;

/// Whether BIRD is here to ask; says so loudly when not.
fn have_bird() -> bool {
    let there = Path::new(BIRD).exists();
    if !there {
        eprintln!(
            "\n!!!!! {BIRD} is missing: the rendered BIRD configurations are NOT parsed \
             (install BIRD 2 with scripts/setup.sh) !!!!!\n"
        );
    }
    there
}

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bird_config_parse");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// BIRD's verdict on `text`: Ok, or its error.
fn bird_parses(text: &str) -> Result<(), String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let file = scratch().join(format!(
        "bird-{}-{}.conf",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, text).unwrap();
    let out = Command::new(BIRD)
        .args(["-p", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `s` as a TOML basic string (escaping what TOML requires).
fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => o.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[derive(Clone, Debug)]
struct Peer {
    name: String,
    address: String,
    asn: u32,
    password: Option<String>,
}

#[derive(Clone, Debug)]
struct Bgp {
    asn: u32,
    router_id: Option<String>,
    kernel_table: Option<u32>,
    hold_time: Option<u32>,
    bfd: Option<(u32, u8)>,
    peers: Vec<Peer>,
    communities: Vec<String>,
    med: Option<u32>,
    communities6: Vec<String>,
}

fn toml_of(b: &Bgp) -> String {
    let mut t = format!("{PORTS}\n[bgp]\nasn = {}\n", b.asn);
    if let Some(r) = &b.router_id {
        t += &format!("router_id = {}\n", toml_str(r));
    }
    if let Some(k) = b.kernel_table {
        t += &format!("kernel_table = {k}\n");
    }
    if let Some(h) = b.hold_time {
        t += &format!("hold_time = \"{h}s\"\n");
    }
    if let Some((ms, m)) = b.bfd {
        t += &format!("bfd = true\nbfd_interval = \"{ms}ms\"\nbfd_multiplier = {m}\n");
    }
    for p in &b.peers {
        t += &format!(
            "\n[[bgp.peer]]\nname = {}\naddress = {}\nasn = {}\n",
            toml_str(&p.name),
            toml_str(&p.address),
            p.asn
        );
        if let Some(pw) = &p.password {
            t += &format!("password = {}\n", toml_str(pw));
        }
    }
    for (vip, communities, med) in [
        ("203.0.113.10", &b.communities, b.med),
        ("2001:db8:1::10", &b.communities6, None),
    ] {
        if communities.is_empty() && med.is_none() {
            continue;
        }
        let list: Vec<String> = communities.iter().map(|c| toml_str(c)).collect();
        t += &format!(
            "\n[[bgp.vip]]\nvip = \"{vip}\"\ncommunities = [{}]\n",
            list.join(", ")
        );
        if let Some(m) = med {
            t += &format!("med = {m}\n");
        }
    }
    t
}

/// Loads `text`; when check-config accepts it, BIRD must parse its
/// rendering. Returns the rendering (None: refused, with the diagnostics).
fn accepted_renders_parse(text: &str) -> Result<String, String> {
    let cfg = config::load_str(text, "test.toml").map_err(|d| d.to_string())?;
    let rendered = bird::render(&cfg, "test.toml").expect("[bgp] renders");
    if let Err(e) = bird_parses(&rendered) {
        panic!("check-config accepts, BIRD refuses:\n{e}\n--- sluice.toml\n{text}\n--- bird.conf\n{rendered}");
    }
    Ok(rendered)
}

/// A peer name: an RFC 1035 label of 1-63 characters.
fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]([a-z0-9-]{0,61}[a-z0-9])?",
        // Around BIRD's symbol limit once prefixed with `sluice_`.
        "[a-z][a-z0-9-]{55,61}[a-z0-9]",
        // The configuration's own symbols, once prefixed.
        prop::sample::select(vec![
            "bfd", "vips4", "vips6", "kernel4", "kernel6", "announce"
        ])
        .prop_map(String::from),
        // Hexadecimal-looking and keyword-looking names.
        prop::sample::select(vec![
            "deadbeef", "aa", "bgp", "protocol", "table", "as", "ipv4"
        ])
        .prop_map(String::from),
    ]
}

/// A password: printable ASCII and beyond (what BIRD's strings hold), or
/// now and then one with a character they cannot hold (a control
/// character, `"`, `\`), which check-config must refuse.
fn password() -> impl Strategy<Value = String> {
    let fits = prop_oneof![
        8 => proptest::char::range(' ', '~').prop_filter("fits", |c| !matches!(c, '"' | '\\')),
        1 => prop::sample::select(vec!['#', '\'', '{', '}', ';', '*', '/', ' ', 'é', '€', '\u{2028}', '\u{1F600}']),
    ];
    let clean = prop::collection::vec(fits, 1..=76).prop_map(|v| v.into_iter().collect::<String>());
    let bad = prop::sample::select(vec!['"', '\\', '\0', '\t', '\n', '\r', '\u{7f}', '\u{85}']);
    prop_oneof![
        9 => clean.clone(),
        1 => (clean, bad, any::<prop::sample::Index>()).prop_map(|(s, c, at)| {
            let mut v: Vec<char> = s.chars().collect();
            v.insert(at.index(v.len() + 1), c);
            v.into_iter().collect()
        }),
    ]
}

fn community() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("{a}:{b}")),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| format!("{a}:{b}:{c}")),
        Just("65535:65535".to_string()),
        Just("0:0".to_string()),
        Just("4294967295:4294967295:4294967295".to_string()),
    ]
}

fn peer_address() -> impl Strategy<Value = String> {
    prop_oneof![
        (3u8..=255).prop_map(|h| format!("192.0.2.{h}")),
        prop_oneof![Just(0u8), Just(1), Just(255)].prop_map(|h| format!("198.51.100.{h}")),
        (3u16.., any::<u16>()).prop_map(|(a, b)| format!("2001:db8::{a:x}:{b:x}")),
        Just("2001:db8::ffff:ffff:ffff:ffff".to_string()),
        (3u16..).prop_map(|h| format!("fe80::{h:x}")),
    ]
}

fn peers() -> impl Strategy<Value = Vec<Peer>> {
    let peer = (
        label(),
        peer_address(),
        prop_oneof![Just(1u32), Just(23456), Just(65535), Just(u32::MAX), 1u32..],
        prop::option::of(password()),
    )
        .prop_map(|(name, address, asn, password)| Peer {
            name,
            address,
            asn,
            password,
        });
    prop::collection::vec(peer, 1..8).prop_map(|mut v| {
        // Distinct names (duplicates are refused, not what this explores).
        let mut seen = BTreeSet::new();
        v.retain(|p| seen.insert(p.name.clone()));
        v
    })
}

fn bgp() -> impl Strategy<Value = Bgp> {
    (
        (
            prop_oneof![Just(1u32), Just(u32::MAX), 1u32..],
            prop::option::of(prop_oneof![
                Just("0.0.0.1".to_string()),
                Just("255.255.255.255".to_string()),
                (1u32..).prop_map(|r| std::net::Ipv4Addr::from(r).to_string()),
            ]),
            prop::option::of(prop_oneof![
                Just(1u32),
                Just(252),
                Just(256),
                Just(u32::MAX),
                1u32..
            ]),
            prop::option::of(prop_oneof![
                Just(0u32),
                Just(3),
                Just(4),
                Just(65535),
                3u32..=65535
            ]),
            prop::option::of((
                prop_oneof![Just(10u32), Just(10_000), 10u32..=10_000],
                prop_oneof![Just(1u8), Just(255), 1u8..],
            )),
        ),
        peers(),
        prop::collection::vec(community(), 0..6),
        prop::option::of(prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()]),
        prop::collection::vec(community(), 0..3),
    )
        .prop_map(
            |((asn, router_id, kernel_table, hold_time, bfd), peers, communities, med, c6)| Bgp {
                asn,
                router_id,
                kernel_table,
                hold_time,
                bfd,
                peers,
                communities,
                med,
                communities6: c6,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// AP-6: whatever check-config accepts, BIRD parses once rendered;
    /// what it refuses is refused for a reason in the generated space
    /// (a password BIRD's strings cannot carry, or a kernel table that is
    /// the kernel's own).
    #[test]
    fn ap_6_every_accepted_bgp_section_renders_what_bird_parses(b in bgp()) {
        if !have_bird() {
            return Ok(());
        }
        let text = toml_of(&b);
        if let Err(diags) = accepted_renders_parse(&text) {
            for line in diags.lines().filter(|l| l.contains(": error: ")) {
                prop_assert!(
                    line.contains(".password: ") || line.contains("bgp.kernel_table: "),
                    "unexpected refusal: {line}\n{diags}\n{text}"
                );
            }
        }
    }
}

fn one_peer(name: &str, extra: &str) -> String {
    format!(
        "{PORTS}\n[bgp]\nasn = 65001\n{extra}\n[[bgp.peer]]\nname = {}\naddress = \"192.0.2.1\"\n\
         asn = 65000\n",
        toml_str(name)
    )
}

/// The first error of `text`: (line, col, rest after `test.toml:L:C: error: `), and the hint.
fn first_error(text: &str) -> (usize, String, String) {
    let d = config::load_str(text, "test.toml")
        .err()
        .unwrap_or_else(|| panic!("accepted:\n{text}"))
        .to_string();
    let first = d.lines().next().unwrap().to_string();
    let hint = d.lines().nth(1).unwrap_or("").to_string();
    let rest = first.strip_prefix("test.toml:").unwrap();
    let line: usize = rest.split(':').next().unwrap().parse().unwrap();
    (line, first, hint)
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// AP-6: these edge cases are each accepted and parsed by
/// BIRD, or refused by check-config with their line, field and fix.
#[test]
fn ap_6_documented_edge_cases_parse_or_are_refused() {
    if !have_bird() {
        return;
    }
    // hold_time "0s": BIRD's `hold time 0` (no hold timer, no
    // keepalives); an explicit `keepalive time 0` would be refused.
    let rendered = accepted_renders_parse(&one_peer("tor-a", "hold_time = \"0s\"")).unwrap();
    assert!(rendered.contains("  hold time 0;\n"), "{rendered}");
    assert!(!rendered.contains("keepalive time 0"), "{rendered}");
    for h in ["3s", "65535s"] {
        accepted_renders_parse(&one_peer("tor-a", &format!("hold_time = \"{h}\""))).unwrap();
    }
    for h in ["1s", "2s", "65536s", "3500ms"] {
        let text = one_peer("tor-a", &format!("hold_time = \"{h}\""));
        let (line, first, _) = first_error(&text);
        assert_eq!(line, line_of(&text, "hold_time"), "{first}");
        assert!(first.contains(": error: bgp.hold_time: "), "{first}");
    }

    // Peer names of 57 to 63 characters: protocol names within BIRD's 64,
    // distinct, recognisable.
    let mut names = Vec::new();
    for len in 57..=63 {
        for tail in ["x", "y"] {
            let name = format!("{}{tail}", "a-b".repeat(21))[..len - 1].to_string() + tail;
            names.push(name);
        }
    }
    let mut text = format!("{PORTS}\n[bgp]\nasn = 65001\nbfd = true\n");
    names.extend(["bfd", "announce", "vips4", "kernel6"].map(String::from));
    for (i, name) in names.iter().enumerate() {
        text += &format!(
            "\n[[bgp.peer]]\nname = {}\naddress = \"192.0.2.{}\"\nasn = 65000\n",
            toml_str(name),
            100 + i
        );
    }
    let rendered = accepted_renders_parse(&text).unwrap();
    let protocols: BTreeSet<&str> = rendered
        .lines()
        .filter_map(|l| l.strip_prefix("protocol bgp "))
        .map(|l| l.trim_end_matches(" {"))
        .collect();
    assert_eq!(protocols.len(), names.len(), "{rendered}");
    for p in &protocols {
        let recognisable = p.starts_with("sluice_a_ba_b")
            || ["bfd", "announce", "vips4", "kernel6"]
                .iter()
                .any(|n| p.starts_with(&format!("sluice_{n}_")));
        assert!(p.len() <= bird_syntax::SYMBOL_MAX && recognisable, "{p}");
    }

    // Passwords BIRD's strings cannot carry: refused, at the password.
    for (pw, shown) in [
        ("a\u{0}b", "U+0000"),
        ("a\tb", "U+0009"),
        ("a\rb", "U+000D"),
        ("a\u{7f}b", "U+007F"),
        ("a\"b", "'\"'"),
        ("a\\b", "'\\\\'"),
    ] {
        let text = one_peer("tor-a", "") + &format!("password = {}\n", toml_str(pw));
        let (line, first, hint) = first_error(&text);
        assert_eq!(line, line_of(&text, "password"), "{first}");
        assert!(
            first.contains(": error: bgp.peer \"tor-a\".password: the password holds ")
                && first.contains(shown),
            "{first}"
        );
        assert!(hint.contains("printable characters other than"), "{hint}");
    }
    // Every printable ASCII character but `"` and `\`, and beyond ASCII.
    let printable: String = (' '..='~').filter(|c| !matches!(c, '"' | '\\')).collect();
    for pw in [
        &printable[..80],
        &printable[printable.len() - 80..],
        "é€😀 #;{}*/",
    ] {
        let text = one_peer("tor-a", "") + &format!("password = {}\n", toml_str(pw));
        let rendered = accepted_renders_parse(&text).unwrap();
        assert!(
            rendered.contains(&format!("password \"{pw}\";")),
            "{rendered}"
        );
    }

    // A router id of 0.0.0.0 taken from a port: refused at [bgp].
    let text = one_peer("tor-a", "").replace("192.0.2.2/24", "0.0.0.0/24");
    let (line, first, _) = first_error(&text);
    assert!(first.contains("bgp.router_id: "), "{first}");
    assert_eq!(line, line_of(&text, "[bgp]"));
}

/// AP-6: two long peer names whose cut forms and hashes coincide would be
/// one BIRD protocol: check-config refuses the second, at its name.
#[test]
fn ap_6_colliding_protocol_names_are_refused() {
    // A 57-character name renders as itself (64 with `sluice_`); a longer
    // name is cut to 48 and ends in `_` and its hash: write the first as
    // exactly that.
    let long = format!("r{}", "x".repeat(62));
    let protocol = bird_syntax::protocol_name(&long);
    assert_eq!(protocol.len(), bird_syntax::SYMBOL_MAX);
    let twin = protocol["sluice_".len()..].replace('_', "-");
    assert_eq!(bird_syntax::protocol_name(&twin), protocol);
    let text = format!(
        "{PORTS}\n[bgp]\nasn = 65001\n\n[[bgp.peer]]\nname = \"{long}\"\naddress = \"192.0.2.1\"\n\
         asn = 65000\n\n[[bgp.peer]]\nname = \"{twin}\"\naddress = \"192.0.2.3\"\nasn = 65000\n"
    );
    let (line, first, hint) = first_error(&text);
    assert_eq!(
        line,
        line_of(&text, &format!("name = \"{twin}\"")),
        "{first}"
    );
    assert!(
        first.contains(&format!("bgp.peer \"{twin}\".name: peers \"{long}\""))
            && first.contains(&format!("would both be BIRD protocol {protocol}")),
        "{first}"
    );
    assert!(hint.contains("rename one of them"), "{hint}");
}

/// Many peers on both families, every VIP with attributes at their
/// bounds: one configuration, parsed.
#[test]
fn ap_6_many_peers_parse() {
    if !have_bird() {
        return;
    }
    let mut text = format!(
        "{PORTS}\n[bgp]\nasn = 4294967295\nkernel_table = 4294967295\nhold_time = \"65535s\"\n\
         bfd = true\nbfd_interval = \"10s\"\nbfd_multiplier = 255\n"
    );
    for i in 0..200 {
        let address = match i % 3 {
            0 => format!("192.0.2.{}", 3 + i / 3),
            1 => format!("2001:db8::{:x}", 3 + i),
            _ => format!("fe80::{:x}", 3 + i),
        };
        text += &format!(
            "\n[[bgp.peer]]\nname = \"peer-{i}-{}\"\naddress = \"{address}\"\nasn = {}\n\
             password = \"{}\"\n",
            "z".repeat(60 - format!("peer-{i}-").len()),
            1 + i,
            "~".repeat(80)
        );
    }
    text += "\n[[bgp.vip]]\nvip = \"203.0.113.10\"\ncommunities = [\"0:0\", \"65535:65535\", \
             \"4294967295:4294967295:4294967295\"]\nmed = 4294967295\n";
    accepted_renders_parse(&text).unwrap();
}
