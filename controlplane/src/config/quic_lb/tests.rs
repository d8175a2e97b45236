//! `[[backend_service.quic_lb]]` and the backends' server IDs: every
//! refusal with its line, field and fix, the warning, and what a valid
//! file gives.

use crate::config::{check_str, load_str, Config};

/// A QUIC-LB service of three backends behind a UDP rule. `{QUIC}` is
/// replaced by the service's quic_lb tables (from line 14), `{B0}`,
/// `{B1}`, `{B2}` by the backends' extra keys (lines 10 to 12).
const BASE: &str = r#"[dataplane]
[[dataplane.port]]
name = "lan"
device = "net_null0"
address = "192.0.2.1/24"

[[backend_service]]
name = "quic"
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10"{B0} },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11"{B1} },
  { address = "192.0.2.12", mac = "02:00:00:00:00:12"{B2} },
]
{QUIC}
[[forwarding_rule]]
name = "quic-vip"
vip = "203.0.113.10"
protocol = "UDP"
ports = "443"
backend_service = "quic"
"#;

/// A plaintext configuration: config id, 3-byte server IDs.
fn table(config_id: u8, sid: u8, nonce: u8, key: Option<&str>) -> String {
    let mut t = format!(
        "[[backend_service.quic_lb]]\nconfig_id = {config_id}\nserver_id_length = {sid}\nnonce_length = {nonce}\n"
    );
    if let Some(k) = key {
        t.push_str(&format!("key = \"{k}\"\n"));
    }
    t
}

const KEY: &str = "8f95f09245765f80256934e50c66207f";

fn text(quic: &str, b: [&str; 3]) -> String {
    BASE.replace("{QUIC}", quic)
        .replace("{B0}", b[0])
        .replace("{B1}", b[1])
        .replace("{B2}", b[2])
}

/// Each backend its own 3-byte ID for every configuration.
const IDS: [&str; 3] = [
    ", quic_server_id = \"0a0b01\"",
    ", quic_server_id = \"0a0b02\"",
    ", quic_server_id = \"0a0b03\"",
];

fn errors(t: &str) -> String {
    match load_str(t, "q.toml") {
        Ok(_) => panic!("accepted:\n{t}"),
        Err(d) => d.to_string(),
    }
}

fn accepted(t: &str) -> Config {
    load_str(t, "q.toml").unwrap_or_else(|d| panic!("{d}\n{t}"))
}

#[test]
fn a_valid_service_has_its_configs_and_each_backend_its_server_ids() {
    let quic = table(0, 3, 6, None) + &table(1, 2, 8, Some(KEY));
    let own = |sid: &str| {
        format!(", quic_server_id = \"0a0b{sid}\", quic_server_ids = {{ \"1\" = \"c0{sid}\" }}")
    };
    let c = accepted(&text(&quic, [&own("01"), &own("02"), &own("03")]));
    let s = &c.backend_services[0];
    let lengths: Vec<(u8, u8, u8, bool)> = s
        .quic_lb
        .iter()
        .map(|q| {
            (
                q.lengths.config_id,
                q.lengths.server_id,
                q.lengths.nonce,
                q.key.is_some(),
            )
        })
        .collect();
    assert_eq!(lengths, [(0, 3, 6, false), (1, 2, 8, true)]);
    assert_eq!(s.quic_lb[1].key.unwrap().0[..2], [0x8f, 0x95]);
    let ids: Vec<&[u128]> = s.backends.iter().map(|b| &*b.quic_server_ids).collect();
    assert_eq!(
        ids,
        [
            &[0x0a0b01, 0xc001][..],
            &[0x0a0b02, 0xc002],
            &[0x0a0b03, 0xc003]
        ]
    );
    // A service without quic_lb: no server IDs, nothing allocated.
    let plain = accepted(&text("", ["", "", ""]));
    assert!(plain.backend_services[0].quic_lb.is_empty());
    assert!(plain.backend_services[0].backends[0]
        .quic_server_ids
        .is_empty());
}

