//! Broken configurations: every error names file:line:col, the field path,
//! what is wrong and a hint (AP-5).

mod common;

use common::diagnostics::{check, errors, replaced, Case};
use controlplane::config;

const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"

[[zone]]
name = "zone-a"
client_subnets = ["10.1.0.0/16"]

[[health_check]]
name = "tcp-80"
type = "TCP"
port = 80

[[backend_service]]
name = "web"
health_check = "tcp-80"
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10", zone = "zone-a" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"
"#;

fn replace(from: &str, to: &str) -> String {
    replaced(BASE, from, to)
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "gateway outside the port's subnet (AP-4)",
            text: replace(
                "address = \"192.0.2.1/24\"\n",
                "address = \"192.0.2.1/24\"\ntap = \"sl-up\"\ngateway = \"198.51.100.1\"\n",
            ),
            at_line_with: "gateway = ",
            path: "dataplane.port \"uplink\".gateway",
            message: "gateway 198.51.100.1 is not inside the port's address subnet",
            hint: "a gateway must be on the link",
        },
        Case {
            name: "TAP name too long for a kernel interface (AP-4)",
            text: replace(
                "address = \"192.0.2.1/24\"\n",
                "address = \"192.0.2.1/24\"\ntap = \"sluice-uplink-tap0\"\n",
            ),
            at_line_with: "tap = ",
            path: "dataplane.port \"uplink\".tap",
            message: "\"sluice-uplink-tap0\" is not a usable interface name",
            hint: "give 1-15 characters",
        },
        Case {
            name: "trunk port VLAN 0 (priority tag, no VLAN)",
            text: replace(
                "address = \"192.0.2.1/24\"\n",
                "address = \"192.0.2.1/24\"\nvlan = 0\n",
            ),
            at_line_with: "vlan = ",
            path: "dataplane.port \"uplink\".vlan",
            message: "vlan 0 is not a VLAN: ID 0 marks priority-tagged frames",
            hint: "use a VLAN ID from 1 to 4094, or remove `vlan` for an untagged port",
        },
        Case {
            name: "trunk port VLAN 4095 (reserved)",
            text: replace(
                "address = \"192.0.2.1/24\"\n",
                "address = \"192.0.2.1/24\"\nvlan = 4095\n",
            ),
            at_line_with: "vlan = ",
            path: "dataplane.port \"uplink\".vlan",
            message: "vlan 4095 is reserved by 802.1Q",
            hint: "use a VLAN ID from 1 to 4094",
        },
        Case {
            name: "trunk port VLAN out of range",
            text: replace(
                "address = \"192.0.2.1/24\"\n",
                "address = \"192.0.2.1/24\"\nvlan = 5000\n",
            ),
            at_line_with: "vlan = ",
            path: "dataplane.port \"uplink\".vlan",
            message: "vlan 5000 is out of range",
            hint: "use a VLAN ID from 1 to 4094",
        },
        Case {
            name: "unknown field",
            text: replace("port = 80\n", "port = 80\nintervall = \"5s\"\n"),
            at_line_with: "intervall",
            path: "health_check[0].intervall",
            message: "unknown field `intervall`",
            hint: "fix its spelling",
        },
        Case {
            name: "unknown field inside an inline table",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nconnection_tracking = { trackng_mode = \"PER_SESSION\" }\n",
            ),
            at_line_with: "trackng_mode",
            path: "backend_service[0].connection_tracking.trackng_mode",
            message: "unknown field `trackng_mode`, expected one of `tracking_mode`",
            hint: "fix its spelling",
        },
        Case {
            name: "missing required field",
            text: replace("name = \"web-vip\"\n", ""),
            at_line_with: "[[forwarding_rule]]",
            path: "forwarding_rule[0]",
            message: "missing field `name`",
            hint: "add the required field",
        },
        Case {
            name: "bad IP",
            text: replace("192.0.2.11\"", "192.0.2.300\""),
            at_line_with: "192.0.2.300",
            path: "backend_service \"web\" backend[1].address",
            message: "invalid IP address \"192.0.2.300\"",
            hint: "hint: write an IPv4 address",
        },
        Case {
            name: "FR-2 overlapping rules name both",
            text: format!(
                "{BASE}\n[[forwarding_rule]]\nname = \"web-all\"\nvip = \"203.0.113.10\"\nprotocol = \"L3_DEFAULT\"\nports = \"ALL\"\nbackend_service = \"web\"\n"
            ),
            at_line_with: "ports = \"ALL\"",
            path: "forwarding_rule \"web-all\"",
            message: "forwarding_rule \"web-all\" overlaps forwarding_rule \"web-vip\" (line 28)",
            hint: "disjoint port ranges",
        },
        Case {
            name: "CT-8 ALWAYS_PERSIST with PER_SESSION",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nconnection_tracking = { tracking_mode = \"PER_SESSION\", connection_persistence_on_unhealthy_backends = \"ALWAYS_PERSIST\" }\n",
            ),
            at_line_with: "ALWAYS_PERSIST",
            path: "backend_service \"web\".connection_tracking.connection_persistence_on_unhealthy_backends",
            message: "ALWAYS_PERSIST cannot be combined",
            hint: "NEVER_PERSIST",
        },
        Case {
            name: "half_open_timeout longer than idle_timeout (CT-5, SYN floods)",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nconnection_tracking = { idle_timeout = \"30s\", half_open_timeout = \"2m\" }\n",
            ),
            at_line_with: "half_open_timeout",
            path: "backend_service \"web\".connection_tracking.half_open_timeout",
            message: "half_open_timeout (120s) is longer than idle_timeout (30s)",
            hint: "lower half_open_timeout (default \"5s\") or raise idle_timeout",
        },
        Case {
            name: "half_open_timeout zero",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nconnection_tracking = { half_open_timeout = \"0s\" }\n",
            ),
            at_line_with: "half_open_timeout",
            path: "backend_service \"web\".connection_tracking.half_open_timeout",
            message: "half_open_timeout must be positive",
            hint: "\"5s\" (the default)",
        },
        Case {
            name: "half_open_timeout not a duration",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nconnection_tracking = { half_open_timeout = \"5\" }\n",
            ),
            at_line_with: "half_open_timeout",
            path: "backend_service \"web\".connection_tracking.half_open_timeout",
            message: "invalid duration \"5\"",
            hint: "\"5s\"",
        },
        Case {
            name: "MG-1 non-prime table",
            text: replace("name = \"web\"\n", "name = \"web\"\nmaglev_table_size = 65536\n"),
            at_line_with: "65536",
            path: "backend_service \"web\".maglev_table_size",
            message: "65536 is not prime",
            hint: "65521 or 65537",
        },
        Case {
            name: "dangling service reference",
            text: replace("backend_service = \"web\"", "backend_service = \"wbe\""),
            at_line_with: "\"wbe\"",
            path: "forwarding_rule \"web-vip\".backend_service",
            message: "no backend_service named \"wbe\"",
            hint: "use one of \"web\"",
        },
        Case {
            name: "dangling zone reference",
            text: replace("zone = \"zone-a\"", "zone = \"zone-z\""),
            at_line_with: "zone-z",
            path: "backend_service \"web\" backend[0].zone",
            message: "no zone named \"zone-z\"",
            hint: "\"zone-a\"",
        },
        Case {
            name: "HC-7 weighted needs HTTP check",
            text: replace("name = \"web\"\n", "name = \"web\"\nlocality_lb_policy = \"WEIGHTED_MAGLEV\"\n"),
            at_line_with: "WEIGHTED_MAGLEV",
            path: "backend_service \"web\".locality_lb_policy",
            message: "HC-7",
            hint: "type = \"HTTP\"",
        },
        Case {
            name: "syntax error",
            text: replace("name = \"web\"\n", "name = \"web\n"),
            at_line_with: "name = \"web",
            path: "backend_service[0].name",
            message: "invalid basic string",
            hint: "TOML syntax",
        },
        Case {
            name: "wrong type",
            text: replace("port = 80", "port = \"80\""),
            at_line_with: "port = \"80\"",
            path: "health_check[0].port",
            message: "invalid type",
            hint: "type the field expects",
        },
        Case {
            name: "gre needs a port address of the backend's family",
            text: replace("name = \"web\"\n", "name = \"web\"\nencapsulation = \"gre\"\n")
                .replace("192.0.2.11\"", "2001:db8::11\""),
            at_line_with: "2001:db8::11",
            path: "backend_service \"web\" backend[1].address",
            message: "no dataplane port has an IPv6 address",
            hint: "address6",
        },
        Case {
            name: "geneve VNI beyond 24 bits (RFC 8926)",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nencapsulation = \"geneve\"\ngeneve_vni = 16777216\n",
            ),
            at_line_with: "geneve_vni",
            path: "backend_service \"web\".geneve_vni",
            message: "geneve_vni 16777216 is out of range",
            hint: "use a value from 0 to 16777215",
        },
        Case {
            name: "geneve_port on another tunnel",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nencapsulation = \"gre\"\ngeneve_port = 6081\n",
            ),
            at_line_with: "geneve_port",
            path: "backend_service \"web\".geneve_port",
            message: "geneve_port applies only to encapsulation = \"geneve\"",
            hint: "remove geneve_port, or set encapsulation = \"geneve\"",
        },
        Case {
            name: "gue_port under the default (l2) encapsulation",
            text: replace("name = \"web\"\n", "name = \"web\"\ngue_port = 6080\n"),
            at_line_with: "gue_port",
            path: "backend_service \"web\".gue_port",
            message: "gue_port applies only to encapsulation = \"gue\"",
            hint: "remove gue_port, or set encapsulation = \"gue\"",
        },
        Case {
            name: "unknown encapsulation names every registered one",
            text: replace("name = \"web\"\n", "name = \"web\"\nencapsulation = \"GENEVE\"\n"),
            at_line_with: "encapsulation",
            path: "backend_service \"web\".encapsulation",
            message: "unknown value \"GENEVE\"",
            hint: "did you mean \"geneve\"? use one of \"l2\", \"gre\", \"ipip\", \"gue\", \"geneve\", \"vxlan\"",
        },
        Case {
            name: "fragments: an unknown value",
            text: replace("name = \"web\"\n", "name = \"web\"\nfragments = \"FOLLOW_FLOW\"\n"),
            at_line_with: "fragments",
            path: "backend_service \"web\".fragments",
            message: "unknown value \"FOLLOW_FLOW\"",
            hint: "did you mean \"follow_flow\"? use one of \"three_tuple\", \"follow_flow\"",
        },
        Case {
            name: "fragments = follow_flow where flows hash without ports",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nsession_affinity = \"CLIENT_IP\"\nfragments = \"follow_flow\"\n",
            ),
            at_line_with: "fragments",
            path: "backend_service \"web\".fragments",
            message: "fragments = \"follow_flow\" under session_affinity CLIENT_IP",
            hint: "use session_affinity NONE or CLIENT_IP_PORT_PROTO",
        },
        Case {
            name: "vxlan without vxlan_mac (no default: the backends' device MAC)",
            text: replace("name = \"web\"\n", "name = \"web\"\nencapsulation = \"vxlan\"\n"),
            at_line_with: "encapsulation",
            path: "backend_service \"web\".vxlan_mac",
            message: "encapsulation = \"vxlan\" needs vxlan_mac",
            hint: "give every backend's vxlan device that address",
        },
        Case {
            name: "vxlan_mac not a MAC address",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nencapsulation = \"vxlan\"\nvxlan_mac = \"02:5c:00:00:2a\"\n",
            ),
            at_line_with: "vxlan_mac",
            path: "backend_service \"web\".vxlan_mac",
            message: "invalid MAC address \"02:5c:00:00:2a\"",
            hint: "six hex bytes",
        },
        Case {
            name: "vxlan_vni beyond 24 bits (RFC 7348)",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nencapsulation = \"vxlan\"\nvxlan_mac = \"02:5c:00:00:00:2a\"\nvxlan_vni = 16777216\n",
            ),
            at_line_with: "vxlan_vni",
            path: "backend_service \"web\".vxlan_vni",
            message: "vxlan_vni 16777216 is out of range",
            hint: "use a value from 0 to 16777215",
        },
        Case {
            name: "vxlan_mac on another tunnel",
            text: replace(
                "name = \"web\"\n",
                "name = \"web\"\nencapsulation = \"geneve\"\nvxlan_mac = \"02:5c:00:00:00:2a\"\n",
            ),
            at_line_with: "vxlan_mac",
            path: "backend_service \"web\".vxlan_mac",
            message: "vxlan_mac applies only to encapsulation = \"vxlan\"",
            hint: "remove vxlan_mac, or set encapsulation = \"vxlan\"",
        },
        Case {
            name: "geneve needs a port address of the backend's family",
            text: replace("name = \"web\"\n", "name = \"web\"\nencapsulation = \"geneve\"\n")
                .replace("192.0.2.11\"", "2001:db8::11\""),
            at_line_with: "2001:db8::11",
            path: "backend_service \"web\" backend[1].address",
            message: "no dataplane port has an IPv6 address",
            hint: "address6",
        },
        Case {
            name: "conntrack capacity beyond the slot ceiling",
            text: replace(
                "eal_args = [\"--no-huge\"]\n",
                "eal_args = [\"--no-huge\"]\nconntrack_capacity = 200000000\n",
            ),
            at_line_with: "conntrack_capacity",
            path: "dataplane.conntrack_capacity",
            message: "200000000 is out of range",
            hint: "from 1024 to 100000000",
        },
        Case {
            name: "ratio out of range",
            text: replace(
                "health_check = \"tcp-80\"\n",
                "health_check = \"tcp-80\"\nfailover_policy = { failover_ratio = 1.5 }\n",
            ),
            at_line_with: "failover_ratio",
            path: "backend_service \"web\".failover_policy.failover_ratio",
            message: "outside [0.0, 1.0]",
            hint: "between 0.0 and 1.0",
        },
        Case {
            name: "flow hash key that is not hex (MG-2); the key is not echoed",
            text: replace(
                "eal_args = [\"--no-huge\"]\n",
                "eal_args = [\"--no-huge\"]\nflow_hash_key = \"secret-passphrase-xyz\"\n",
            ),
            at_line_with: "flow_hash_key",
            path: "dataplane.flow_hash_key",
            message: "the flow hash key contains 's', not a hex digit",
            hint: "give 32–128 hex digits",
        },
        Case {
            name: "flow hash key too short (MG-2)",
            text: replace(
                "eal_args = [\"--no-huge\"]\n",
                "eal_args = [\"--no-huge\"]\nflow_hash_key = \"00112233\"\n",
            ),
            at_line_with: "flow_hash_key",
            path: "dataplane.flow_hash_key",
            message: "the flow hash key has 8 hex digits",
            hint: "openssl rand -hex 32",
        },
        Case {
            name: "flow hash key inline and from a file (MG-2)",
            text: replace(
                "eal_args = [\"--no-huge\"]\n",
                "eal_args = [\"--no-huge\"]\nflow_hash_key = \"00112233445566778899aabbccddeeff\"\nflow_hash_key_file = \"/etc/sluice/key\"\n",
            ),
            at_line_with: "flow_hash_key =",
            path: "dataplane.flow_hash_key",
            message: "both flow_hash_key and flow_hash_key_file are set",
            hint: "keep one",
        },
        Case {
            name: "flow hash key file missing (MG-2)",
            text: replace(
                "eal_args = [\"--no-huge\"]\n",
                "eal_args = [\"--no-huge\"]\nflow_hash_key_file = \"/nonexistent/sluice.key\"\n",
            ),
            at_line_with: "flow_hash_key_file",
            path: "dataplane.flow_hash_key_file",
            message: "cannot read the key file /nonexistent/sluice.key",
            hint: "openssl rand -hex 32",
        },
        Case {
            name: "bad enum value suggests the spelling",
            text: replace("type = \"TCP\"", "type = \"tcp\""),
            at_line_with: "type = \"tcp\"",
            path: "health_check \"tcp-80\".type",
            message: "unknown value \"tcp\"",
            hint: "did you mean \"TCP\"",
        },
    ]
}

