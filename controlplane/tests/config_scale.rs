//! Configuration validation at a provider's scale, through the
//! real binary: `sluice check-config FILE` as an operator runs it, and as
//! a reload validates a file.
//!
//! - No step is quadratic: the same file at n and 2n items (rules that
//!   all overlap, distinct rules, services, backends, one backend listed
//!   n times, overlapping zone subnets) takes at most 3× as long. Linear
//!   work doubles, n log n a little more; a quadratic step quadruples.
//!   FR-2's overlap check compared every pair of rules, and every error
//!   counted lines from the file's start: both were quadratic.
//! - Errors are bounded: each offending item is reported once (an
//!   overlapping rule names the first rule it overlaps and how many
//!   others, not one error per pair), at most the first 100 are printed
//!   and the rest counted, and memory does not grow with their number.
//! - No mutant of a shipped configuration (`conf/*.toml` with items
//!   multiplied, keys duplicated, huge strings, deep nesting) takes long:
//!   with `SLUICE_BIN` naming a release binary, each stays under 1 s.
//!
//! Ratios compare the child's CPU time (user and system, from `wait4`),
//! the best of 3 runs, so that other work on a shared machine does not
//! count; the timing tests run one at a time. The mutants' bound is on
//! wall time, what an operator waits.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;

/// Timing tests share the machine's cores: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const BASE: &str = r#"[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci"]

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"
"#;

/// The binary measured: `SLUICE_BIN` (e.g. a release build) or the
/// tree's own.
fn binary() -> String {
    std::env::var("SLUICE_BIN").unwrap_or_else(|_| sluice_bin().to_string())
}

/// One `check-config` run: its wall time, CPU time (user and system: the
/// work itself, whatever else the machine runs), exit code, stderr and
/// peak RSS.
struct Run {
    took: Duration,
    cpu: Duration,
    code: Option<i32>,
    stderr: String,
    max_rss_kb: i64,
}

/// Runs `sluice check-config` on `file`. stderr goes to a file (a pipe
/// would stall a child with much to say). The child's peak RSS is its
/// `VmHWM`, sampled while it runs (a high-water mark: the last sample is
/// the peak up to then); its CPU time is read from `/proc/PID/stat` once
/// it has exited but before it is reaped (`waitid` with `NOWAIT`).
fn check_config(file: &Path) -> Run {
    use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
    let err_path = file.with_extension("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let started = Instant::now();
    let mut child = Command::new(binary())
        .arg("check-config")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32).expect("a child's pid");
    let mut max_rss_kb = 0;
    loop {
        if let Some(kb) = vm_hwm_kb(child.id()) {
            max_rss_kb = max_rss_kb.max(kb);
        }
        let exited = waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG,
        )
        .expect("waitid");
        if exited.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = started.elapsed();
    let cpu = cpu_time(child.id());
    let code = child.wait().expect("reaped").code();
    Run {
        took,
        cpu,
        code,
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        max_rss_kb,
    }
}