/// Lengths the draft does not allow are refused at the field, with the
/// range; the key is 16 bytes of hex, and never shown (nor in `Debug`).
#[test]
fn lengths_and_keys_outside_the_draft_are_refused_at_their_field() {
    let quic = table(7, 3, 6, None)
        + &table(1, 0, 6, None)
        + &table(2, 3, 3, None)
        + &table(3, 12, 8, None)
        + &table(4, 3, 6, Some("8f95f09245765f80256934e50c6620"))
        + &table(5, 3, 6, Some("zz95f09245765f80256934e50c66207f"));
    let shown = errors(&text(&quic, IDS));
    let expected = [
        "q.toml:15:13: error: backend_service \"quic\" quic_lb[0].config_id: config_id 7 is out of range\n  hint: use 0 to 6: 7 (binary 111) marks connection IDs no configuration routes",
        "q.toml:20:20: error: backend_service \"quic\" quic_lb[1].server_id_length: server_id_length 0 is out of range\n  hint: use 1 to 15 bytes, the length of the servers' server IDs",
        "q.toml:25:16: error: backend_service \"quic\" quic_lb[2].nonce_length: nonce_length 3 is too short\n  hint: use at least 4 bytes (the draft's minimum), as the servers do",
        "q.toml:29:16: error: backend_service \"quic\" quic_lb[3].nonce_length: server_id_length 12 and nonce_length 8 add up to 20 bytes; a QUIC connection ID holds at most 19 after its first octet\n  hint: shorten nonce_length or server_id_length (together at most 19 bytes)",
        "q.toml:34:7: error: backend_service \"quic\" quic_lb[4].key: the key has 30 hex digits; a QUIC-LB key is 16 bytes (32 hex digits)\n  hint: give 32 hex digits (16 random bytes, e.g. from `openssl rand -hex 16`): the key the servers use for this config_id",
        "q.toml:39:7: error: backend_service \"quic\" quic_lb[5].key: the key is not hex (0-9, a-f)\n  hint: give 32 hex digits (16 random bytes, e.g. from `openssl rand -hex 16`): the key the servers use for this config_id",
    ];
    assert_eq!(shown, expected.join("\n"));
    assert!(
        !shown.contains("8f95") && !shown.contains("zz95"),
        "{shown}"
    );
    let c = accepted(&text(&table(0, 3, 6, Some(KEY)), IDS));
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("8f95") && debug.contains("QuicLbKey(<hidden>)"),
        "{debug}"
    );
    let raw: crate::config::raw::RawConfig =
        toml::from_str(&text(&table(0, 3, 6, Some(KEY)), IDS)).unwrap();
    assert!(!format!("{raw:?}").contains("8f95"));
}

#[test]
fn config_ids_are_distinct_and_at_most_seven_tables() {
    let quic = table(0, 3, 6, None) + &table(0, 3, 6, None);
    assert_eq!(
        errors(&text(&quic, IDS)),
        "q.toml:19:13: error: backend_service \"quic\" quic_lb[1].config_id: config_id 0 is already used by quic_lb[0] (line 15)\n  hint: give each [[backend_service.quic_lb]] of a service its own config_id, 0 to 6"
    );
    let eight: String =
        (0..7).map(|i| table(i, 3, 6, None)).collect::<String>() + &table(6, 3, 6, None);
    let shown = errors(&text(&eight, IDS));
    assert!(
        shown.contains("backend_service \"quic\" quic_lb[7]: 8 quic_lb tables; at most 7 (one per config_id, 0 to 6)\n  hint: remove the configurations the servers no longer use"),
        "{shown}"
    );
    assert!(
        shown.contains("config_id 6 is already used by quic_lb[6]"),
        "{shown}"
    );
}