#[test]
fn ap_5_broken_configs_report_line_path_and_hint() {
    for c in cases() {
        check(&c);
    }
}

#[test]
fn multiple_errors_all_reported_in_one_run() {
    let text = replace("192.0.2.11\"", "192.0.2.300\"")
        .replace("mac = \"02:00:00:00:00:10\"", "mac = \"02:00:00:00:10\"")
        .replace("backend_service = \"web\"", "backend_service = \"nope\"")
        .replace(
            "name = \"web\"\n",
            "name = \"web\"\nmaglev_table_size = 1000\n",
        );
    let (n, out) = errors(&text);
    assert_eq!(n, 4, "{out}");
    assert_eq!(out.matches(": error: ").count(), 4, "{out}");
    assert_eq!(out.matches("\n  hint: ").count(), 4, "{out}");
    // Reported top to bottom.
    let lines: Vec<usize> = out
        .lines()
        .filter(|l| l.starts_with("test.toml:"))
        .map(|l| l.split(':').nth(1).unwrap().parse().unwrap())
        .collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted);
}

#[test]
fn duplicate_names_and_missing_ports() {
    let text = format!("{BASE}\n[[zone]]\nname = \"zone-a\"\n");
    let (_, out) = errors(&text);
    assert!(
        out.contains("duplicate zone name \"zone-a\" (first defined on line 11)"),
        "{out}"
    );

    let text = BASE.replace("[[dataplane.port]]\nname = \"uplink\"\ndevice = \"net_null0\"\naddress = \"192.0.2.1/24\"\n", "");
    let (_, out) = errors(&text);
    assert!(
        out.contains("dataplane.port: 0 ports configured; 1 to 8"),
        "{out}"
    );
}

