//! The BIRD 2 configuration that announces what sluice decides
//! (`sluice bird-config FILE`): a kernel protocol learns sluice's VIP
//! routes from `bgp.kernel_table` into a BIRD table of their own, and one
//! BGP session per `[[bgp.peer]]` exports that table, with each VIP's
//! communities and MED.
//!
//! The routes are the whole interface: sluice adds a VIP's route when it
//! can serve the VIP and deletes it when it cannot; BIRD sees both at once
//! through netlink and updates its peers. If sluice dies, its TAP goes and
//! the kernel drops the routes with it; if BIRD dies, its sessions drop and
//! the routers withdraw everything the appliance announced.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::config::bird_syntax::{protocol_name, ANNOUNCE, BFD, KERNEL4, KERNEL6, VIPS4, VIPS6};
use crate::config::{BgpConfig, BgpPeer, Community, Config};

/// `rtm_protocol` of sluice's VIP routes (`ip route` shows `proto 83`);
/// BIRD imports only routes carrying it (`krt_source`).
pub const ROUTE_PROTOCOL: u8 = 83;

/// The BIRD configuration for `cfg` (None without `[bgp]`); `origin`
/// names the sluice configuration file in its header.
pub fn render(cfg: &Config, origin: &str) -> Option<String> {
    let bgp = cfg.bgp.as_ref()?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# BIRD 2 configuration of the sluice appliance, rendered by\n\
         # `sluice bird-config {origin}` from its [bgp] section: render it again\n\
         # and run `birdc configure` after changing [bgp].\n\
         #\n\
         # sluice keeps one route per VIP it can serve in kernel table {table}\n\
         # (proto {ROUTE_PROTOCOL}, through its TAP); BIRD learns them and announces\n\
         # them to the peers below. Graceful restart stays off: routers must drop\n\
         # the routes of an appliance that is gone, not keep them as stale.\n",
        table = bgp.kernel_table
    );
    let _ = writeln!(out, "router id {};\n", bgp.router_id);
    out.push_str("protocol device {\n  scan time 10;\n}\n\n");
    let families: Vec<Family> = [Family::V4, Family::V6]
        .into_iter()
        .filter(|f| bgp.peers.iter().any(|p| f.matches(p.address)))
        .collect();
    for f in &families {
        kernel_protocol(&mut out, bgp, *f);
    }
    if let Some(bfd) = bgp.bfd {
        let _ = writeln!(out, "protocol bfd {BFD} {{");
        let mut taps: Vec<&str> = bgp.peers.iter().map(|p| p.tap.as_str()).collect();
        taps.sort_unstable();
        taps.dedup();
        for tap in taps {
            let ms = bfd.interval.as_millis();
            let _ = writeln!(
                out,
                "  interface \"{tap}\" {{\n    min rx interval {ms} ms;\n    \
                 min tx interval {ms} ms;\n    multiplier {};\n  }};",
                bfd.multiplier
            );
        }
        out.push_str("}\n\n");
    }
    export_filter(&mut out, bgp);
    for p in &bgp.peers {
        bgp_protocol(&mut out, bgp, p);
    }
    Some(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn matches(self, a: IpAddr) -> bool {
        a.is_ipv4() == (self == Family::V4)
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }

    /// The BIRD table (and kernel protocol) holding this family's VIPs.
    fn table(self) -> &'static str {
        match self {
            Family::V4 => VIPS4,
            Family::V6 => VIPS6,
        }
    }

    /// The kernel protocol learning this family's VIP routes.
    fn kernel(self) -> &'static str {
        match self {
            Family::V4 => KERNEL4,
            Family::V6 => KERNEL6,
        }
    }
}

fn kernel_protocol(out: &mut String, bgp: &BgpConfig, f: Family) {
    let (name, table, kernel) = (f.name(), f.table(), f.kernel());
    let _ = writeln!(
        out,
        "{name} table {table};\n\n\
         # sluice's VIP routes: learnt (they are not BIRD's own) and never\n\
         # written back. Route changes arrive at once over netlink; the scan\n\
         # only repairs missed ones.\n\
         protocol kernel {kernel} {{\n  \
           kernel table {kt};\n  \
           learn;\n  \
           scan time 5;\n  \
           {name} {{\n    \
             table {table};\n    \
             import where krt_source = {ROUTE_PROTOCOL};\n    \
             export none;\n  \
           }};\n\
         }}\n",
        kt = bgp.kernel_table
    );
}

