//! Adaptive idle polling (`[dataplane] idle = "adaptive"`) through the real
//! binary on DPDK: an idle worker costs a small fraction of the CPU a
//! busy-polling one burns, and packets that arrive while it sleeps are all
//! forwarded, byte for byte as busy polling forwards them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

const SERVICE: &str = r#"
[[backend_service]]
name = "web"
encapsulation = "gre"
backend = [
  { address = "192.0.2.10", mac = "02:00:00:00:00:10" },
  { address = "192.0.2.11", mac = "02:00:00:00:00:11" },
  { address = "192.0.2.12", mac = "02:00:00:00:00:12" },
]

[[forwarding_rule]]
name = "web-http"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "web"

[[forwarding_rule]]
name = "web-dns"
vip = "203.0.113.10"
protocol = "UDP"
ports = "53"
backend_service = "web"
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> Option<std::collections::BTreeMap<String, u64>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(parse_metrics(body.split_once("\r\n\r\n")?.1))
}

/// User + system CPU time of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name (in parentheses): state is field 3, utime 14,
    // stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Runs sluice on a port that never receives anything (`net_null` with
/// `no-rx`) with `idle_lines` in `[dataplane]`; once its worker polls,
/// measures the process's CPU time over `window`. Returns (CPU ticks,
/// idle sleeps in the window).
fn idle_cpu(idle_lines: &str, window: Duration) -> (u64, u64) {
    let dir = tempdir(&format!(
        "idle-cpu-{}",
        if idle_lines.is_empty() {
            "busy"
        } else {
            "adaptive"
        }
    ));
    let port = free_port();
    let cfg = format!(
        "[dataplane]\n{}\nworkers = 1\nconntrack_capacity = 4096\n{idle_lines}\n\
         [[dataplane.port]]\nname = \"uplink\"\ndevice = \"net_null0,no-rx=1\"\n\
         mac = \"02:00:00:00:00:01\"\naddress = \"192.0.2.1/24\"\n\
         [metrics]\nlisten = \"127.0.0.1:{port}\"\n{SERVICE}",
        eal_args(256)
    );
    let path = dir.join("sluice.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut child = Command::new(sluice_bin())
        .args(["run", "--no-control-socket", "--duration", "8", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let polling = |m: &std::collections::BTreeMap<String, u64>| {
        m.get("sluice_worker_polls_total{worker=\"0\"}")
            .is_some_and(|&p| p > 0)
    };
    let t0 = Instant::now();
    while !scrape(port).is_some_and(|m| polling(&m)) {
        assert!(
            t0.elapsed() < Duration::from_secs(6),
            "the worker never polled"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past start-up, and past the back-off's first steps.
    std::thread::sleep(Duration::from_millis(300));
    let sleeps = |m: Option<std::collections::BTreeMap<String, u64>>| {
        m.and_then(|m| {
            m.get("sluice_worker_idle_sleeps_total{worker=\"0\"}")
                .copied()
        })
        .unwrap()
    };
    let (cpu0, sleeps0) = (cpu_ticks(child.id()), sleeps(scrape(port)));
    std::thread::sleep(window);
    let (cpu1, sleeps1) = (cpu_ticks(child.id()), sleeps(scrape(port)));
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    (cpu1 - cpu0, sleeps1 - sleeps0)
}

/// An idle worker under adaptive idle uses a small fraction of the CPU a
/// busy-polling one does (utime + stime of the whole process over 3 s of
/// no traffic), because it sleeps.
#[test]
fn adaptive_idle_uses_a_fraction_of_the_cpu_of_busy_polling() {
    let window = Duration::from_secs(3);
    let (busy, busy_sleeps) = idle_cpu("", window);
    let (adaptive, sleeps) = idle_cpu("idle = \"adaptive\"", window);
    let ticks_per_s = 100; // USER_HZ on Linux
    eprintln!(
        "CPU over {window:?} of idle: busy {busy} ticks, adaptive {adaptive} ticks \
         ({sleeps} sleeps) at {ticks_per_s} ticks/s"
    );
    assert_eq!(busy_sleeps, 0, "busy polling never sleeps");
    assert!(sleeps > 1000, "an idle adaptive worker sleeps: {sleeps}");
    assert!(
        adaptive * 5 < busy,
        "adaptive idle ({adaptive} ticks) is not far below busy polling ({busy} ticks)"
    );
}

/// 60 TCP flows × 2 packets and 10 UDP datagrams to the VIP, and one
/// packet each that no rule or VIP takes.
fn frames() -> Vec<Vec<u8>> {
    let vip = [203, 0, 113, 10];
    let mut frames = Vec::new();
    for round in 0..2u32 {
        for i in 0..60u32 {
            let src = [10, 1, 0, i as u8 + 1];
            frames.push(tcp_frame(PORT_MAC, src, vip, 20_000 + i as u16, 80, round));
        }
    }
    for i in 0..10u32 {
        let src = [10, 2, 0, i as u8 + 1];
        frames.push(udp_frame(
            PORT_MAC,
            src,
            vip,
            5000 + i as u16,
            53,
            &[i as u8; 20],
        ));
    }
    frames.push(tcp_frame(PORT_MAC, [10, 4, 0, 1], vip, 1234, 443, 0));
    frames.push(tcp_frame(
        PORT_MAC,
        [10, 4, 0, 2],
        [198, 51, 100, 7],
        1234,
        80,
        0,
    ));
    frames
}

/// Waits until sluice's worker polls (its `/metrics` on port `metrics`),
/// then sends the frames of a pcap file on an interface in `groups`
/// groups, each after `gap` seconds of silence.
const SENDER: &str = r#"
import socket, struct, sys, time
path, iface, metrics, groups, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

def polling():
    try:
        s = socket.create_connection(("127.0.0.1", metrics), timeout=1)
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            body += b
    except OSError:
        return False
    for line in body.decode().splitlines():
        if line.startswith('sluice_worker_polls_total{worker="0"} '):
            return float(line.split()[1]) > 0
    return False

deadline = time.time() + 10
while not polling():
    if time.time() > deadline:
        sys.exit("sluice's worker never polled")
    time.sleep(0.1)
data = open(path, "rb").read()
assert struct.unpack_from("<I", data, 0)[0] == 0xA1B2C3D4, "little-endian pcap"
frames, off = [], 24
while off < len(data):
    incl = struct.unpack_from("<IIII", data, off)[2]
    frames.append(data[off + 16:off + 16 + incl])
    off += 16 + incl
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
per = -(-len(frames) // groups)
for g in range(groups):
    time.sleep(gap)
    for f in frames[g * per:(g + 1) * per]:
        s.send(f)
"#;

/// In a network namespace of its own: a veth pair, sluice reading one end
/// through libpcap, the frames written into the other end in groups with
/// quiet spells between them; sluice ends once its input has been idle.
const LIVE_RUN: &str = r#"
set -eu
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip link set lo up
ip link add sl-in type veth peer name sl-feed
ip link set sl-in up
ip link set sl-feed up
"$SLUICE" run --config "$DIR/live.toml" --no-control-socket --exit-on-idle 1500 \
  --metrics-dump "$DIR/metrics.txt" 2>"$DIR/sluice.log" &
sluice=$!
python3 -c "$SENDER" "$DIR/in.pcap" sl-feed "$METRICS" 4 0.3
wait $sluice
"#;

/// Packets that reach a worker while it sleeps (four groups, each after
/// 300 ms of silence: the worker is deep in its back-off) are all
/// forwarded, and the output is byte for byte the output of busy polling
/// replaying the same frames from a file; the counters agree too.
#[test]
fn packets_reaching_a_sleeping_worker_are_forwarded_as_busy_polling_does() {
    let frames = frames();
    let busy_dir = tempdir("idle-golden-busy");
    let busy = replay(
        &busy_dir,
        &format!(
            "{}\n{SERVICE}",
            pcap_dataplane(&busy_dir, &PORT_MAC, "192.0.2.1/24", "")
        ),
        &frames,
        &[],
    );

    let dir = tempdir("idle-golden-adaptive");
    write_pcap(&dir.join("in.pcap"), &frames);
    let metrics = free_port();
    std::fs::write(
        dir.join("live.toml"),
        format!(
            "[dataplane]\n{}\nworkers = 1\nidle = \"adaptive\"\n\
             [[dataplane.port]]\nname = \"uplink\"\n\
             device = \"net_pcap0,rx_iface_in=sl-in,tx_pcap={}/out.pcap\"\n\
             mac = \"02:00:00:00:00:01\"\naddress = \"192.0.2.1/24\"\n\
             [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n{SERVICE}",
            eal_args(256),
            dir.display()
        ),
    )
    .unwrap();
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", LIVE_RUN])
        .env("SLUICE", sluice_bin())
        .env("DIR", &dir)
        .env("METRICS", metrics.to_string())
        .env("SENDER", SENDER)
        .output()
        .expect("spawn unshare");
    assert!(
        out.status.success(),
        "live run failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default()
    );
    let live = parse_metrics(&std::fs::read_to_string(dir.join("metrics.txt")).unwrap());
    let output = read_pcap(&dir.join("out.pcap"));

    let get = |m: &std::collections::BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let rx = "sluice_port_rx_packets_total{port=\"uplink\"}";
    assert_eq!(
        get(&live, rx),
        frames.len() as u64,
        "every frame was received"
    );
    // 300 ms quiet spells in sleeps of at most 1 ms: hundreds of sleeps.
    let sleeps = get(&live, "sluice_worker_idle_sleeps_total{worker=\"0\"}");
    assert!(
        sleeps > 400,
        "the worker slept through the quiet spells, each sleep at most 1 ms: {sleeps} sleeps"
    );
    assert_eq!(
        busy.out.len(),
        130,
        "the reference forwards every VIP packet"
    );
    assert_eq!(output.len(), busy.out.len(), "forwarded as many");
    for (i, (a, b)) in output.iter().zip(&busy.out).enumerate() {
        assert_eq!(a, b, "frame {i} differs from busy polling's");
    }
    for (k, v) in &busy.metrics {
        if k.starts_with("sluice_dropped_packets_total")
            || k.starts_with("sluice_port_tx_")
            || k.starts_with("sluice_backend_packets_total")
            || k.starts_with("sluice_conntrack_inserts_total")
        {
            assert_eq!(get(&live, k), *v, "{k}");
        }
    }
}