#[test]
fn service_without_backends_is_allowed() {
    let text = BASE.replace(
        "backend = [\n  { address = \"192.0.2.10\", mac = \"02:00:00:00:00:10\", zone = \"zone-a\" },\n  { address = \"192.0.2.11\", mac = \"02:00:00:00:00:11\" },\n]\n",
        "",
    );
    let cfg = config::load_str(&text, "t").unwrap();
    assert!(cfg.backend_services[0].backends.is_empty());
}

#[test]
fn unreadable_file_is_a_diagnostic() {
    let d = config::load_file(std::path::Path::new("/nonexistent/sluice.toml")).unwrap_err();
    assert_eq!(d.len(), 1);
    assert!(d
        .to_string()
        .starts_with("/nonexistent/sluice.toml: error: cannot read"));
}

/// MG-2: a fleet key inline or from a file (relative to the configuration
/// file, whitespace ignored) is the same key; its `Debug` hides it.
#[test]
fn flow_hash_key_inline_or_from_a_file() {
    let hex = "00112233445566778899aabbccddeeff0011223344556677";
    let inline = BASE.replace(
        "eal_args = [\"--no-huge\"]\n",
        &format!("eal_args = [\"--no-huge\"]\nflow_hash_key = \"{hex}\"\n"),
    );
    let a = config::load_str(&inline, "t")
        .unwrap()
        .dataplane
        .flow_hash_key;
    let dir = std::env::temp_dir().join(format!("sluice-keyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fleet.key"), format!("{hex}\n")).unwrap();
    let from_file = BASE.replace(
        "eal_args = [\"--no-huge\"]\n",
        "eal_args = [\"--no-huge\"]\nflow_hash_key_file = \"fleet.key\"\n",
    );
    std::fs::write(dir.join("sluice.toml"), &from_file).unwrap();
    let b = config::load_file(&dir.join("sluice.toml"))
        .unwrap()
        .dataplane
        .flow_hash_key;
    std::fs::remove_dir_all(&dir).unwrap();
    let a = a.expect("inline key");
    assert_eq!(a.0.len(), 24);
    assert_eq!(Some(&a), b.as_ref());
    assert!(!format!("{a:?}").contains("0011"), "{a:?}");
    assert!(config::load_str(BASE, "t")
        .unwrap()
        .dataplane
        .flow_hash_key
        .is_none());
}

/// Trunk ports: `vlan` from 1 to 4094 is taken as the port's VLAN; no
/// `vlan` leaves the port untagged.
#[test]
fn trunk_port_vlan_is_accepted_from_1_to_4094() {
    for vid in [1u16, 100, 4094] {
        let text = replace(
            "address = \"192.0.2.1/24\"\n",
            &format!("address = \"192.0.2.1/24\"\nvlan = {vid}\n"),
        );
        let cfg = config::load_str(&text, "test.toml").unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(cfg.dataplane.ports[0].vlan, Some(vid));
    }
    let cfg = config::load_str(BASE, "test.toml").unwrap();
    assert_eq!(cfg.dataplane.ports[0].vlan, None);
}