/// Every backend has a server ID of each configuration's length, through
/// `quic_server_id` or its configuration's `quic_server_ids` entry.
#[test]
fn every_backend_needs_a_server_id_of_each_configs_length() {
    let quic = table(0, 3, 6, None) + &table(1, 2, 8, None);
    let b = [
        // Config 1 has its own, of its length: fine.
        ", quic_server_id = \"0a0b01\", quic_server_ids = { \"1\" = \"c001\" }",
        // The common one is 3 bytes; config 1 wants 2.
        ", quic_server_id = \"0a0b02\"",
        // Config 0 has none; config 1's is 3 bytes.
        ", quic_server_ids = { \"1\" = \"c00003\" }",
    ];
    assert_eq!(
        errors(&text(&quic, b)),
        [
            "q.toml:11:73: error: backend_service \"quic\" backend[1].quic_server_id: quic_server_id \"0a0b02\" is 3 bytes; quic_lb config_id 1 has server_id_length = 2\n  hint: write 4 hex digits, the server ID the servers encode for config_id 1, or give config_id 1 its own with quic_server_ids = { \"1\" = \"…\" }",
            "q.toml:12:3: error: backend_service \"quic\" backend[2]: no QUIC-LB server ID for config_id 0\n  hint: add quic_server_id = \"<6 hex digits>\" (every config) or quic_server_ids = { \"0\" = \"<6 hex digits>\" }",
            "q.toml:12:82: error: backend_service \"quic\" backend[2].quic_server_ids.\"1\": quic_server_ids.\"1\" \"c00003\" is 3 bytes; quic_lb config_id 1 has server_id_length = 2\n  hint: write 4 hex digits, the server ID the servers encode for config_id 1",
        ]
        .join("\n")
    );
    let b = [
        ", quic_server_id = \"0a0b0g\"",
        ", quic_server_id = \"0a0b2\"",
        "",
    ];
    assert_eq!(
        errors(&text(&table(0, 3, 6, None), b)),
        [
            "q.toml:10:73: error: backend_service \"quic\" backend[0].quic_server_id: quic_server_id \"0a0b0g\" is not hex\n  hint: write 2 hex digits per byte of the server ID, e.g. \"0a0b01\" for server_id_length = 3",
            "q.toml:11:73: error: backend_service \"quic\" backend[1].quic_server_id: quic_server_id \"0a0b2\" has an odd number of hex digits\n  hint: write 2 hex digits per byte of the server ID, e.g. \"0a0b01\" for server_id_length = 3",
            "q.toml:12:3: error: backend_service \"quic\" backend[2]: no QUIC-LB server ID for config_id 0\n  hint: add quic_server_id = \"<6 hex digits>\" (every config) or quic_server_ids = { \"0\" = \"<6 hex digits>\" }",
        ]
        .join("\n")
    );
}

#[test]
fn server_ids_are_unique_per_config_within_the_service() {
    let quic = table(0, 3, 6, None) + &table(1, 3, 6, None);
    // The same ID in two configurations of one backend is fine; two
    // backends with one ID in config 1 are not.
    let b = [
        ", quic_server_id = \"0a0b01\"",
        ", quic_server_id = \"0a0b02\", quic_server_ids = { \"1\" = \"0a0b01\" }",
        ", quic_server_id = \"0a0b03\"",
    ];
    assert_eq!(
        errors(&text(&quic, b)),
        "q.toml:11:109: error: backend_service \"quic\" backend[1].quic_server_ids.\"1\": server ID 0a0b01 of config_id 1 is also backend[0]'s (line 10)\n  hint: give each backend of the service its own server ID in each configuration: a connection ID names one server"
    );
}

#[test]
fn server_ids_need_a_quic_lb_service_and_a_configured_config_id() {
    let b = [
        ", quic_server_id = \"0a0b01\"",
        ", quic_server_ids = { \"0\" = \"0a0b02\" }",
        "",
    ];
    assert_eq!(
        errors(&text("", b)),
        [
            "q.toml:10:73: error: backend_service \"quic\" backend[0].quic_server_id: quic_server_id is set but the service has no [[backend_service.quic_lb]] table\n  hint: add a [[backend_service.quic_lb]] table (config_id, server_id_length, nonce_length) to route QUIC by server ID, or remove quic_server_id",
            "q.toml:11:74: error: backend_service \"quic\" backend[1].quic_server_ids: quic_server_ids is set but the service has no [[backend_service.quic_lb]] table\n  hint: add a [[backend_service.quic_lb]] table (config_id, server_id_length, nonce_length) to route QUIC by server ID, or remove quic_server_ids",
        ]
        .join("\n")
    );
    let b = [
        ", quic_server_id = \"0a0b01\", quic_server_ids = { \"0\" = \"0a0b07\", \"00\" = \"0a0b08\" }",
        "",
        "",
    ];
    let shown = errors(&text(&table(0, 3, 6, None), b));
    assert!(
        shown.starts_with("q.toml:10:126: error: backend_service \"quic\" backend[0].quic_server_ids.\"00\": quic_server_ids gives config id 0 twice\n  hint: keep one entry per config id"),
        "{shown}"
    );
    let b = [
        ", quic_server_id = \"0a0b01\", quic_server_ids = { \"2\" = \"0a0b09\" }",
        ", quic_server_id = \"0a0b02\", quic_server_ids = { \"x\" = \"0a0b08\" }",
        ", quic_server_id = \"0a0b03\"",
    ];
    assert_eq!(
        errors(&text(&table(0, 3, 6, None), b)),
        [
            "q.toml:10:101: error: backend_service \"quic\" backend[0].quic_server_ids.\"2\": quic_server_ids names config id \"2\", which no [[backend_service.quic_lb]] of the service has\n  hint: use a configured config_id (0), or remove the entry",
            "q.toml:11:101: error: backend_service \"quic\" backend[1].quic_server_ids.\"x\": quic_server_ids names config id \"x\", which no [[backend_service.quic_lb]] of the service has\n  hint: use a configured config_id (0), or remove the entry",
        ]
        .join("\n")
    );
}

