//! The `sluice` binary's behaviour on bad configuration (AP-5): every error
//! printed with file:line:column and a hint, exit code 2, nothing started.

mod common;

use std::process::Command;

use common::*;

const BROKEN: &str = r#"[dataplane]
eal_args = ["--no-huge", "-m", "256", "--no-pci"]
workers = 1

[[dataplane.port]]
name = "uplink"
device = "net_null0"
address = "192.0.2.1/24"

[[backend_service]]
name = "web"
encapsulation = "l2"
backend = [ { address = "192.0.2.300", mac = "02:00:00:00:00:10" } ]

[[forwarding_rule]]
name = "web-vip"
vip = "203.0.113.10"
protocol = "TCP"
ports = "80"
backend_service = "nope"
"#;

#[test]
fn check_config_reports_every_error_with_line_and_exit_2() {
    let dir = tempdir("cli-broken");
    let cfg = dir.join("broken.toml");
    std::fs::write(&cfg, BROKEN).unwrap();
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // The bad backend address is on line 13, the dangling service on line 20.
    assert!(err.contains("broken.toml:13:"), "{err}");
    assert!(err.contains("192.0.2.300"), "{err}");
    assert!(err.contains("broken.toml:20:"), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(err.contains("hint:"), "{err}");
}

#[test]
fn run_refuses_to_start_on_a_broken_config() {
    let dir = tempdir("cli-run-broken");
    let cfg = dir.join("broken.toml");
    std::fs::write(&cfg, BROKEN).unwrap();
    let out = Command::new(sluice_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing started"), "{err}");
    assert!(
        !err.contains("EAL:"),
        "EAL must not have been initialised: {err}"
    );
}

/// `conntrack_capacity` is memory reserved at start: shards the
/// process cannot back are refused before EAL starts, by setting name, with
/// the capacity that would fit — not an allocation abort or the OOM killer
/// half-way through start-up. An address-space limit (`ulimit -v`, 1 GiB)
/// makes the shortage the same on every machine: 8 workers × 136 MiB.
#[test]
fn run_refuses_conntrack_tables_the_process_cannot_hold() {
    let dir = tempdir("cli-run-ct-memory");
    let cfg = dir.join("big.toml");
    // -m 1024: 8 workers' packet pool (262,143 mbufs, steering rings
    // included) needs 592 MiB.
    let text = BROKEN
        .replace("\"256\"", "\"1024\"")
        .replace("workers = 1", "workers = 8")
        .replace("192.0.2.300", "192.0.2.30")
        .replace("backend_service = \"nope\"", "backend_service = \"web\"");
    std::fs::write(&cfg, text).unwrap();
    let check = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let script = format!(
        "ulimit -v 1048576 && exec {} run --config {} --duration 1",
        sluice_bin(),
        cfg.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("dataplane.conntrack_capacity = 1048576: 8 worker(s) × 2097152 slots"),
        "{err}"
    );
    assert!(
        err.contains("lower dataplane.conntrack_capacity to at most"),
        "{err}"
    );
    assert!(!err.contains("EAL:"), "refused before EAL: {err}");
}

#[test]
fn check_config_accepts_the_shipped_examples() {
    let conf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf");
    let files: Vec<_> = std::fs::read_dir(&conf)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert!(!files.is_empty(), "conf/ has example configurations");
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The subcommands `sluice --help` lists (without `help`), and the long
/// options `sluice SUB --help` lists: what clap takes from the CLI
/// definitions, so the checks below follow any change to them.
fn help_subcommands() -> Vec<String> {
    let out = Command::new(sluice_bin()).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .map(str::to_string)
        .collect()
}

fn help_long_options(sub: &str) -> Vec<String> {
    let out = Command::new(sluice_bin())
        .args([sub, "--help"])
        .output()
        .unwrap();
    // An option line: `  -c, --config <CONFIG>  Configuration file`.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|w| w.starts_with('-') || w.starts_with('<'))
                .filter(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches(',').to_string())
                .collect::<Vec<_>>()
        })
        .filter(|w| w != "--help" && w != "--version")
        .collect()
}

/// `sluice generate man DIR` writes sluice(1), naming every subcommand,
/// and one page per subcommand; sluice-run(1) and sluice-explain(1)
/// document every option their `--help` lists. The hidden `generate`
/// itself gets no page.
#[test]
fn man_pages_cover_every_subcommand_and_option() {
    let dir = tempdir("cli-man");
    let out = Command::new(sluice_bin())
        .args(["generate", "man"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let subs = help_subcommands();
    for s in [
        "run",
        "reload",
        "status",
        "explain",
        "check-config",
        "bird-config",
    ] {
        assert!(subs.iter().any(|x| x == s), "{s} in {subs:?}");
    }
    let page = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let top = page("sluice.1");
    assert!(
        top.starts_with(".ie") && top.contains(".TH sluice 1"),
        "{top}"
    );
    for s in &subs {
        let roff_name = format!("sluice\\-{}(1)", s.replace('-', "\\-"));
        assert!(top.contains(&roff_name), "sluice.1 names {roff_name}");
        let sub_page = page(&format!("sluice-{s}.1"));
        assert!(sub_page.contains(&format!(".TH sluice-{s} 1")), "{s}");
    }
    for sub in ["run", "explain", "status"] {
        let sub_page = page(&format!("sluice-{sub}.1"));
        let options = help_long_options(sub);
        assert!(!options.is_empty(), "{sub} has options");
        for o in options {
            let roff = o.replace('-', "\\-");
            assert!(
                sub_page.contains(&format!("\\fB{roff}\\fR")),
                "sluice-{sub}.1 documents {o}"
            );
        }
    }
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // sluice.1, a page per subcommand, and sluice.toml(5).
    assert_eq!(files.len(), subs.len() + 2, "{files:?}");
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH SIGNALS",
        ".SH FILES",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(top.contains(section), "sluice.1 has {section}");
    }
    // Every key the configuration reference tables name is in the page.
    let toml5 = page("sluice.toml.5");
    assert!(toml5.starts_with(".TH SLUICE.TOML 5"), "{toml5}");
    let reference = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    let keys: Vec<&str> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .collect();
    assert!(keys.len() > 60, "{keys:?}");
    for key in keys {
        let roff = format!(
            ".TP\n\\fB{}\\fR",
            key.replace('\\', "\\e").replace('-', "\\-")
        );
        assert!(
            toml5.contains(&roff),
            "sluice.toml.5 lacks {key} ({roff:?})"
        );
    }
    assert!(!files
        .iter()
        .any(|f| f.contains("generate") || f.contains("help")));
}

/// `sluice generate completions SHELL` for bash, zsh and fish offers
/// every subcommand and every option of `run` and `explain`, and not
/// the hidden `generate`.
#[test]
fn completions_cover_every_subcommand_and_option() {
    let subs = help_subcommands();
    let options: Vec<String> = ["run", "explain"]
        .iter()
        .flat_map(|s| help_long_options(s))
        .collect();
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(sluice_bin())
            .args(["generate", "completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        for s in &subs {
            assert!(script.contains(s.as_str()), "{shell} completes {s}");
        }
        for o in &options {
            // fish writes `-l duration`, the others `--duration`.
            let fish = format!("-l {}", &o[2..]);
            assert!(
                script.contains(o.as_str()) || script.contains(&fish),
                "{shell} completes {o}"
            );
        }
        assert!(!script.contains("generate"), "{shell}: generate is hidden");
    }
    let out = Command::new(sluice_bin())
        .args(["generate", "completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// A warning (plaintext and encrypted QUIC-LB configurations sharing a
/// server ID) is printed with its line and fix, without the key, and
/// neither refuses the file nor changes the exit status.
#[test]
fn check_config_prints_warnings_and_accepts_the_file() {
    let conf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/quic-lb.toml");
    let shared = std::fs::read_to_string(conf)
        .unwrap()
        .replace("\"5c0001\"", "\"0a0b01\"");
    let dir = tempdir("cli-warning");
    let cfg = dir.join("shared.toml");
    std::fs::write(&cfg, shared).unwrap();
    let out = Command::new(sluice_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shared.toml:32:109: warning: backend_service \"quic\" backend[0].quic_server_ids.\"1\": backend[0] has the same server ID 0a0b01 in plaintext config_id 0 and encrypted config_id 1"),
        "{err}"
    );
    assert!(
        err.contains("hint: allocate server IDs separately"),
        "{err}"
    );
    assert!(!err.contains("8f95f092"), "the key is never shown: {err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("shared.toml: ok"));
}