/// `VmHWM` of a running process, in KiB.
fn vm_hwm_kb(pid: u32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// User plus system CPU time of an exited, unreaped child (fields 14 and
/// 15 of `/proc/PID/stat`, in USER_HZ = 100 ticks per second on Linux).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // The command name (field 2) may hold spaces: fields after its `)`.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// The run of 3 that took the least CPU time.
fn best_of_3(file: &Path) -> Run {
    (0..3)
        .map(|_| check_config(file))
        .min_by_key(|r| r.cpu)
        .unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn service(name: &str, backends: impl Iterator<Item = String>) -> String {
    let mut s = format!("[[backend_service]]\nname = \"{name}\"\nbackend = [\n");
    for b in backends {
        s += &format!("  {{ address = \"{b}\", mac = \"02:00:00:00:00:10\" }},\n");
    }
    s + "]\n"
}

/// Rule `i` of a file: on VIP `vip`, TCP port `port` when given (else
/// every port), to `service`.
fn rule(i: usize, vip: &str, port: Option<usize>, service: &str) -> String {
    let ports = port.map_or("ALL".to_string(), |p| p.to_string());
    format!(
        "[[forwarding_rule]]\nname = \"r{i}\"\nvip = \"{vip}\"\nprotocol = \"TCP\"\n\
         ports = \"{ports}\"\nbackend_service = \"{service}\"\n"
    )
}

/// A VIP and port of their own for rule `i`: 65,535 ports per VIP.
fn own_port(i: usize) -> (String, Option<usize>) {
    let vip = std::net::Ipv4Addr::from(0xcb00_7100u32 + (i / 65_535) as u32);
    (vip.to_string(), Some(1 + i % 65_535))
}

/// The k-th address of 10.0.0.0/8 (k ≥ 1).
fn address(k: usize) -> String {
    std::net::Ipv4Addr::from(0x0a00_0000u32 + k as u32).to_string()
}

fn one_service() -> String {
    service("web", std::iter::once("192.0.2.10".to_string()))
}

/// n TCP rules on one VIP and port: every pair overlaps (FR-2).
fn overlapping_rules(n: usize) -> String {
    let rules: String = (0..n)
        .map(|i| rule(i, "203.0.113.10", Some(80), "web"))
        .collect();
    format!("{BASE}{}{rules}", one_service())
}

/// n rules that do not overlap: a port of their own on one VIP, 65,535
/// rules per VIP.
fn distinct_rules(n: usize) -> String {
    let rules: String = (0..n)
        .map(|i| {
            let (vip, port) = own_port(i);
            rule(i, &vip, port, "web")
        })
        .collect();
    format!("{BASE}{}{rules}", one_service())
}

/// n services with a backend and a rule each: references by name.
fn services(n: usize) -> String {
    let mut text = BASE.to_string();
    for i in 0..n {
        text += &service(&format!("s{i}"), std::iter::once(address(i + 1)));
    }
    for i in 0..n {
        let (vip, port) = own_port(i);
        text += &rule(i, &vip, port, &format!("s{i}"));
    }
    text
}

/// One service with n distinct backends.
fn backends(n: usize) -> String {
    format!("{BASE}{}", service("web", (1..=n).map(address)))
}

/// One service listing one backend n times.
fn duplicate_backends(n: usize) -> String {
    let same = std::iter::repeat_n("192.0.2.10".to_string(), n);
    format!("{BASE}{}", service("web", same))
}

/// n zones, each claiming 10.0.0.0/8 and its own /32 in it.
fn overlapping_zones(n: usize) -> String {
    let zones: String = (0..n)
        .map(|i| {
            format!(
                "[[zone]]\nname = \"z{i}\"\nclient_subnets = [\"10.0.0.0/8\", \"{}/32\"]\n",
                address(i + 1)
            )
        })
        .collect();
    format!("{BASE}{zones}")
}

/// Doubles n from `n` until `check-config` takes at least 0.2 s of CPU
/// time (the process's start no longer dominates), then asserts that 2n
/// takes at most 3× as long as n. Each file is checked to be accepted or refused
/// as `expect_errors` says (a fast wrong answer proves nothing).
fn scales_linearly(case: &str, mut n: usize, make: fn(usize) -> String, expect_errors: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir(&format!("config-scale-{case}"));
    let measure = |n: usize| {
        let file = write(&dir, &format!("{n}.toml"), &make(n));
        let run = best_of_3(&file);
        let want = if expect_errors { 2 } else { 0 };
        assert_eq!(run.code, Some(want), "{case} n={n}:\n{}", run.stderr);
        run.cpu
    };
    let mut at_n = measure(n);
    while at_n < Duration::from_millis(200) && n < 1 << 20 {
        n *= 2;
        at_n = measure(n);
    }
    let at_2n = measure(2 * n);
    let ratio = at_2n.as_secs_f64() / at_n.as_secs_f64();
    eprintln!("{case}: n={n} {at_n:?}, 2n {at_2n:?}: ×{ratio:.2}");
    assert!(
        ratio <= 3.0,
        "{case}: {n} items took {at_n:?}, {} took {at_2n:?} (×{ratio:.2}): something is quadratic",
        2 * n
    );
}

/// FR-2: rules that all overlap are reported one error each, and the
/// check is not quadratic in their number.
#[test]
fn overlapping_rules_scale_linearly() {
    scales_linearly("overlapping-rules", 500, overlapping_rules, true);
}

#[test]
fn distinct_rules_scale_linearly() {
    scales_linearly("distinct-rules", 1000, distinct_rules, false);
}

#[test]
fn services_scale_linearly() {
    scales_linearly("services", 500, services, false);
}

#[test]
fn backends_scale_linearly() {
    scales_linearly("backends", 2000, backends, false);
}

#[test]
fn duplicate_backends_scale_linearly() {
    scales_linearly("duplicate-backends", 2000, duplicate_backends, true);
}

#[test]
fn overlapping_zones_scale_linearly() {
    scales_linearly("overlapping-zones", 500, overlapping_zones, true);
}

/// FR-2 at 5,000 rules that all overlap (12.5 million pairs): one error
/// per rule, naming the first rule and how many others; the first 100
/// printed and the rest counted; and no more memory than a valid file of
/// the same size needs.
#[test]
fn five_thousand_overlapping_rules_are_refused_in_bounded_output_and_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir("config-scale-5000");
    let bad = write(&dir, "overlapping.toml", &overlapping_rules(5000));
    let good = write(&dir, "distinct.toml", &distinct_rules(5000));
    let refused = check_config(&bad);
    let accepted = check_config(&good);
    assert_eq!(refused.code, Some(2), "{}", &refused.stderr[..2000]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.stderr);

    let out = &refused.stderr;
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("{}:", bad.display()))
            && first.contains(": error: forwarding_rule \"r1\": "),
        "{first}"
    );
    assert!(
        first.contains(
            "overlaps forwarding_rule \"r0\" (line 14): both claim TCP 203.0.113.10 ports 80 (FR-2); \
             4998 other rules overlap it as well"
        ),
        "{first}"
    );
    assert_eq!(out.matches(": error: ").count(), 100, "{out}");
    assert!(out.contains("… and 4899 more errors"), "{out}");
    assert!(out.contains(": 4999 error(s)"), "{out}");
    assert!(out.len() < 64 * 1024, "{} bytes of errors", out.len());

    let extra_mb = (refused.max_rss_kb - accepted.max_rss_kb) / 1024;
    eprintln!(
        "5000 rules: refused in {:?} ({} MB), accepted in {:?} ({} MB)",
        refused.took,
        refused.max_rss_kb / 1024,
        accepted.took,
        accepted.max_rss_kb / 1024
    );
    assert!(extra_mb < 16, "4999 errors took {extra_mb} MB more");
}

