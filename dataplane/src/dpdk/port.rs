//! Ethernet ports: configuration, queues, link state, statistics.
//!
//! A started port hands out its queues once, as owned values; each queue,
//! and each [`PortMonitor`], holds the open device ([`OpenPort`]), so the
//! port is stopped and closed only after the last of them is gone. The
//! port holds its packet pool (its RX queues refill from it), the pool
//! holds EAL.

use std::ffi::CString;
use std::sync::Arc;

use super::error::DpdkError;
use super::ids::PortId;
use super::mempool::Mempool;
use super::open_port::OpenPort;
use super::queue::QueuePair;
use super::rss::{self, RssPlan};
use sluice_core::rss::RssModel;
use sluice_core::steering::RxPlacement;

/// How a port is set up.
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// RX/TX queue pairs: one per worker.
    pub queue_pairs: u16,
    pub rx_descriptors: u16,
    pub tx_descriptors: u16,
    /// Spread flows over RX queues by RSS when there is more than one:
    /// TCP and unfragmented UDP on their 5-tuple where the device can
    /// ([`rss`]); false hashes on addresses only, so every packet between
    /// two addresses lands on one queue.
    pub rss_l4: bool,
    /// Configure RSS at all when there are several RX queues (false for
    /// TAPs: the kernel picks the queue of what it sends).
    pub rss: bool,
    pub mtu: Option<u16>,
    pub promiscuous: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        Self {
            queue_pairs: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            rss_l4: true,
            rss: true,
            mtu: None,
            promiscuous: true,
        }
    }
}

/// Link state as DPDK reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LinkStatus {
    pub up: bool,
    /// None where the driver does not know (virtio, TAP: DPDK reports
    /// `RTE_ETH_SPEED_NUM_UNKNOWN`, u32::MAX) or reports no speed (0).
    pub speed_mbps: Option<u32>,
    pub full_duplex: bool,
}

/// DPDK's `link_speed` as a speed, without its two sentinels.
pub(crate) fn known_speed(link_speed: u32) -> Option<u32> {
    match link_speed {
        dpdk_sys::RTE_ETH_SPEED_NUM_NONE | dpdk_sys::RTE_ETH_SPEED_NUM_UNKNOWN => None,
        mbps => Some(mbps),
    }
}

/// Hardware/driver counters of a port (`rte_eth_stats`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PortHwStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    /// Dropped by the NIC because no RX descriptor was free.
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// A configured and started port: the control handle (MAC, link). Not
/// `Clone`; its queues come with it from [`Port::start`], once.
#[derive(Debug)]
pub struct Port {
    inner: Arc<OpenPort>,
}

/// Finds the port DPDK created for `device` (the text before the first
/// comma of a vdev string, or a PCI address). The pool proves EAL is up.
/// Where a port on `device` configured as `cfg` will put tracked packets,
/// asked of the device before it is configured: the packet pool is sized
/// by it (steering rings hold mbufs), and the pool has to exist before any
/// port starts. A started port may steer more than this says
/// ([`Port::rx_placement`]), never less.
pub fn planned_placement(device: &str, cfg: &PortConfig) -> Result<RxPlacement, DpdkError> {
    let (_, _, info) = probe(device)?;
    Ok(rss_plan(cfg, &info).placement)
}

/// The most queue pairs a `net_tap` device can be started with. At start,
/// DPDK 22.11's net_tap copies the descriptors of every RX and TX queue
/// into one multi-process message (`tap_mp_req_on_rxtx`), which holds
/// `RTE_MP_MAX_FD_NUM` (8), without a bound check: from 5 queue pairs on
/// it writes past the message on the stack, and the process aborts
/// ("stack smashing detected"), although the device reports 16.
pub const NET_TAP_START_QUEUE_PAIRS: u16 = (dpdk_sys::RTE_MP_MAX_FD_NUM / 2) as u16;

/// The queue pairs the probed `device` supports at most: the lesser of
/// its RX and TX queue limits (a `net_tap` TAP: `TAP_MAX_QUEUES`, 16 in
/// DPDK 22.11).
pub fn max_queue_pairs(device: &str) -> Result<u16, DpdkError> {
    let (_, _, info) = probe(device)?;
    Ok(info.max_rx_queues.min(info.max_tx_queues))
}

