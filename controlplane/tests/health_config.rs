//! `[[health_check]]` validation: the UDP type's fields, and each error
//! naming file:line, the field and the fix (AP-5).

mod common;

use common::diagnostics::{check, replaced, Case};
use controlplane::config;
use controlplane::config::{ProbeKind, UdpCheck};

const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"

[[health_check]]
name = "dns"
type = "UDP"
port = 53
request = "ping"

[[backend_service]]
name = "dns"
health_check = "dns"
backend = [{ address = "192.0.2.10" }]
"#;

fn with(from: &str, to: &str) -> String {
    replaced(BASE, from, to)
}

fn kind(text: &str) -> ProbeKind {
    let c = config::load_str(text, "test.toml").unwrap_or_else(|d| panic!("{d}"));
    c.health_checks[0].kind.clone()
}

/// `request`/`response` as text, `request_hex`/`response_hex` as bytes
/// (blanks between bytes allowed); without a response any reply passes.
#[test]
fn udp_check_request_and_response_text_or_hex() {
    assert_eq!(
        kind(BASE),
        ProbeKind::Udp(UdpCheck {
            request: b"ping".to_vec(),
            response: None
        })
    );
    assert_eq!(
        kind(&with(
            "request = \"ping\"\n",
            "request_hex = \"00 0A1b ff\"\nresponse = \"pong\"\n"
        )),
        ProbeKind::Udp(UdpCheck {
            request: vec![0x00, 0x0a, 0x1b, 0xff],
            response: Some(b"pong".to_vec())
        })
    );
    assert_eq!(
        kind(&with(
            "request = \"ping\"\n",
            "request = \"ping\\n\"\nresponse_hex = \"504f4e47\"\n"
        )),
        ProbeKind::Udp(UdpCheck {
            request: b"ping\n".to_vec(),
            response: Some(b"PONG".to_vec())
        })
    );
}

fn cases() -> Vec<Case> {
    let long = format!("request = \"{}\"\n", "x".repeat(1025));
    vec![
        Case {
            name: "no request",
            text: with("request = \"ping\"\n", ""),
            at_line_with: "type = \"UDP\"",
            path: "health_check \"dns\".request",
            message: "a UDP health check needs request or request_hex",
            hint: "add request = \"ping\" (text, sent as UTF-8) or request_hex",
        },
        Case {
            name: "no port",
            text: with("port = 53\n", ""),
            at_line_with: "type = \"UDP\"",
            path: "health_check \"dns\".port",
            message: "a UDP health check needs a port",
            hint: "set port to the UDP port the backends answer on",
        },
        Case {
            name: "request and request_hex",
            text: with(
                "request = \"ping\"\n",
                "request = \"ping\"\nrequest_hex = \"00\"\n",
            ),
            at_line_with: "request_hex",
            path: "health_check \"dns\".request_hex",
            message: "request and request_hex are both set",
            hint: "keep one: request for text, request_hex for bytes",
        },
        Case {
            name: "HC-9: a data-path check no rule of the service takes",
            text: with("request = \"ping\"\n", "request = \"ping\"\npath = \"data\"\n"),
            at_line_with: "health_check = \"dns\"",
            path: "backend_service \"dns\".health_check",
            message: "health check \"dns\" probes through the data path (path = \"data\"), but no forwarding rule of this service takes UDP port 53",
            hint: "add a forwarding rule for UDP port 53 to this service",
        },
        Case {
            name: "HC-9: path is direct or data",
            text: with("request = \"ping\"\n", "request = \"ping\"\npath = \"DATA\"\n"),
            at_line_with: "path = ",
            path: "health_check \"dns\".path",
            message: "unknown value \"DATA\"",
            hint: "did you mean \"data\"? use one of \"direct\", \"data\"",
        },
        Case {
            name: "not hex",
            text: with("request = \"ping\"\n", "request_hex = \"0g\"\n"),
            at_line_with: "request_hex",
            path: "health_check \"dns\".request_hex",
            message: "request_hex contains 'g', not a hex digit",
            hint: "write pairs of hex digits",
        },
        Case {
            name: "odd hex",
            text: with("request = \"ping\"\n", "request_hex = \"00 abc\"\n"),
            at_line_with: "request_hex",
            path: "health_check \"dns\".request_hex",
            message: "request_hex has an odd number of hex digits in \"abc\"",
            hint: "write pairs of hex digits",
        },
        Case {
            name: "empty request",
            text: with("request = \"ping\"\n", "request = \"\"\n"),
            at_line_with: "request = ",
            path: "health_check \"dns\".request",
            message: "request is empty",
            hint: "give at least one byte to send",
        },
        Case {
            name: "empty response",
            text: with(
                "request = \"ping\"\n",
                "request = \"ping\"\nresponse_hex = \" \"\n",
            ),
            at_line_with: "response_hex",
            path: "health_check \"dns\".response_hex",
            message: "response_hex is empty",
            hint: "remove response_hex to accept any reply",
        },
        Case {
            name: "request too long",
            text: with("request = \"ping\"\n", &long),
            at_line_with: "request = ",
            path: "health_check \"dns\".request",
            message: "request is 1025 bytes long",
            hint: "use at most 1024 bytes",
        },
        Case {
            name: "UDP field on a TCP check",
            text: with("type = \"UDP\"", "type = \"TCP\""),
            at_line_with: "request = ",
            path: "health_check \"dns\".request",
            message: "request applies only to UDP health checks",
            hint: "remove request, or set type = \"UDP\"",
        },
        Case {
            name: "HTTP field on a UDP check",
            text: with(
                "request = \"ping\"\n",
                "request = \"ping\"\nrequest_path = \"/\"\n",
            ),
            at_line_with: "request_path",
            path: "health_check \"dns\".request_path",
            message: "request_path applies only to HTTP health checks",
            hint: "remove request_path, or set type = \"HTTP\"",
        },
        Case {
            name: "type in lower case",
            text: with("type = \"UDP\"", "type = \"udp\""),
            at_line_with: "type = ",
            path: "health_check \"dns\".type",
            message: "unknown value \"udp\"",
            hint: "did you mean \"UDP\"? use one of \"TCP\", \"HTTP\", \"UDP\"",
        },
        Case {
            name: "weights need HTTP (HC-7)",
            text: with(
                "health_check = \"dns\"\n",
                "health_check = \"dns\"\nlocality_lb_policy = \"WEIGHTED_MAGLEV\"\n",
            ),
            at_line_with: "locality_lb_policy",
            path: "backend_service \"dns\".locality_lb_policy",
            message: "WEIGHTED_MAGLEV needs an HTTP health check",
            hint: "type = \"HTTP\"",
        },
    ]
}