/// Per-VIP attributes, then accept: the table holds nothing but VIPs.
fn export_filter(out: &mut String, bgp: &BgpConfig) {
    let _ = writeln!(out, "filter {ANNOUNCE} {{");
    for v in &bgp.vips {
        if v.communities.is_empty() && v.med.is_none() {
            continue;
        }
        let len = if v.vip.is_ipv4() { 32 } else { 128 };
        let _ = writeln!(out, "  if net = {}/{len} then {{", v.vip);
        for c in &v.communities {
            let _ = match c {
                Community::Standard(a, b) => {
                    writeln!(out, "    bgp_community.add(({a},{b}));")
                }
                Community::Large(a, b, c) => {
                    writeln!(out, "    bgp_large_community.add(({a},{b},{c}));")
                }
            };
        }
        if let Some(med) = v.med {
            let _ = writeln!(out, "    bgp_med = {med};");
        }
        out.push_str("  }\n");
    }
    out.push_str("  accept;\n}\n\n");
}

fn bgp_protocol(out: &mut String, bgp: &BgpConfig, p: &BgpPeer) {
    let f = if p.address.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    let _ = writeln!(
        out,
        "protocol bgp {} {{\n  \
           description \"sluice peer {}\";\n  \
           local {} as {};\n  \
           neighbor {} as {};\n  \
           interface \"{}\";\n  \
           direct;",
        protocol_name(&p.name),
        p.name,
        p.local,
        bgp.asn,
        p.address,
        p.asn,
        p.tap
    );
    if bgp.hold_time == 0 {
        // No hold timer and no keepalives (RFC 4271 §4.2). BIRD derives
        // the keepalive time (hold / 3 = 0) itself: it refuses an explicit
        // `keepalive time 0` ("must be in range 1-65535").
        out.push_str("  hold time 0;\n");
    } else {
        let _ = writeln!(
            out,
            "  hold time {};\n  keepalive time {};",
            bgp.hold_time,
            (bgp.hold_time / 3).max(1)
        );
    }
    // Back quickly after a restart of sluice (its TAP comes back) or of
    // the router: BIRD's defaults wait minutes.
    out.push_str(
        "  connect delay time 1;\n  connect retry time 5;\n  error wait time 1, 30;\n  \
         graceful restart off;\n",
    );
    if bgp.bfd.is_some() {
        out.push_str("  bfd on;\n");
    }
    if let Some(pw) = &p.password {
        // `crate::config` accepts only passwords BIRD's strings hold as
        // they are (`bird_syntax::fits_bird_string`).
        let _ = writeln!(out, "  password \"{}\";", pw.0);
    }
    let _ = writeln!(
        out,
        "  {} {{\n    table {};\n    import none;\n    export filter {ANNOUNCE};\n    \
         next hop self;\n  }};\n}}\n",
        f.name(),
        f.table()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[dataplane]
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
name = "web"
vip = "203.0.113.10"
backend_service = "web"

[bgp]
asn = 65001
hold_time = "3s"
kernel_table = 1000
bfd = true
bfd_interval = "100ms"

[[bgp.peer]]
name = "tor-a"
address = "192.0.2.1"
asn = 65000
password = "s3cret"

[[bgp.peer]]
name = "tor-b6"
address = "2001:db8::1"
asn = 65000

[[bgp.vip]]
vip = "203.0.113.10"
communities = ["65000:100", "65000:1:2"]
med = 50
"#;

    /// AP-6: the rendered configuration learns sluice's table, runs one
    /// session per peer from the TAP's address, and attaches each VIP's
    /// attributes.
    #[test]
    fn ap_6_renders_sessions_kernel_table_and_vip_attributes() {
        let cfg = crate::config::load_str(CFG, "sluice.toml").unwrap_or_else(|d| panic!("{d}"));
        let text = render(&cfg, "sluice.toml").unwrap();
        for want in [
            "router id 192.0.2.2;",
            "protocol kernel sluice_kernel4 {\n  kernel table 1000;\n  learn;",
            "import where krt_source = 83;",
            "protocol kernel sluice_kernel6 {",
            "protocol bgp sluice_tor_a {",
            "local 192.0.2.2 as 65001;",
            "neighbor 192.0.2.1 as 65000;",
            "interface \"sl-up\";",
            "hold time 3;\n  keepalive time 1;",
            "graceful restart off;",
            "bfd on;",
            "password \"s3cret\";",
            "local 2001:db8::2 as 65001;",
            "  ipv6 {\n    table sluice_vips6;",
            "min rx interval 100 ms;",
            "if net = 203.0.113.10/32 then {\n    bgp_community.add((65000,100));\n    \
             bgp_large_community.add((65000,1,2));\n    bgp_med = 50;",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert_eq!(text.matches("protocol bgp ").count(), 2);
    }

    #[test]
    fn without_bgp_nothing_is_rendered() {
        let cfg =
            crate::config::load_str(&CFG[..CFG.find("[bgp]").unwrap()], "sluice.toml").unwrap();
        assert_eq!(render(&cfg, "sluice.toml"), None);
    }
}