/// The probed device's port id, name and what it reports of itself.
fn probe(device: &str) -> Result<(PortId, String, dpdk_sys::rte_eth_dev_info), DpdkError> {
    let id = id_by_name(device)?;
    let name = device.split(',').next().unwrap_or(device).to_string();
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    // SAFETY: id is a valid port; info is a valid out-struct.
    let rc = unsafe { dpdk_sys::rte_eth_dev_info_get(id.get(), &mut info) };
    if rc != 0 {
        return Err(DpdkError::from_rc(
            format!("rte_eth_dev_info_get({name})"),
            rc,
        ));
    }
    Ok((id, name, info))
}

fn id_by_name(device: &str) -> Result<PortId, DpdkError> {
    let name = device.split(',').next().unwrap_or(device);
    let cname = CString::new(name).map_err(|_| DpdkError::msg("port name", "contains NUL"))?;
    let mut id: u16 = 0;
    // SAFETY: EAL is initialised; cname is a valid C string; id is a valid
    // out-pointer.
    let rc = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    if rc != 0 {
        // -ENODEV: EAL did not probe the device (a PCI device not bound
        // to a DPDK-compatible driver, a vdev whose driver failed).
        return Err(DpdkError {
            errno: -rc,
            ..DpdkError::msg(
                format!("rte_eth_dev_get_port_by_name({name})"),
                "no such port: is the device in the EAL arguments (vdev or PCI allow-list)?",
            )
        });
    }
    Ok(PortId::new(id))
}

impl Port {
    /// Configures the port, sets up its queues with buffers from `pool`,
    /// and starts it. Returns the port and its `cfg.queue_pairs` queue
    /// pairs, queue 0 first: the only handles of those queues there are.
    /// A port that fails part-way is closed again.
    pub fn start(
        device: &str,
        cfg: &PortConfig,
        pool: &Mempool,
    ) -> Result<(Port, Vec<QueuePair>), DpdkError> {
        let (id, name, info) = probe(device)?;
        let queues = cfg.queue_pairs;
        if queues > info.max_rx_queues || queues > info.max_tx_queues {
            return Err(DpdkError::msg(
                format!("configure {name}"),
                format!(
                    "{queues} RX / {queues} TX queues requested, the device supports {} / {} \
                     (net_pcap: one queue per rx_pcap/tx_pcap pair; net_af_packet: qpairs=N)",
                    info.max_rx_queues, info.max_tx_queues
                ),
            ));
        }
        let mtu = cfg
            .mtu
            .map(|m| device_mtu(&info, &name, m))
            .transpose()?
            .flatten();
        let mut plan = rss_plan(cfg, &info);
        let conf = eth_conf(&mut plan, mtu);
        // SAFETY: port id valid, conf fully initialised (zeroed + fields
        // set); the key it points to (plan.key) outlives the call.
        let rc = unsafe { dpdk_sys::rte_eth_dev_configure(id.get(), queues, queues, &conf) };
        if rc != 0 {
            return Err(DpdkError::from_rc(
                format!("rte_eth_dev_configure({name})"),
                rc,
            ));
        }
        // Configured: from here on a failure closes the port (drop).
        let mut port = OpenPort::configured(id, name, plan.placement, pool);
        set_up_queues(&port, cfg, pool)?;
        port.start(mtu, cfg.promiscuous)?;
        if plan.placement == RxPlacement::FiveTuplesKept {
            port.set_rss_model(rss::model(id, port.name(), info.reta_size, queues));
        }
        let inner = Arc::new(port);
        let pairs = (0..queues)
            .map(|queue| QueuePair::new(&inner, queue))
            .collect();
        Ok((Port { inner }, pairs))
    }

    /// Which tracked packets the port itself puts on their owner's queue;
    /// workers steer the others.
    pub fn rx_placement(&self) -> RxPlacement {
        self.inner.placement()
    }

    /// The model of the port's RSS under 5-tuple placement.
    pub fn rss_model(&self) -> Option<&Arc<RssModel>> {
        self.inner.rss_model()
    }

    /// Why a port planned for 5-tuple placement is steered in software
    /// instead (its redirection table could not be set or read).
    pub fn rss_fallback(&self) -> Option<&str> {
        self.inner.rss_fallback()
    }

    pub fn id(&self) -> PortId {
        self.inner.id()
    }

