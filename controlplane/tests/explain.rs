//! `sluice explain --config` through the real binary: its answers for
//! known cases (rule misses, weight 0, the failover pool, `--unhealthy`,
//! IPv6, ICMP), and the decision it explains for each packet of a capture
//! equals what `sluice run` does with that capture on DPDK (`net_pcap`):
//! the backend whose MAC each forwarded frame carries (MG-2 under a fleet
//! key, EL-1, EL-2, FO-1, FR-1 … FR-4).

mod common;
mod explain_common;

use common::*;
use explain_common::*;

/// The decision `sluice explain --pcap` gives for every packet is the one
/// `sluice run` takes: the forwarded frames, in order, carry the MACs of
/// the backends explain names; the packets explain drops are the ones
/// missing from the output. Weight-0 and failover backends are reported
/// not eligible, with their reason, and get nothing (EL-1, EL-2, FO-1).
#[test]
fn explain_pcap_equals_what_the_dataplane_does() {
    let dir = tempdir("explain_equals_dataplane");
    let frames = capture();
    // No health check: the run's probes would leave through this host's
    // kernel towards the backends' addresses, and a verdict would change
    // the published snapshot while the capture replays. Explain reads the
    // same file, so both sides see every backend healthy.
    let text = config(&dir).replace("health_check = \"tcp-80\"\n", "");
    assert!(!text.contains("health_check = "), "{text}");
    let run = replay(&dir, &text, &frames, &[]);
    let cfg = dir.join("sluice.toml");
    let pcap = dir.join("in.pcap");
    let answers = explain_json(&[
        "--config",
        cfg.to_str().unwrap(),
        "--json",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(answers.len(), frames.len());
    let explained: Vec<String> = answers
        .iter()
        .filter(|a| a["verdict"] == "forward")
        .map(|a| a["next_hop_mac"].as_str().unwrap().to_string())
        .collect();
    let sent: Vec<String> = run
        .out
        .iter()
        .map(|f| mac_str(f[..6].try_into().unwrap()))
        .collect();
    assert_eq!(
        explained.len(),
        frames.len() - 2,
        "all but the two misses forwarded"
    );
    assert_eq!(
        explained, sent,
        "explain's backend for each packet = the dataplane's"
    );
    for mac in [
        "02:00:00:00:00:10",
        "02:00:00:00:00:11",
        "02:00:00:00:00:30",
        "02:00:00:00:00:31",
        "02:00:00:00:06:10",
        "02:00:00:00:06:11",
    ] {
        assert!(sent.iter().any(|m| m == mac), "{mac} gets some flows");
    }
    for mac in ["02:00:00:00:00:12", "02:00:00:00:00:20"] {
        assert!(!sent.iter().any(|m| m == mac), "{mac} gets none");
    }
    let web = &answers[0]["balancing"]["backends"];
    assert_eq!(web[2]["eligibility"], "not eligible: weight 0");
    assert_eq!(
        web[3]["eligibility"],
        "not eligible: in the failover pool, which is not active"
    );
    let n = frames.len();
    assert_eq!(answers[n - 2]["verdict"], "drop (no_rule)");
    assert_eq!(answers[n - 1]["verdict"], "drop (not_for_us)");
    assert!(answers[n - 2]["rule"]["why"]
        .as_str()
        .unwrap()
        .contains("no TCP rule takes port 443"));
}

/// Known answers for flows written on the command line: the rule, the
/// hashed fields per affinity, the table's owner being the chosen backend,
/// and `--unhealthy` moving every flow to the remaining healthy primary
/// (EL-1); with both primaries down the failover pool takes over (FO-1).
#[test]
fn explain_flows_known_answers() {
    let dir = tempdir("explain_known_answers");
    std::fs::write(dir.join("sluice.toml"), config(&dir)).unwrap();
    let cfg = dir.join("sluice.toml");
    let cfg = cfg.to_str().unwrap();
    let tcp = "tcp 198.51.100.7:40000 -> 203.0.113.10:80";
    let a = &explain_json(&["-c", cfg, "--json", tcp])[0];
    assert_eq!(a["rule"]["matched"], "web-vip");
    assert_eq!(a["balancing"]["service"], "web");
    assert_eq!(a["balancing"]["tracked"], true);
    assert_eq!(a["balancing"]["tracking_mode"], "PER_CONNECTION");
    assert_eq!(a["balancing"]["encapsulation"], "l2");
    assert_eq!(a["balancing"]["slot_owner"], a["backend"]);
    assert_eq!(a["ingress_port"], "uplink");
    let a = &explain_json(&["-c", cfg, "--json", "--unhealthy", "192.0.2.10", tcp])[0];
    assert_eq!(a["backend"], "192.0.2.11");
    assert_eq!(
        a["balancing"]["backends"][0]["eligibility"],
        "not eligible: unhealthy (--unhealthy)"
    );
    let a = &explain_json(&[
        "-c",
        cfg,
        "--json",
        "--unhealthy",
        "192.0.2.10",
        "--unhealthy",
        "192.0.2.11",
        tcp,
    ])[0];
    assert_eq!(a["backend"], "192.0.2.20");
    assert_eq!(a["balancing"]["active_pool"], "failover");
    let a = &explain_json(&["-c", cfg, "--json", "udp 10.9.0.1:5000 -> 203.0.113.53:53"])[0];
    assert_eq!(a["balancing"]["hashed_fields"], "client IP, VIP");
    // Configuration values, never the program's type names.
    assert_eq!(a["balancing"]["affinity"], "CLIENT_IP");
    let b = &explain_json(&["-c", cfg, "--json", "icmp 10.9.0.1 -> 203.0.113.53"])[0];
    assert_eq!(
        a["backend"], b["backend"],
        "CLIENT_IP: one backend for all protocols"
    );
    let a = &explain_json(&[
        "-c",
        cfg,
        "--json",
        "tcp [2001:db8::7]:40000 -> [2001:db8:1::10]:80",
    ])[0];
    assert_eq!(a["rule"]["matched"], "web6-vip");
    assert!(a["backend"].as_str().unwrap().starts_with("2001:db8:2::1"));
    let (ok, text, _) = explain(&["-c", cfg, tcp]);
    assert!(ok);
    for line in [
        "rule:          \"web-vip\"",
        "affinity:      NONE (hashes client IP, client port, protocol, VIP, VIP port)",
        "(PER_CONNECTION)",
        "encapsulation: l2",
        "maglev slot:",
        "next hop:",
        "mtu:",
        // HC-9: where a backend was chosen, the doctor checks its path.
        "path:          `sluice doctor` checks this backend's path",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    let (ok, _, err) = explain(&["-c", cfg, "--port", "nope", tcp]);
    assert!(
        !ok && err.contains("no [[dataplane.port]] named \"nope\""),
        "{err}"
    );
    let (ok, _, err) = explain(&["-c", cfg, "tcp 1.2.3.4 -> 5.6.7.8:80"]);
    assert!(!ok && err.contains("hint:"), "{err}");
}

/// `sluice explain` without `--config` asks the running appliance over
/// its control socket: the answer comes from the published snapshot and
/// equals the offline one for the same configuration, flow by flow, text
/// and JSON.
#[test]
fn explain_live_over_the_control_socket() {
    let dir = tempdir("explain_live");
    let cfg = dir.join("sluice.toml");
    // No health check: nothing changes the published snapshot meanwhile.
    let text = config(&dir).replace("health_check = \"tcp-80\"\n", "");
    std::fs::write(&cfg, text).unwrap();
    write_pcap(&dir.join("in.pcap"), &[]);
    let sock = dir.join("ctl.sock");
    let _run = Live::start(&cfg, &sock);
    assert!(
        wait_for_path(&sock, std::time::Duration::from_secs(20)),
        "control socket"
    );
    let sock = sock.to_str().unwrap();
    let cfg = cfg.to_str().unwrap();
    for i in 0..20 {
        let flow = format!("tcp 198.51.100.{i}:{} -> 203.0.113.10:80", 40_000 + i);
        let live = &explain_json(&["--control-socket", sock, "--json", &flow])[0];
        let offline = &explain_json(&["-c", cfg, "--json", &flow])[0];
        assert_eq!(live["backend"], offline["backend"], "{flow}");
        assert_eq!(
            live["balancing"]["flow_hash"],
            offline["balancing"]["flow_hash"]
        );
        assert_eq!(live["next_hop_mac"], offline["next_hop_mac"]);
    }
    let (ok, text, err) = explain(&[
        "--control-socket",
        sock,
        "udp [2001:db8::7]:40000 -> [2001:db8:1::10]:80",
    ]);
    assert!(ok, "{err}");
    assert!(text.contains("verdict:       drop (no_rule)"), "{text}");
    let (ok, _, err) = explain(&[
        "--control-socket",
        "/nonexistent/sluice.sock",
        "tcp 198.51.100.7:40000 -> 203.0.113.10:80",
    ]);
    assert!(
        !ok && err.contains("cannot reach the running sluice"),
        "{err}"
    );
}

/// Live, the worker that owns a flow reports its conntrack entry through
/// its mailbox: after the appliance forwarded a SYN, explain shows the
/// entry (half-open, CT-1/CT-5) with the backend the SYN went to, and
/// that CT-3 decides the flow's later packets; a flow never sent has no
/// entry.
#[test]
fn explain_live_reports_the_conntrack_entry() {
    let dir = tempdir("explain_live_conntrack");
    let cfg = dir.join("sluice.toml");
    let text = config(&dir).replace("health_check = \"tcp-80\"\n", "");
    std::fs::write(&cfg, text).unwrap();
    write_pcap(
        &dir.join("in.pcap"),
        &[syn([198, 51, 100, 7], 40_000, [203, 0, 113, 10], 80)],
    );
    let sock = dir.join("ctl.sock");
    let run = Live::start(&cfg, &sock);
    assert!(
        wait_for_path(&sock, std::time::Duration::from_secs(20)),
        "control socket"
    );
    let sock = sock.to_str().unwrap();
    let ask = |flow: &str| explain_json(&["--control-socket", sock, "--json", flow]).remove(0);
    let flow = "tcp 198.51.100.7:40000 -> 203.0.113.10:80";
    let t0 = std::time::Instant::now();
    let mut a = ask(flow);
    while a["conntrack"]["entries"].as_array().unwrap().is_empty() {
        assert!(t0.elapsed().as_secs() < 4, "no entry: {a}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        a = ask(flow);
    }
    let entry = &a["conntrack"]["entries"][0];
    assert_eq!(entry["worker"], 0);
    assert_eq!(entry["half_open"], true);
    assert_eq!(entry["backend"], a["backend"]);
    assert!(entry["decides"].as_str().unwrap().starts_with("CT-3"));
    let (ok, text, _) = explain(&["--control-socket", sock, flow]);
    assert!(
        ok && text.contains("conntrack:     worker 0: backend "),
        "{text}"
    );
    let other = ask("tcp 198.51.100.8:40000 -> 203.0.113.10:80");
    assert!(other["conntrack"]["entries"].as_array().unwrap().is_empty());
    assert!(other["conntrack"]["decides"]
        .as_str()
        .unwrap()
        .starts_with("CT-1"));
    drop(run);
    let out = read_pcap(&dir.join("out.pcap"));
    assert_eq!(out.len(), 1);
    assert_eq!(
        Some(mac_str(out[0][..6].try_into().unwrap()).as_str()),
        a["next_hop_mac"].as_str(),
        "the entry's backend is where the SYN went"
    );
}

/// HA-4: an ICMP error about a VIP flow (a router's "fragmentation
/// needed" quoting a packet the backend sent the client) is explained as
/// that flow: the client's flow is named, its rule taken, its fields
/// hashed (5-tuple under NONE), and it reaches the flow's backend. FR-1,
/// FR-4: a packet no rule takes is told which rule would take it.
#[test]
fn explain_icmp_errors_as_their_flow_and_says_which_rule_a_miss_lacks() {
    let dir = tempdir("explain_icmp_error");
    std::fs::write(dir.join("sluice.toml"), config(&dir)).unwrap();
    let cfg = dir.join("sluice.toml");
    let cfg = cfg.to_str().unwrap();
    // The packet the backend sent: VIP:80 -> client:40000, quoted.
    let mut quoted = Vec::new();
    etherparse::PacketBuilder::ipv4([203, 0, 113, 10], [198, 51, 100, 7], 64)
        .tcp(80, 40000, 1, 65535)
        .ack(1)
        .write(&mut quoted, &[0u8; 8])
        .unwrap();
    let mut error = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv4([10, 99, 99, 1], [203, 0, 113, 10], 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
        ))
        .write(&mut error, &quoted[..28])
        .unwrap();
    // A UDP fragment past the first (no ports) to the TCP-only VIP.
    let mut fragment = Vec::new();
    let mut ip = etherparse::Ipv4Header::new(
        16,
        64,
        etherparse::IpNumber::UDP,
        [10, 9, 0, 1],
        [203, 0, 113, 10],
    )
    .unwrap();
    ip.fragment_offset = etherparse::IpFragOffset::try_new(100).unwrap();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ip(etherparse::IpHeaders::Ipv4(ip, Default::default()))
        .write(&mut fragment, etherparse::IpNumber::UDP, &[0u8; 16])
        .unwrap();
    let pcap = dir.join("in.pcap");
    write_pcap(&pcap, &[error, fragment]);
    let answers = explain_json(&["-c", cfg, "--json", "--pcap", pcap.to_str().unwrap()]);
    let e = &answers[0];
    assert_eq!(e["icmp_error_about"]["protocol"], "tcp", "{e}");
    assert_eq!(e["icmp_error_about"]["src"], "198.51.100.7:40000");
    assert_eq!(e["icmp_error_about"]["dst"], "203.0.113.10:80");
    assert_eq!(e["rule"]["matched"], "web-vip");
    assert_eq!(
        e["balancing"]["hashed_fields"],
        "client IP, client port, protocol, VIP, VIP port"
    );
    let flow = &explain_json(&[
        "-c",
        cfg,
        "--json",
        "tcp 198.51.100.7:40000 -> 203.0.113.10:80",
    ])[0];
    assert_eq!(e["backend"], flow["backend"], "the flow's own backend");
    let f = &answers[1];
    let why = f["rule"]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("non-first fragment")
            && why.contains("FR-4")
            && why.contains("UDP rule over ALL"),
        "{f}"
    );
    let (ok, text, _) = explain(&["-c", cfg, "--pcap", pcap.to_str().unwrap()]);
    assert!(ok);
    assert!(
        text.contains(
            "icmp error:    about the client's flow tcp 198.51.100.7:40000 -> 203.0.113.10:80"
        ),
        "{text}"
    );
    let (_, text, _) = explain(&["-c", cfg, "icmp 198.51.100.7 -> 203.0.113.10"]);
    assert!(
        text.contains("icmp is neither TCP nor UDP: only an L3_DEFAULT rule takes it"),
        "{text}"
    );
    let (_, text, _) = explain(&["-c", cfg, "tcp 198.51.100.7:40000 -> 203.0.113.10:443"]);
    assert!(
        text.contains("no TCP rule takes port 443 and no L3_DEFAULT rule takes the VIP"),
        "{text}"
    );
}
