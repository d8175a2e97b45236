//! Pieces of the configurations that tests give the real binary.

use std::path::Path;

use super::mac_str;

/// The `eal_args` line of a test run: EAL without hugepages (`mem_mb` MiB
/// of ordinary memory) and without a PCI scan, logging errors only.
pub fn eal_args(mem_mb: u32) -> String {
    eal_args_and(mem_mb, "")
}

/// [`eal_args`] followed by `more` (`, "--flag", "value"`, or empty).
pub fn eal_args_and(mem_mb: u32, more: &str) -> String {
    format!(r#"eal_args = ["--no-huge", "-m", "{mem_mb}", "--no-pci", "--log-level=error"{more}]"#)
}

/// A `[[dataplane.port]]` named "uplink" on `net_pcap` that reads
/// `dir/in.pcap` and writes `dir/out.pcap` (see [`super::replay`]).
pub fn pcap_uplink(dir: &Path, mac: &[u8; 6], address: &str) -> String {
    format!(
        r#"[[dataplane.port]]
name = "uplink"
device = "net_pcap0,rx_pcap={dir}/in.pcap,tx_pcap={dir}/out.pcap"
mac = "{mac}"
address = "{address}""#,
        dir = dir.display(),
        mac = mac_str(mac),
    )
}

/// The head of a golden test's configuration: `[dataplane]` with
/// [`eal_args`]`(256)`, one worker and the lines `settings`, then one
/// [`pcap_uplink`] port (more of its keys may follow).
pub fn pcap_dataplane(dir: &Path, mac: &[u8; 6], address: &str, settings: &str) -> String {
    format!(
        "[dataplane]\n{}\nworkers = 1\n{settings}\n{}",
        eal_args(256),
        pcap_uplink(dir, mac, address)
    )
}

/// The inline tables of a `backend = [ … ]` list, one per (address, MAC).
pub fn backend_list(backends: &[(&str, [u8; 6])]) -> String {
    backends
        .iter()
        .map(|(a, m)| format!("{{ address = \"{a}\", mac = \"{}\" }}", mac_str(m)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The smallest configuration that runs: port "p0" on `device`, service
/// "web" of one backend (192.0.2.10) and a rule for 203.0.113.10; the EAL
/// gets `more_eal` after [`eal_args`]'s, and `tables` (say a `[metrics]`
/// table) come last.
pub fn one_backend_config(device: &str, more_eal: &str, tables: &str) -> String {
    format!(
        r#"
[dataplane]
{eal}
workers = 1
[[dataplane.port]]
name = "p0"
device = "{device}"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[[backend_service]]
name = "web"
backend = [{{ address = "192.0.2.10", mac = "02:00:00:00:00:0a" }}]
[[forwarding_rule]]
name = "vip"
vip = "203.0.113.10"
backend_service = "web"
{tables}"#,
        eal = eal_args_and(256, more_eal),
    )
}

/// The head of a configuration for a run that only checks health and
/// answers on its control socket and /metrics: one worker, one `net_null`
/// port that receives nothing, `[metrics] listen` on loopback port
/// `metrics`.
pub fn null_dataplane(metrics: u16) -> String {
    format!(
        r#"[dataplane]
{}
workers = 1
[[dataplane.port]]
name = "p0"
device = "net_null0,no-rx=1"
mac = "02:00:00:00:00:01"
address = "192.0.2.1/24"
[metrics]
listen = "127.0.0.1:{metrics}""#,
        eal_args(256)
    )
}
