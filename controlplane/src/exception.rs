//! AP-4: the kernel side of each port's exception path.
//!
//! DPDK's `net_tap` creates the TAP interface; the workers move packets
//! between it and the port. This module gives the interface what makes the
//! kernel answer for the appliance: the port's addresses, its MTU, and the
//! port's MAC (set through DPDK by the caller). The kernel then answers ARP,
//! neighbour discovery and ping for the appliance's addresses, and the
//! health checker's ordinary sockets reach backends through it. On a trunk
//! port (`vlan = N`) the TAP is still configured untagged: the workers pop
//! the tag off punted frames and push it onto the kernel's (`sluice_core::vlan`).
//!
//! Configured with `ip` (iproute2) commands: a handful at start, so a
//! netlink library would add a dependency for no measurable gain.

use std::io;
use std::process::Command;

use crate::config::{Cidr, PortConfig};

/// An `ip` (iproute2) command that did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum IpCommandError {
    /// `ip` could not be run at all.
    #[error("ip {command}: {source} (is iproute2 installed?)")]
    Spawn { command: String, source: io::Error },
    /// `ip` ran and refused; `stderr` is what it said.
    #[error("ip {command}: {stderr}")]
    Refused { command: String, stderr: String },
}

/// Why the kernel side of a TAP could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TapSetupError {
    /// Setting an address, the MTU, the link state or a route failed.
    #[error(transparent)]
    Ip(#[from] IpCommandError),
    /// Writing a sysctl (disabling IPv6 on a port without `address6`).
    #[error("write {value} to {path}: {source}")]
    Sysctl {
        path: String,
        value: &'static str,
        source: io::Error,
    },
}

/// A port's `tap` names an interface that already exists on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "dataplane.port {port:?}.tap: interface {tap:?} already exists on this host: sluice \
     creates its TAP itself and would take over or fail on it; choose another tap name, or \
     delete the interface (ip link del {tap}) if it is left over"
)]
pub struct TapExists {
    /// The config port's name.
    pub port: String,
    /// The interface its `tap` names.
    pub tap: String,
}

/// The `net_tap` vdev string for port `index` whose TAP is `iface`.
///
/// The device name starts with the driver name (`net_tap`), which is how
/// EAL's vdev bus finds the driver; the suffix keeps it clear of `net_tap`
/// devices an operator lists as data ports.
pub fn tap_vdev(index: usize, iface: &str) -> String {
    format!("net_tap_sluice{index},iface={iface}")
}

/// The TAP names of `ports` that already name an interface in this
/// network namespace. `net_tap` would attach to an existing TAP (taking
/// over another program's interface, or a stale one with its addresses and
/// routes) or fail part-way through start-up on any other kind, so
/// `sluice run` refuses them before EAL starts; `check-config` warns.
pub fn existing_taps(ports: &[PortConfig]) -> Vec<TapExists> {
    // /proc/self/net is the reading process's network namespace.
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    ports
        .iter()
        .filter_map(|p| {
            Some(TapExists {
                port: p.name.clone(),
                tap: p.tap.clone()?,
            })
        })
        .filter(|t| interface_listed(&dev, &t.tap))
        .collect()
}

/// Whether `/proc/net/dev` text lists interface `name`.
fn interface_listed(dev: &str, name: &str) -> bool {
    dev.lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(iface, _)| iface.trim() == name)
}

/// Gives the TAP its MAC (the port's: the kernel's frames leave through
/// the port), addresses and MTU, brings it up, and installs the
/// port's default routes (`gateway`, `gateway6`) through it.
pub fn configure_tap(port: &PortConfig, iface: &str, mac: [u8; 6]) -> Result<(), TapSetupError> {
    let mac = crate::config::mac_text(&mac);
    ip(&["link", "set", "dev", iface, "address", &mac])?;
    ip(&["link", "set", "dev", iface, "mtu", &port.mtu.to_string()])?;
    if let Some(c) = port.ipv4 {
        ip(&["addr", "replace", &cidr(c), "dev", iface])?;
    }
    match port.ipv6 {
        // No duplicate address detection: the address belongs to this
        // appliance by configuration, and DAD would delay it by a second.
        Some(c) => ip(&["addr", "replace", &cidr(c), "dev", iface, "nodad"])?,
        // No IPv6 on this port: keep the kernel from sending router
        // solicitations and MLD reports out of it.
        None => sysctl(&format!("net/ipv6/conf/{iface}/disable_ipv6"), "1")?,
    }
    ip(&["link", "set", "dev", iface, "up"])?;
    for gw in &port.gateways {
        let family = if gw.is_ipv4() { "-4" } else { "-6" };
        ip(&[
            family,
            "route",
            "replace",
            "default",
            "via",
            &gw.to_string(),
            "dev",
            iface,
        ])?;
    }
    Ok(())
}

fn cidr(c: Cidr) -> String {
    format!("{}/{}", c.addr, c.prefix)
}

/// Runs `ip ARGS` for its effect.
fn ip(args: &[&str]) -> Result<(), IpCommandError> {
    run_ip(args).map(drop)
}

/// Runs `ip ARGS` and returns what it printed; the error names the command
/// and what it said.
fn run_ip(args: &[&str]) -> Result<Vec<u8>, IpCommandError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|source| IpCommandError::Spawn {
            command: args.join(" "),
            source,
        })?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(IpCommandError::Refused {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

fn sysctl(key: &str, value: &'static str) -> Result<(), TapSetupError> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value).map_err(|source| TapSetupError::Sysctl {
        path,
        value,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_found_in_proc_net_dev() {
        let dev = "Inter-|   Receive\n face |bytes\n    lo: 1 2 3\n  eth0: 4 5 6\n";
        assert!(interface_listed(dev, "lo"));
        assert!(interface_listed(dev, "eth0"));
        assert!(!interface_listed(dev, "eth"));
        assert!(!interface_listed(dev, "face |bytes"));
    }

    #[test]
    fn tap_vdev_names_the_driver_first() {
        let v = tap_vdev(1, "sl-up");
        assert!(v.starts_with("net_tap"), "{v}");
        assert_eq!(v, "net_tap_sluice1,iface=sl-up");
    }
}
