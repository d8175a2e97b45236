//! `sluice explain` against the running appliance through the real
//! binary, for what only the offline mode did before: `--pcap` (every
//! packet of a capture in one bounded request) and `--unhealthy` (a
//! what-if on a copy of the published snapshot, never on the running
//! appliance). Live answers equal the offline ones for the same
//! configuration and inputs (MG-2, EL-1, EL-2, FO-1, CT-11); every
//! question that cannot be answered exits non-zero with the reason.

mod common;
mod explain_common;

use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use common::*;
use explain_common::*;
use serde_json::Value;

/// The fields a live and an offline answer share for one packet.
fn decision(a: &Value) -> Value {
    let b = &a["balancing"];
    let backends: Vec<Value> = b["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| serde_json::json!([l["address"], l["healthy"], l["eligibility"]]))
        .collect();
    serde_json::json!({
        "packet_index": a["packet_index"],
        "rule": a["rule"],
        "verdict": a["verdict"],
        "backend": a["backend"],
        "next_hop_mac": a["next_hop_mac"],
        "flow_hash": b["flow_hash"],
        "slot": b["slot"],
        "active_pool": b["active_pool"],
        "pool_epoch": b["pool_epoch"],
        "backends": backends,
        "assumed_unhealthy": a["assumed_unhealthy"],
    })
}

/// One answer per packet, live == offline, with and without
/// `--unhealthy`; the what-if says it ran on a copy, and the running
/// appliance still has every backend healthy afterwards.
#[test]
fn explain_live_pcap_and_unhealthy_equal_offline() {
    let dir = tempdir("explain_live_what_if");
    let cfg = dir.join("sluice.toml");
    // No health check: nothing changes the published snapshot meanwhile.
    let text = config(&dir).replace("health_check = \"tcp-80\"\n", "");
    std::fs::write(&cfg, text).unwrap();
    write_pcap(&dir.join("in.pcap"), &[]);
    let frames = capture();
    let pcap = dir.join("ask.pcap");
    write_pcap(&pcap, &frames);
    let sock = dir.join("ctl.sock");
    // Long enough for a dozen whole-capture questions on a busy machine.
    let _run = Live::start_for(&cfg, &sock, 180);
    assert!(
        wait_for_path(&sock, std::time::Duration::from_secs(20)),
        "control socket"
    );
    let (sock, cfg, pcap) = (
        sock.to_str().unwrap(),
        cfg.to_str().unwrap(),
        pcap.to_str().unwrap(),
    );
    let what_ifs: [&[&str]; 3] = [
        &[],
        &["--unhealthy", "192.0.2.10"],
        &["--unhealthy", "192.0.2.10", "--unhealthy", "192.0.2.11"],
    ];
    for what_if in what_ifs {
        let live_args = [
            &["--control-socket", sock, "--json"],
            what_if,
            &["--pcap", pcap],
        ]
        .concat();
        let offline_args = [&["-c", cfg, "--json"], what_if, &["--pcap", pcap]].concat();
        let live = explain_json(&live_args);
        let offline = explain_json(&offline_args);
        assert_eq!(live.len(), frames.len(), "{what_if:?}");
        assert_eq!(offline.len(), frames.len(), "{what_if:?}");
        for (l, o) in live.iter().zip(&offline) {
            assert_eq!(decision(l), decision(o), "{what_if:?}");
            assert_eq!(l["what_if"].is_string(), !what_if.is_empty(), "{l}");
        }
    }
    // Known answers of the what-ifs, packet 0 (a SYN to web-vip).
    let ask = |extra: &[&str]| {
        let args = [
            &["--control-socket", sock, "--json"],
            extra,
            &["--pcap", pcap],
        ]
        .concat();
        explain_json(&args)
    };
    let one_down = ask(&["--unhealthy", "192.0.2.10"]);
    assert!(one_down[..120].iter().all(|a| a["backend"] == "192.0.2.11"));
    assert_eq!(
        one_down[0]["balancing"]["backends"][0]["eligibility"],
        "not eligible: unhealthy (--unhealthy)"
    );
    assert!(one_down[0]["what_if"]
        .as_str()
        .unwrap()
        .contains("the running appliance is unchanged"));
    let both_down = ask(&["--unhealthy", "192.0.2.10", "--unhealthy", "192.0.2.11"]);
    assert_eq!(both_down[0]["backend"], "192.0.2.20");
    assert_eq!(both_down[0]["balancing"]["active_pool"], "failover");
    assert_eq!(
        both_down[0]["balancing"]["pool_epoch"], 1,
        "CT-11: the flip to failover moves the epoch"
    );
    // The running appliance is untouched: a plain question afterwards
    // sees every backend healthy, the primary pool, epoch 0.
    let now = ask(&[]);
    assert_eq!(now[0]["balancing"]["active_pool"], "primary");
    assert_eq!(now[0]["balancing"]["pool_epoch"], 0);
    assert_eq!(now[0]["balancing"]["backends"][0]["healthy"], true);
    let status = sluice_status(Path::new(sock));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(!status.contains("unhealthy"), "{status}");
    // Text: a header per packet, and the what-if said.
    let (code, text, err) = explain_status(&[
        "--control-socket",
        sock,
        "--unhealthy",
        "192.0.2.10",
        "--pcap",
        pcap,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(text.starts_with("# packet 1\n"), "{text}");
    assert!(text.contains(&format!("# packet {}\n", frames.len())));
    assert_eq!(text.matches("verdict:").count(), frames.len());
    assert!(text.contains("assumed:       192.0.2.10 unhealthy (--unhealthy)"));
    assert!(text.contains(
        "what-if:       what if 192.0.2.10 were unhealthy: computed on a copy of the published snapshot; the running appliance is unchanged"
    ));
}

/// Every live question that cannot be answered exits non-zero with the
/// reason: 2 for a refused question (unknown port, unknown backend, a
/// malformed flow, a capture past the limits), 1 for no answer. The
/// appliance itself refuses requests past its bounds (size, packets,
/// malformed) whoever sends them, and keeps answering (AP-5).
#[test]
fn explain_live_errors_exit_non_zero() {
    let dir = tempdir("explain_live_errors");
    let cfg = dir.join("sluice.toml");
    let text = config(&dir).replace("health_check = \"tcp-80\"\n", "");
    std::fs::write(&cfg, text).unwrap();
    write_pcap(&dir.join("in.pcap"), &[]);
    let sock_path = dir.join("ctl.sock");
    let _run = Live::start_for(&cfg, &sock_path, 120);
    assert!(
        wait_for_path(&sock_path, std::time::Duration::from_secs(20)),
        "control socket"
    );
    let sock = sock_path.to_str().unwrap();
    let flow = "tcp 198.51.100.7:40000 -> 203.0.113.10:80";
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["--port", "nope", flow],
            2,
            "no [[dataplane.port]] named \"nope\"",
        ),
        (
            &["--unhealthy", "192.0.2.99", flow],
            2,
            "--unhealthy 192.0.2.99: no backend of the configuration has this address",
        ),
        (
            &["tcp 1.2.3.4 -> 5.6.7.8:80"],
            2,
            "hint: write PROTO SRC -> DST",
        ),
        (
            &["--json", "--pcap", "/nonexistent/x.pcap"],
            2,
            "/nonexistent/x.pcap",
        ),
        (&["--json", flow], 0, ""),
    ];
    for (args, want, says) in cases {
        let args = [&["--control-socket", sock], args].concat();
        let (code, _, err) = explain_status(&args);
        assert_eq!(code, Some(want), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A capture past the packet limit is refused before sending.
    let big = dir.join("big.pcap");
    let frames: Vec<Vec<u8>> = (0..1025u16)
        .map(|i| {
            syn(
                [198, 51, (i >> 8) as u8, i as u8],
                40_000,
                [203, 0, 113, 10],
                80,
            )
        })
        .collect();
    write_pcap(&big, &frames);
    let (code, _, err) =
        explain_status(&["--control-socket", sock, "--pcap", big.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("1025 packets; the running sluice explains at most 1024 per request"),
        "{err}"
    );
    // The appliance's own bounds, for a client that does not check.
    let raw = |request: &[u8]| -> String {
        let mut c = UnixStream::connect(&sock_path).unwrap();
        let _ = c.write_all(request);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut reply = String::new();
        let _ = c.read_to_string(&mut reply);
        reply
    };
    let mut huge = b"explain ".to_vec();
    huge.resize(4 * 1024 * 1024 + 100, b'a');
    huge.push(b'\n');
    let reply = raw(&huge);
    assert!(
        reply.starts_with("error\nrequest longer than 4194304 bytes: refused"),
        "{reply}"
    );
    let frames: Vec<String> = (0..1025).map(|_| "00".to_string()).collect();
    let many = format!(
        "explain {}\n",
        serde_json::json!({"json": true, "port": null, "frames": frames})
    );
    let reply = raw(many.as_bytes());
    assert!(
        reply.starts_with("error\nsluice explain: 1025 packets in one request; the running sluice explains at most 1024"),
        "{reply}"
    );
    let reply = raw(b"explain {\"json\": tru\n");
    assert!(
        reply.starts_with("error\nsluice explain: malformed explain request"),
        "{reply}"
    );
    let reply = raw(b"explain {\"json\":true,\"port\":null,\"frames\":[\"0g\"]}\n");
    assert!(
        reply.starts_with("error\nsluice explain: packet 1: not hex"),
        "{reply}"
    );
    // It still answers afterwards.
    let (code, _, err) = explain_status(&["--control-socket", sock, flow]);
    assert_eq!(code, Some(0), "{err}");
}

/// An answer that is not one exits 1 with what was wrong: a reply that
/// is neither `ok` nor `error`, a connection closed without a reply,
/// `--json` documents that do not parse or do not cover every packet.
#[test]
fn explain_live_rejects_malformed_answers() {
    let dir = tempdir("explain_live_malformed");
    let flow = "tcp 198.51.100.7:40000 -> 203.0.113.10:80";
    let cases: [(&str, &[&str], &str); 5] = [
        (
            "hello\n",
            &[],
            "expected `ok` or `error` first, got \"hello\"",
        ),
        ("", &[], "the connection closed without an answer"),
        ("ok\nnot json\n", &["--json"], "document 1: not JSON"),
        ("ok\n", &["--json"], "0 JSON document(s) for 1 packet(s)"),
        ("ok\nsomething\n", &[], "0 verdict(s) for 1 packet(s)"),
    ];
    for (i, (reply, args, says)) in cases.into_iter().enumerate() {
        let sock = dir.join(format!("fake{i}.sock"));
        let listener = UnixListener::bind(&sock).unwrap();
        let reply = reply.to_string();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut line = [0u8; 1];
            // Read the request line, then answer.
            while c
                .read(&mut line)
                .map(|n| n == 1 && line[0] != b'\n')
                .unwrap_or(false)
            {}
            c.write_all(reply.as_bytes()).unwrap();
        });
        let args = [&["--control-socket", sock.to_str().unwrap()], args, &[flow]].concat();
        let (code, out, err) = explain_status(&args);
        server.join().unwrap();
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(out.is_empty(), "nothing printed as an answer: {out}");
        assert!(
            err.contains("malformed answer from the running sluice at"),
            "{err}"
        );
        assert!(err.contains(says), "{says:?} in {err}");
    }
}

/// Offline, the same questions are refused the same way (exit 2).
#[test]
fn explain_offline_errors_exit_2() {
    let dir = tempdir("explain_offline_errors");
    std::fs::write(dir.join("sluice.toml"), config(&dir)).unwrap();
    let cfg = dir.join("sluice.toml");
    let cfg = cfg.to_str().unwrap();
    let flow = "tcp 198.51.100.7:40000 -> 203.0.113.10:80";
    for (args, says) in [
        (
            vec!["-c", cfg, "--unhealthy", "192.0.2.99", flow],
            "--unhealthy 192.0.2.99: no backend of the configuration has this address",
        ),
        (
            vec!["-c", cfg, "--port", "nope", flow],
            "no [[dataplane.port]] named",
        ),
        (
            vec!["-c", cfg, "--pcap", "/nonexistent/x.pcap"],
            "/nonexistent/x.pcap",
        ),
        (
            vec!["-c", "/nonexistent/sluice.toml", flow],
            "/nonexistent/sluice.toml",
        ),
        (vec!["-c", cfg], "give a FLOW"),
    ] {
        let (code, _, err) = explain_status(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