    pub fn name(&self) -> &str {
        self.inner.name()
    }

    pub fn mac(&self) -> [u8; 6] {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: port id valid (open while we hold it); addr is a valid
        // out-struct.
        unsafe { dpdk_sys::rte_eth_macaddr_get(self.id().get(), &mut addr) };
        addr.addr_bytes
    }

    /// Sets the port's MAC address (on a TAP also the kernel interface's).
    pub fn set_mac(&self, mac: [u8; 6]) -> Result<(), DpdkError> {
        let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: mac };
        // SAFETY: port id valid; addr is a valid in-struct DPDK copies from.
        let rc = unsafe { dpdk_sys::rte_eth_dev_default_mac_addr_set(self.id().get(), &mut addr) };
        if rc != 0 {
            return Err(DpdkError::from_rc(
                format!("rte_eth_dev_default_mac_addr_set({})", self.name()),
                rc,
            ));
        }
        Ok(())
    }

    pub fn link(&self) -> LinkStatus {
        link_of(self.id())
    }

    /// A read-only view of the port's link and counters for other threads
    /// (the admin endpoint, metrics); it keeps the port open.
    pub fn monitor(&self) -> PortMonitor {
        PortMonitor(Arc::clone(&self.inner))
    }
}

/// Sets up the port's `cfg.queue_pairs` RX and TX queues, RX refilling
/// from `pool`.
fn set_up_queues(port: &OpenPort, cfg: &PortConfig, pool: &Mempool) -> Result<(), DpdkError> {
    let (id, name) = (port.id().get(), port.name());
    // SAFETY: port id valid.
    let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
    let socket = if socket < 0 { 0 } else { socket as u32 };
    for q in 0..cfg.queue_pairs {
        // SAFETY: port configured with queue_pairs queues; NULL rx_conf
        // means driver defaults; the port holds the pool, so it
        // outlives the queue.
        let rc = unsafe {
            dpdk_sys::rte_eth_rx_queue_setup(
                id,
                q,
                cfg.rx_descriptors,
                socket,
                std::ptr::null(),
                pool.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(DpdkError::from_rc(
                format!("rte_eth_rx_queue_setup({name}, {q})"),
                rc,
            ));
        }
        // SAFETY: as above for TX; NULL tx_conf means driver defaults.
        let rc = unsafe {
            dpdk_sys::rte_eth_tx_queue_setup(id, q, cfg.tx_descriptors, socket, std::ptr::null())
        };
        if rc != 0 {
            return Err(DpdkError::from_rc(
                format!("rte_eth_tx_queue_setup({name}, {q})"),
                rc,
            ));
        }
    }
    Ok(())
}

/// `rte_eth_conf` for `cfg` on a device that reports `info` with the MTU
/// and RSS `plan` (whose key it points to: keep the plan until configured).
fn eth_conf(plan: &mut RssPlan, mtu: Option<u16>) -> dpdk_sys::rte_eth_conf {
    let mut conf = dpdk_sys::rte_eth_conf::default();
    if let Some(m) = mtu {
        // The largest frame the port receives; configure validates it
        // against the device and the PMD sizes its RX path from it.
        conf.rxmode.mtu = u32::from(m);
    }
    if plan.hash_types != 0 {
        conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = plan.hash_types;
        if let Some(key) = &mut plan.key {
            conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
            conf.rx_adv_conf.rss_conf.rss_key_len = key.len() as u8;
        }
    }
    conf
}

/// [`rss::plan`] for a port configured as `cfg`.
fn rss_plan(cfg: &PortConfig, info: &dpdk_sys::rte_eth_dev_info) -> RssPlan {
    rss::plan(cfg.queue_pairs, cfg.rss, cfg.rss_l4, info)
}

/// A port's link state and counters, readable from any thread. Clones
/// share the port, which stays open while one exists.
#[derive(Clone, Debug)]
pub struct PortMonitor(Arc<OpenPort>);

impl PortMonitor {
    pub fn id(&self) -> PortId {
        self.0.id()
    }

    pub fn link(&self) -> LinkStatus {
        link_of(self.0.id())
    }

    /// The port's counters. Reading stats is thread-safe in DPDK.
    pub fn hw_stats(&self) -> PortHwStats {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: the port is open (we hold it); s is a valid out-struct.
        unsafe { dpdk_sys::rte_eth_stats_get(self.0.id().get(), &mut s) };
        PortHwStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }
}

fn link_of(id: PortId) -> LinkStatus {
    let mut link = dpdk_sys::rte_eth_link::default();
    // SAFETY: callers hold the port open; link is a valid out-struct.
    unsafe { dpdk_sys::rte_eth_link_get_nowait(id.get(), &mut link) };
    LinkStatus {
        up: link.link_status() != 0,
        speed_mbps: known_speed(link.link_speed),
        full_duplex: link.link_duplex() != 0,
    }
}

/// The MTU to configure on a device for a port `mtu`: `mtu` when the
/// device takes frames that large, None for `net_af_packet` (DPDK 22.11
/// reports a fixed 1518-byte limit for it but receives whatever its
/// `framesz` slot holds, which `check-config` compares with the MTU), an
/// error naming the device's largest MTU otherwise.
fn device_mtu(
    info: &dpdk_sys::rte_eth_dev_info,
    name: &str,
    mtu: u16,
) -> Result<Option<u16>, DpdkError> {
    // As ethdev derives it: the device's frame overhead is what its
    // largest frame exceeds its largest MTU by, or Ethernet header + CRC.
    let max_frame = info.max_rx_pktlen;
    let overhead = if info.max_mtu != u16::MAX && max_frame > u32::from(info.max_mtu) {
        max_frame - u32::from(info.max_mtu)
    } else {
        18
    };
    let largest = u32::from(info.max_mtu).min(max_frame.saturating_sub(overhead));
    if u32::from(mtu) <= largest {
        return Ok(Some(mtu));
    }
    if driver_name(info) == "net_af_packet" {
        return Ok(None);
    }
    Err(DpdkError::msg(
        format!("configure {name}"),
        format!(
            "mtu {mtu} is above the device's largest MTU {largest} ({max_frame}-byte frames): \
             lower the port's mtu to at most {largest}"
        ),
    ))
}

fn driver_name(info: &dpdk_sys::rte_eth_dev_info) -> String {
    if info.driver_name.is_null() {
        return String::new();
    }
    // SAFETY: non-null driver_name points to the driver's static,
    // NUL-terminated name (rte_eth_dev_info_get filled `info`).
    unsafe { std::ffi::CStr::from_ptr(info.driver_name) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_absent_link_speeds_are_not_numbers() {
        // A virtio NIC reports RTE_ETH_SPEED_NUM_UNKNOWN (u32::MAX): no
        // speed to print.
        assert_eq!(known_speed(u32::MAX), None);
        assert_eq!(known_speed(0), None);
        assert_eq!(known_speed(10_000), Some(10_000));
    }

    fn info(
        max_rx_pktlen: u32,
        max_mtu: u16,
        driver: &'static std::ffi::CStr,
    ) -> dpdk_sys::rte_eth_dev_info {
        dpdk_sys::rte_eth_dev_info {
            max_rx_pktlen,
            max_mtu,
            driver_name: driver.as_ptr(),
            ..Default::default()
        }
    }

    /// A device that cannot take the port's MTU is refused
    /// by name and with the MTU it can take; net_af_packet, whose reported
    /// 1518-byte limit DPDK 22.11 does not enforce, is left to its
    /// `framesz` (checked by `check-config`).
    #[test]
    fn device_mtus_are_checked_against_what_the_device_reports() {
        let nic = info(1518, u16::MAX, c"net_small");
        assert_eq!(device_mtu(&nic, "p", 1500).unwrap(), Some(1500));
        let e = device_mtu(&nic, "p", 9000).unwrap_err().to_string();
        assert!(
            e.contains("mtu 9000 is above the device's largest MTU 1500"),
            "{e}"
        );
        let jumbo = info(9618, 9600, c"net_ice");
        assert_eq!(device_mtu(&jumbo, "p", 9216).unwrap(), Some(9216));
        let pcap = info(u32::MAX, u16::MAX, c"net_pcap");
        assert_eq!(device_mtu(&pcap, "p", 9216).unwrap(), Some(9216));
        let af = info(1518, u16::MAX, c"net_af_packet");
        assert_eq!(device_mtu(&af, "p", 1500).unwrap(), Some(1500));
        assert_eq!(device_mtu(&af, "p", 9000).unwrap(), None);
    }
}
