//! `[bgp]` (AP-6): broken sections name file:line:col, the field, what is
//! wrong and the fix (AP-5), and `sluice bird-config` renders a BIRD
//! configuration that BIRD itself accepts.

use std::process::Command;

use controlplane::config;

mod common;

const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.2/24"
address6 = "2001:db8::2/64"
tap = "sl-up"

[[backend_service]]
name = "web"
backend = [ { address = "192.0.2.10", mac = "02:00:00:00:00:10" } ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"

[bgp]
asn = 65001
hold_time = "3s"
bfd = true
bfd_interval = "100ms"

[[bgp.peer]]
name = "tor-a"
address = "192.0.2.1"
asn = 65000

[[bgp.peer]]
name = "tor-b6"
address = "2001:db8::1"
asn = 65000
password = "s3cret"

[[bgp.vip]]
vip = "203.0.113.10"
communities = ["65000:100"]
med = 10
"#;

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?}");
    BASE.replacen(from, to, 1)
}

struct Case {
    name: &'static str,
    text: String,
    at_line_with: &'static str,
    path: &'static str,
    message: &'static str,
    hint: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "missing asn",
            text: replace("asn = 65001\n", ""),
            at_line_with: "[bgp]",
            path: "bgp.asn",
            message: "[bgp] has no asn",
            hint: "add the appliance's AS number",
        },
        Case {
            name: "peer on no port's subnet",
            text: replace("address = \"192.0.2.1\"", "address = \"198.51.100.1\""),
            at_line_with: "198.51.100.1",
            path: "bgp.peer \"tor-a\".address",
            message: "peer 198.51.100.1 is on no subnet of a port with a tap",
            hint: "give the peer's address on a port's subnet",
        },
        Case {
            name: "peer's port without a TAP",
            text: replace("tap = \"sl-up\"\n", ""),
            at_line_with: "address = \"192.0.2.1\"",
            path: "bgp.peer \"tor-a\".address",
            message: "is on no subnet of a port with a tap",
            hint: "add `tap = \"<name>\"` to port \"uplink\"",
        },
        Case {
            name: "the kernel's main table",
            text: replace("asn = 65001\n", "asn = 65001\nkernel_table = 254\n"),
            at_line_with: "kernel_table",
            path: "bgp.kernel_table",
            message: "table 254 is the kernel's main table",
            hint: "give sluice a table of its own",
        },
        Case {
            name: "hold time below BGP's minimum",
            text: replace("hold_time = \"3s\"", "hold_time = \"2s\""),
            at_line_with: "hold_time",
            path: "bgp.hold_time",
            message: "is not 0 or a whole number of seconds from 3 to 65535",
            hint: "at least 3 (RFC 4271",
        },
        Case {
            name: "BFD interval without BFD",
            text: replace("bfd = true\n", ""),
            at_line_with: "bfd_interval",
            path: "bgp.bfd_interval",
            message: "bfd_interval is set but BFD is off",
            hint: "add `bfd = true`",
        },
        Case {
            name: "attributes for an address that is no VIP",
            text: replace(
                "vip = \"203.0.113.10\"\ncommunities",
                "vip = \"203.0.113.99\"\ncommunities",
            ),
            at_line_with: "203.0.113.99",
            path: "bgp.vip[0].vip",
            message: "203.0.113.99 is the VIP of no forwarding rule",
            hint: "give the `vip` of a [[forwarding_rule]]",
        },
        Case {
            name: "malformed community",
            text: replace("[\"65000:100\"]", "[\"65000:100000\"]"),
            at_line_with: "communities",
            path: "bgp.vip[0].communities[0]",
            message: "invalid community \"65000:100000\"",
            hint: "\"ASN:VALUE\" (0-65535 each",
        },
        Case {
            name: "router id that is no IPv4 address",
            text: replace(
                "asn = 65001\n",
                "asn = 65001\nrouter_id = \"2001:db8::1\"\n",
            ),
            at_line_with: "router_id",
            path: "bgp.router_id",
            message: "router id \"2001:db8::1\" is not a non-zero IPv4 address",
            hint: "written as an IPv4 address",
        },
        Case {
            name: "no peer",
            text: BASE[..BASE.find("[[bgp.peer]]").unwrap()].to_string(),
            at_line_with: "[bgp]",
            path: "bgp.peer",
            message: "[bgp] has no peer",
            hint: "add a [[bgp.peer]] table per router",
        },
        Case {
            name: "unknown field",
            text: replace("hold_time", "holdtime"),
            at_line_with: "holdtime",
            path: "bgp.holdtime",
            message: "unknown field `holdtime`",
            hint: "fix its spelling",
        },
    ]
}

