//! An open port device: what every handle of one port shares — the
//! [`Port`](super::Port), each of its queues and each
//! [`PortMonitor`](super::PortMonitor) hold it by `Arc` — and what stops
//! and closes the device when the last of them goes (which flushes drivers
//! such as net_pcap's TX file). Below both `port.rs`, which configures and
//! starts it, and `queue.rs`, whose queues keep it open.

use super::eal::EalGuard;
use super::error::DpdkError;
use super::ids::PortId;
use super::mempool::Mempool;
use sluice_core::rss::RssModel;
use sluice_core::steering::RxPlacement;
use std::sync::Arc;

/// A configured port device, closed on drop (stopped first once started).
#[derive(Debug)]
pub(super) struct OpenPort {
    id: PortId,
    name: String,
    /// `rte_eth_dev_start` succeeded: stop before closing.
    started: bool,
    /// Which tracked packets the device puts on their owner's queue.
    placement: RxPlacement,
    /// Its RSS, modelled, under 5-tuple placement.
    rss_model: Option<Arc<RssModel>>,
    /// Why 5-tuple placement fell back to software steering.
    rss_fallback: Option<String>,
    /// The pool the RX queues refill from, and through it EAL.
    _pool: Mempool,
    _eal: EalGuard,
}

impl OpenPort {
    /// Port `id`, which `rte_eth_dev_configure` has just configured: from
    /// here on, dropping the value closes the device.
    pub(super) fn configured(
        id: PortId,
        name: String,
        placement: RxPlacement,
        pool: &Mempool,
    ) -> Self {
        Self {
            id,
            name,
            started: false,
            placement,
            rss_model: None,
            rss_fallback: None,
            _pool: pool.clone(),
            _eal: pool.eal(),
        }
    }

    pub(super) fn id(&self) -> PortId {
        self.id
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn placement(&self) -> RxPlacement {
        self.placement
    }

    pub(super) fn rss_model(&self) -> Option<&Arc<RssModel>> {
        self.rss_model.as_ref()
    }

    pub(super) fn rss_fallback(&self) -> Option<&str> {
        self.rss_fallback.as_deref()
    }

    /// The model of the started port's RSS, or why there is none: then
    /// its workers steer every tracked packet.
    pub(super) fn set_rss_model(&mut self, model: Result<RssModel, DpdkError>) {
        match model {
            Ok(m) => self.rss_model = Some(Arc::new(m)),
            Err(e) => {
                self.placement = RxPlacement::Software;
                self.rss_fallback = Some(e.to_string());
            }
        }
    }

    /// Sets the MTU, starts the device (its queues set up), and turns
    /// promiscuous mode on.
    pub(super) fn start(&mut self, mtu: Option<u16>, promiscuous: bool) -> Result<(), DpdkError> {
        let id = self.id.get();
        if let Some(mtu) = mtu {
            // SAFETY: port id valid. Drivers without an MTU operation
            // (-ENOTSUP) took it from rxmode at configure; the MTU the
            // pipeline enforces on what it sends comes from the config
            // anyway.
            let rc = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id, mtu) };
            if rc != 0 && rc != -(dpdk_sys::ENOTSUP as i32) {
                return Err(DpdkError::from_rc(
                    format!("rte_eth_dev_set_mtu({}, {mtu})", self.name),
                    rc,
                ));
            }
        }
        // SAFETY: port configured and queues set up.
        let rc = unsafe { dpdk_sys::rte_eth_dev_start(id) };
        if rc != 0 {
            return Err(DpdkError::from_rc(
                format!("rte_eth_dev_start({})", self.name),
                rc,
            ));
        }
        self.started = true;
        if promiscuous {
            // SAFETY: port started. Failure (unsupported) is harmless: the
            // port then only receives frames to its own MAC and broadcast.
            let _ = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id) };
        }
        Ok(())
    }
}

impl Drop for OpenPort {
    fn drop(&mut self) {
        // SAFETY: this is the last handle of the port: every queue (and so
        // every worker polling one) and monitor is gone. Stop + close
        // release the queues (freeing the mbufs in their rings while the
        // pool is still held) and flush drivers (net_pcap writes its TX
        // file on close). Closing a configured but not started port (a
        // failed start) is allowed.
        unsafe {
            if self.started {
                dpdk_sys::rte_eth_dev_stop(self.id.get());
            }
            dpdk_sys::rte_eth_dev_close(self.id.get());
        }
    }
}