/// Every UDP check error: exactly one, on the right line, with its
/// field path, message and fix.
#[test]
fn udp_check_errors_name_line_field_and_fix() {
    for c in cases() {
        assert_eq!(check(&c), 1, "case {:?}: one error", c.name);
    }
}

/// The UDP example in docs/configuration.md validates, as documented: a
/// DNS query sent as bytes, its id expected back.
#[test]
fn udp_example_in_the_docs_validates() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    let example = docs
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.contains("type = \"UDP\""))
        .expect("a UDP example");
    let check = BASE
        .split("[[health_check]]")
        .nth(1)
        .and_then(|s| s.split("[[backend_service]]").next())
        .unwrap();
    let text = BASE.replace(&format!("[[health_check]]{check}"), &format!("{example}\n"));
    let ProbeKind::Udp(UdpCheck { request, response }) = kind(&text) else {
        panic!("not UDP");
    };
    assert_eq!(request.len(), 17, "a 12-byte header and one question");
    assert_eq!(response.as_deref(), Some(&[0x5d, 0x1c][..]));
}

/// HC-9: with a rule that takes the check's protocol and port, each of
/// its VIPs is probed (a TCP rule does not take a UDP check).
#[test]
fn hc_9_a_data_path_check_probes_the_vips_whose_rules_take_it() {
    let text = with(
        "request = \"ping\"\n",
        "request = \"ping\"\npath = \"data\"\n",
    ) + r#"
[[forwarding_rule]]
name = "dns-udp"
vip = "203.0.113.53"
protocol = "UDP"
ports = "53"
backend_service = "dns"

[[forwarding_rule]]
name = "dns-tcp"
vip = "203.0.113.54"
protocol = "TCP"
ports = "53"
backend_service = "dns"

[[forwarding_rule]]
name = "dns-all"
vip = "2001:db8::53"
protocol = "L3_DEFAULT"
backend_service = "dns"
"#;
    let cfg = config::load_str(&text, "t.toml").unwrap_or_else(|d| panic!("{d}"));
    let want: Vec<std::net::IpAddr> = vec![
        "203.0.113.53".parse().unwrap(),
        "2001:db8::53".parse().unwrap(),
    ];
    assert_eq!(cfg.probe_vips, vec![want]);
}