/// AP-5, AP-6: every broken `[bgp]` names its line, field, problem and fix.
#[test]
fn ap_6_broken_bgp_sections_report_line_path_and_hint() {
    assert!(config::load_str(BASE, "test.toml").is_ok());
    for c in cases() {
        let out = match config::load_str(&c.text, "test.toml") {
            Ok(_) => panic!("case {:?} unexpectedly valid", c.name),
            Err(d) => d.to_string(),
        };
        let line = c
            .text
            .lines()
            .position(|l| l.contains(c.at_line_with))
            .unwrap()
            + 1;
        let first = out.lines().next().unwrap();
        let ctx = format!("case {:?}:\n{out}", c.name);
        assert!(
            first.starts_with(&format!("test.toml:{line}:")),
            "wrong line (want {line}) in {ctx}"
        );
        assert!(
            first.contains(&format!(": error: {}: ", c.path)),
            "wrong path in {ctx}"
        );
        assert!(first.contains(c.message), "wrong message in {ctx}");
        let hint = out.lines().nth(1).unwrap();
        assert!(
            hint.starts_with("  hint: ") && hint.contains(c.hint),
            "wrong hint in {ctx}"
        );
    }
}

/// The defaults: router id from the first port, table 100, hold 9 s, drain
/// 5 s, stall 3 s; the peer's session leaves from the port's address
/// through its TAP.
#[test]
fn bgp_defaults_and_the_peer_session_source() {
    let text = BASE.replace(
        "hold_time = \"3s\"\nbfd = true\nbfd_interval = \"100ms\"\n",
        "",
    );
    let cfg = config::load_str(&text, "test.toml").unwrap_or_else(|d| panic!("{d}"));
    let b = cfg.bgp.unwrap();
    assert_eq!(b.router_id.to_string(), "192.0.2.2");
    assert_eq!((b.kernel_table, b.hold_time), (100, 9));
    assert_eq!(b.drain_time.as_secs(), 5);
    assert_eq!(b.stall_timeout.as_secs(), 3);
    assert_eq!(b.bfd, None);
    assert_eq!(b.peers[0].local.to_string(), "192.0.2.2");
    assert_eq!(b.peers[0].tap, "sl-up");
}

/// `sluice bird-config` through the binary prints what BIRD 2 parses
/// (`bird -p`, when BIRD is installed: scripts/setup.sh installs it), and
/// exits 2 for a file without [bgp].
#[test]
fn ap_6_bird_config_renders_what_bird_accepts() {
    let dir = common::tempdir("bird-config");
    let file = dir.join("sluice.toml");
    std::fs::write(&file, BASE).unwrap();
    let out = Command::new(common::sluice_bin())
        .args(["bird-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("protocol bgp sluice_tor_a {"), "{text}");
    let bird_conf = dir.join("bird.conf");
    std::fs::write(&bird_conf, &text).unwrap();
    match Command::new("bird")
        .args(["-p", "-c"])
        .arg(&bird_conf)
        .output()
    {
        Ok(r) => assert!(
            r.status.success(),
            "bird -p refuses the rendered configuration:\n{}\n{text}",
            String::from_utf8_lossy(&r.stderr)
        ),
        Err(e) => eprintln!("bird not installed ({e}); run scripts/setup.sh"),
    }
    let plain = dir.join("plain.toml");
    std::fs::write(&plain, &BASE[..BASE.find("[bgp]").unwrap()]).unwrap();
    let out = Command::new(common::sluice_bin())
        .args(["bird-config", plain.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [bgp] section"));
}
