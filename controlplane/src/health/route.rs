//! Which way a probe travels, and which probes decide a backend's health:
//! under a direct check (HC-8) one probe from the appliance's address to
//! the backend's; under a data-path check (`path = "data"`) one per VIP of
//! the service, each travelling as a client's packets to that VIP do
//! (`sluice_core::probe_path`), the backend healthy only while every one
//! of them passes — a backend that takes one VIP's traffic and not
//! another's gets none of the service's (its Maglev table is shared).

use std::net::IpAddr;

use super::probe_key_via;
use super::scheduler::{ProbeKey, ProbeStatus, ProbeStatuses};
use crate::config::{CheckPath, Config, HealthCheckConfig};

/// How a probe reaches its backend.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Route {
    /// From the appliance's own address to the backend's, through the
    /// kernel's routes (HC-8).
    #[default]
    Direct,
    /// From a port's address to `vip` (at the key's port), through the
    /// data path to the key's backend, as a client's packets go.
    Data { vip: IpAddr },
}

/// The keys of the probes deciding backend `addr` of service `si` of
/// `cfg` under its check `hc`.
pub fn backend_probe_keys<'a>(
    cfg: &'a Config,
    si: usize,
    hc: &'a HealthCheckConfig,
    addr: IpAddr,
) -> impl Iterator<Item = ProbeKey> + 'a {
    let vips: &[IpAddr] = match hc.path {
        CheckPath::Direct => &[],
        CheckPath::Data => cfg.probe_vips.get(si).map_or(&[], Vec::as_slice),
    };
    let direct = (hc.path == CheckPath::Direct).then(|| probe_key_via(hc, addr, Route::Direct));
    direct.into_iter().chain(
        vips.iter()
            .map(move |&vip| probe_key_via(hc, addr, Route::Data { vip })),
    )
}

/// The status deciding backend `addr` of service `si`: its probe's, or
/// under a data-path check the first of its VIPs' probes that is
/// unhealthy (else the first). None before any probe of it exists.
pub fn backend_status<'h>(
    health: &'h ProbeStatuses,
    cfg: &Config,
    si: usize,
    hc: &HealthCheckConfig,
    addr: IpAddr,
) -> Option<&'h ProbeStatus> {
    let mut first = None;
    for key in backend_probe_keys(cfg, si, hc, addr) {
        let Some(st) = health.get(&key) else {
            continue;
        };
        if !st.state.healthy {
            return Some(st);
        }
        first.get_or_insert(st);
    }
    first
}