/// QUIC runs over UDP: a rule of protocol UDP or L3_DEFAULT must send
/// packets to the service.
#[test]
fn quic_lb_needs_a_udp_forwarding_rule() {
    let tcp = text(&table(0, 3, 6, None), IDS).replace("protocol = \"UDP\"", "protocol = \"TCP\"");
    assert_eq!(
        errors(&tcp),
        "q.toml:14:1: error: backend_service \"quic\".quic_lb: quic_lb needs a UDP forwarding rule\n  hint: its rules (quic-vip) carry TCP only: add a [[forwarding_rule]] with protocol = \"UDP\" (or \"L3_DEFAULT\") and backend_service = \"quic\" for the QUIC port, or remove the quic_lb tables"
    );
    let none = text(&table(0, 3, 6, None), IDS).replace(
        "backend_service = \"quic\"\n",
        "backend_service = \"other\"\n[[backend_service]]\nname = \"other\"\n",
    );
    assert!(
        errors(&none).contains("quic_lb needs a UDP forwarding rule\n  hint: no forwarding_rule sends packets to it: add"),
        "{}",
        errors(&none)
    );
    let l3 = text(&table(0, 3, 6, None), IDS).replace(
        "protocol = \"UDP\"\nports = \"443\"",
        "protocol = \"L3_DEFAULT\"",
    );
    accepted(&l3);
}

/// A plaintext and an encrypted configuration that give a backend the
/// same server ID are accepted with a warning, once per pair of
/// configurations; separate IDs warn of nothing.
#[test]
fn a_server_id_shared_by_plaintext_and_encrypted_configs_is_a_warning() {
    let quic = table(0, 3, 6, None) + &table(1, 3, 6, Some(KEY));
    let (_, warnings) = check_str(&text(&quic, IDS), "q.toml").unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(
        warnings.to_string(),
        "q.toml:10:73: warning: backend_service \"quic\" backend[0].quic_server_id: backend[0] has the same server ID 0a0b01 in plaintext config_id 0 and encrypted config_id 1 (and 2 more backends do)\n  hint: allocate server IDs separately for plaintext and encrypted configurations (the draft asks it: a plaintext ID names its server to any observer): give config_id 1 its own with quic_server_ids"
    );
    assert!(!warnings.to_string().contains("8f95"));
    let own = |sid: &str| {
        format!(", quic_server_id = \"0a0b{sid}\", quic_server_ids = {{ \"1\" = \"c0c0{sid}\" }}")
    };
    let (_, warnings) =
        check_str(&text(&quic, [&own("01"), &own("02"), &own("03")]), "q.toml").unwrap();
    assert!(warnings.is_empty(), "{warnings}");
    // load_str, what run and reload use, accepts it without a word.
    accepted(&text(&quic, IDS));
}

/// A key written as anything but a string, or unquoted, is refused
/// without repeating it (nor any run of its digits) in the message or the
/// field path.
#[test]
fn a_key_written_wrongly_is_never_repeated() {
    for k in [
        "12345678901234567890123456789012",
        "8f95f09245765f80256934e50c66207f",
        "[\"8f95f09245765f80256934e50c66207f\"]",
        "{ a = \"8f95f09245765f80256934e50c66207f\" }",
        "\"8f95f09245765f80256934e50c66207f",
    ] {
        let quic = format!(
            "[[backend_service.quic_lb]]\nconfig_id = 0\nserver_id_length = 3\nnonce_length = 6\nkey = {k}\n"
        );
        let shown = errors(&text(&quic, IDS));
        assert!(shown.starts_with("q.toml:18:"), "{shown}");
        assert!(
            shown.contains("backend_service.quic_lb[0].key: "),
            "{shown}"
        );
        for secret in ["12345678", "8f95f0", "f95f09", "5f8025"] {
            assert!(!shown.contains(secret), "{k}: {shown}");
        }
    }
}