/// How long a mutant may take: 1 s with `SLUICE_BIN` (meant for a
/// release build), generous for the debug build the test suite runs.
fn mutant_bound() -> Duration {
    if std::env::var_os("SLUICE_BIN").is_some() {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(15)
    }
}

/// The shipped configurations.
fn shipped() -> Vec<(String, String)> {
    let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&conf)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
}

/// The `[[header]]` table starting at the header's last occurrence, up to
/// the next table.
fn last_table<'a>(text: &'a str, header: &str) -> Option<&'a str> {
    let start = text.rfind(&format!("\n{header}\n"))? + 1;
    let rest = &text[start + header.len()..];
    let end = rest
        .find("\n[")
        .map_or(text.len(), |i| start + header.len() + i + 1);
    Some(&text[start..end])
}

/// Mutations that multiply a file's items (each kind of table 5,000
/// times, a backend 20,000 times) or stress its parser.
fn mutants(text: &str) -> Vec<(&'static str, String)> {
    const MANY: usize = 20_000;
    let mut out = Vec::new();
    for header in [
        "[[dataplane.port]]",
        "[[zone]]",
        "[[health_check]]",
        "[[backend_service]]",
        "[[forwarding_rule]]",
        "[[bgp.peer]]",
    ] {
        if let Some(table) = last_table(text, header) {
            out.push((header, format!("{text}\n{}", table.repeat(5000))));
        }
    }
    if let Some(line) = text
        .lines()
        .find(|l| l.trim_start().starts_with("{ address = "))
    {
        let many = format!("{line}\n").repeat(MANY);
        out.push((
            "backend repeated",
            text.replacen(&format!("{line}\n"), &many, 1),
        ));
        let one_line = line.trim().repeat(MANY);
        out.push(("backends on one line", text.replacen(line, &one_line, 1)));
    }
    out.push((
        "key repeated",
        text.replacen("[dataplane]\n", &"[dataplane]\nworkers = 1\n".repeat(2), 1),
    ));
    out.push((
        "tables repeated",
        format!("{text}\n{}", "[metrics]\n".repeat(MANY)),
    ));
    let huge = "x".repeat(4 << 20);
    out.push((
        "huge name",
        text.replacen("name = \"", &format!("name = \"{huge}"), 1),
    ));
    out.push(("huge comment", format!("# {huge}\n{text}")));
    let deep = format!("{}{}", "[".repeat(MANY), "]".repeat(MANY));
    out.push(("deep array", format!("x = {deep}\n{text}")));
    let inline = format!("{}{}", "{ a = ".repeat(MANY), "}".repeat(MANY));
    out.push(("deep inline table", format!("x = {inline}\n{text}")));
    out.push((
        "errors by the line",
        format!(
            "{text}\n{}",
            "[[zone]]\nname = \"BAD\"\nclient_subnets = [\"10.0.0.0/33\"]\n".repeat(MANY)
        ),
    ));
    out
}

/// No mutant of a shipped configuration takes long, crashes, or prints
/// more than a bounded report.
#[test]
fn mutants_of_shipped_configurations_are_checked_quickly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir("config-scale-mutants");
    let mut slow = Vec::new();
    for (conf, text) in shipped() {
        for (what, mutant) in mutants(&text) {
            let slug: String = what
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let file = write(&dir, &format!("{conf}-{slug}.toml"), &mutant);
            let run = check_config(&file);
            eprintln!("{conf} / {what}: {:?}, exit {:?}", run.took, run.code);
            assert!(
                matches!(run.code, Some(0 | 2)),
                "{conf} / {what}: exit {:?}\n{}",
                run.code,
                run.stderr
            );
            assert!(
                run.stderr.len() < 512 * 1024,
                "{conf} / {what}: {} bytes",
                run.stderr.len()
            );
            if run.took > mutant_bound() {
                slow.push(format!("{conf} / {what}: {:?}", run.took));
            }
        }
    }
    assert!(
        slow.is_empty(),
        "over {:?}:\n{}",
        mutant_bound(),
        slow.join("\n")
    );
}
