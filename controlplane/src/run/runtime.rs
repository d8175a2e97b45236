//! The DPDK side of one `sluice run` and its lifecycle: EAL, the packet
//! pool, the ports and their TAPs, the workers on their lcores, and the
//! metrics published from them. Dropping a [`Runtime`] — at the end of a
//! run or on any error after it started — stops and joins the workers
//! (and the test hooks' threads), withdraws what the admin endpoint
//! answers from, closes the ports, then the TAPs, frees the pool, and
//! cleans up EAL; EAL's runtime directory goes last.
//!
//! The order is for timing, not safety: `dataplane::dpdk` makes every
//! order sound (queues hold their port open, ports and rings their pool,
//! everything EAL; a launched job is waited for before its lcore goes).
//! It is fixed here so that the workers have finished before a port's
//! queues are released, net_pcap writes its TX file at a known point, and
//! the final metrics are read before closing a port resets its counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use controlplane::admin::AdminState;
use controlplane::config::{self, Config};
use controlplane::exception;
use controlplane::mbuf_pool::{self, Steering};
use controlplane::metrics::{self, MetricsSources};
use controlplane::start_hints::Step;
use dataplane::dpdk::{
    Eal, Launched, Lcore, LcoreId, Mempool, Port, PortConfig, QueuePair, TscClock,
};
use dataplane::worker::{ExceptionQueues, Worker};

use super::error::{hinted, RunError};
use super::runtime_dir::RuntimeDir;

/// Everything DPDK of one run; see the module documentation.
pub struct Runtime {
    /// Tells the workers (and the test hooks' threads) to stop.
    stop: Arc<AtomicBool>,
    clock: TscClock,
    /// Worker lcores not running a worker, lowest id first.
    idle_lcores: Vec<Lcore>,
    workers: Vec<Launched>,
    #[cfg(feature = "test-hooks")]
    hooks: Option<Box<dyn super::hooks::RunHooks>>,
    admin: Arc<AdminState>,
    sources: Option<Arc<MetricsSources>>,
    /// Per config port, its queue pairs until they are dealt to workers.
    queues: Vec<Vec<QueuePair>>,
    /// Per config port, its TAP's queue pairs (none: no TAP).
    tap_queues: Vec<Vec<QueuePair>>,
    ports: Vec<Port>,
    taps: Vec<Option<Port>>,
    /// The steering rings the pool was sized for.
    steering: Steering,
    pool: Option<Mempool>,
    eal: Option<Eal>,
    /// Removed after EAL's cleanup (it is dropped after `drop` ran).
    _runtime_dir: RuntimeDir,
}

/// One worker's queues: a pair on every port, and on every port's TAP.
pub struct WorkerQueues {
    pub rx: Vec<dataplane::dpdk::RxQueue>,
    pub tx: Vec<dataplane::dpdk::TxQueue>,
    pub exception: Vec<Option<ExceptionQueues>>,
}

impl Runtime {
    /// Initialises EAL with `args`, creates the packet pool, starts every
    /// port with one queue pair per worker, and each port's TAP
    /// (`tap_queue_limit`: TEST HOOK, fewer queue pairs than it has).
    pub fn start(
        cfg: &Config,
        args: &[String],
        admin: &Arc<AdminState>,
        tap_queue_limit: Option<u16>,
    ) -> Result<Runtime, RunError> {
        let workers = usize::from(cfg.dataplane.workers);
        // Declared before `eal`: dropped after it, on every path out.
        let mut runtime_dir = RuntimeDir::of(args);
        if let Err(e) = dataplane::dpdk::log_to(controlplane::log::dpdk) {
            controlplane::warn!("sluice: DPDK's log stays on stdout and syslog: {e}");
        }
        let mut eal =
            Eal::init(args).map_err(|e| hinted(Step::Eal, e.errno, RunError::Eal(e), cfg, args))?;
        runtime_dir.initialised();
        // Capture (`dpdk-dumpcap`) is a diagnostic: a run without it still
        // forwards, so a refusal is reported, never fatal.
        if let Err(e) = eal.enable_packet_capture() {
            controlplane::error!("sluice: packet capture (dpdk-dumpcap) unavailable: {e}");
        }
        admin.beat();
        let lcores = eal.take_worker_lcores();
        if lcores.len() < workers {
            return Err(RunError::Lcores {
                workers,
                lcores: lcores.len(),
            });
        }
        let steering = steering(cfg, args)?;
        let pool = packet_pool(&eal, cfg, args, steering)?;
        admin.beat();
        let mut ports = Vec::with_capacity(cfg.dataplane.ports.len());
        let mut queues = Vec::with_capacity(cfg.dataplane.ports.len());
        for p in &cfg.dataplane.ports {
            let (port, pairs) = Port::start(&p.device, &port_config(p, workers), &pool)
                .map_err(|e| port_error(p, e, cfg, args))?;
            ports.push(port);
            queues.push(pairs);
            admin.beat();
        }
        let port_macs: Vec<[u8; 6]> = ports.iter().map(Port::mac).collect();
        let (taps, tap_queues) = start_taps(
            cfg,
            args,
            &port_macs,
            workers as u16,
            tap_queue_limit,
            &pool,
        )?
        .into_iter()
        .map(|t| t.map_or((None, Vec::new()), |(port, pairs)| (Some(port), pairs)))
        .unzip();
        Ok(Runtime {
            stop: Arc::new(AtomicBool::new(false)),
            clock: eal.tsc_clock(),
            idle_lcores: lcores,
            workers: Vec::new(),
            #[cfg(feature = "test-hooks")]
            hooks: None,
            admin: Arc::clone(admin),
            sources: None,
            queues,
            tap_queues,
            ports,
            taps,
            pool: Some(pool),
            steering,
            eal: Some(eal),
            _runtime_dir: runtime_dir,
        })
    }

    /// The TSC clock the workers and the control thread share.
    pub fn clock(&self) -> TscClock {
        self.clock
    }

    pub fn pool(&self) -> Option<&Mempool> {
        self.pool.as_ref()
    }

    /// The steering rings the pool holds mbufs for.
    pub fn steering(&self) -> Steering {
        self.steering
    }

    /// The data ports, in config order.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// Per config port, its TAP's queue pairs not yet dealt to workers (0:
    /// no TAP).
    pub fn tap_queue_pairs(&self) -> Vec<usize> {
        self.tap_queues.iter().map(Vec::len).collect()
    }

    pub fn has_taps(&self) -> bool {
        self.taps.iter().any(Option::is_some)
    }

    /// The flag that stops the workers; set when the runtime stops.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// The test hooks act on this run from now on; the runtime joins
    /// their threads when it stops.
    #[cfg(feature = "test-hooks")]
    pub fn attach_hooks(&mut self, hooks: Option<Box<dyn super::hooks::RunHooks>>) {
        self.hooks = hooks;
    }

    #[cfg(feature = "test-hooks")]
    pub fn hooks(&mut self) -> Option<&mut (dyn super::hooks::RunHooks + 'static)> {
        self.hooks.as_deref_mut()
    }

    /// Deals the ports' queue pairs to `workers` workers: worker w gets
    /// queue w of every port and of every TAP (None past a TAP's last
    /// pair). Once; later calls find none.
    pub fn take_worker_queues(&mut self, workers: usize) -> Vec<WorkerQueues> {
        let mut ports = transpose(std::mem::take(&mut self.queues), workers);
        let mut taps = transpose(std::mem::take(&mut self.tap_queues), workers);
        (0..workers)
            .map(|w| {
                let (rx, tx) = std::mem::take(&mut ports[w])
                    .into_iter()
                    .flatten()
                    .map(|q| (q.rx, q.tx))
                    .unzip();
                let exception = std::mem::take(&mut taps[w])
                    .into_iter()
                    .map(|q| q.map(|q| ExceptionQueues { rx: q.rx, tx: q.tx }))
                    .collect();
                WorkerQueues { rx, tx, exception }
            })
            .collect()
    }

    /// Runs `worker` on the next idle worker lcore. On an error the
    /// workers launched so far keep running until the runtime is dropped,
    /// which stops and joins them before anything else goes.
    pub fn launch(&mut self, worker: Worker) -> Result<LcoreId, RunError> {
        let index = worker.index;
        if self.idle_lcores.is_empty() {
            return Err(RunError::Lcores {
                workers: index + 1,
                lcores: self.workers.len(),
            });
        }
        let lcore = self.idle_lcores.remove(0);
        let id = lcore.id();
        #[cfg(feature = "test-hooks")]
        if let Some(hooks) = &self.hooks {
            hooks.before_launch(index, id, &self.ports)?;
        }
        match lcore.launch(move || worker.run()) {
            Ok(launched) => {
                self.workers.push(launched);
                Ok(id)
            }
            Err(e) => {
                self.idle_lcores.insert(0, e.lcore);
                Err(RunError::Launch {
                    worker: index,
                    lcore: id,
                    source: e.error,
                })
            }
        }
    }

    /// /metrics and /ready answer from `sources` from now on, until the
    /// runtime stops.
    pub fn publish(&mut self, sources: Arc<MetricsSources>) {
        self.admin.publish(Arc::clone(&sources));
        self.sources = Some(sources);
    }

    /// Stops the workers and the test hooks' threads and waits for them.
    pub fn stop_workers(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        #[cfg(feature = "test-hooks")]
        if let Some(hooks) = &mut self.hooks {
            hooks.join();
        }
        for launched in self.workers.drain(..) {
            let (lcore, _) = launched.wait();
            self.idle_lcores.push(lcore);
        }
    }

    /// After [`Runtime::stop_workers`]: the final metrics, read while the
    /// ports are still open (closing a port resets its counters).
    pub fn final_metrics(&self) -> Option<String> {
        self.sources.as_deref().map(|s| metrics::render(s, None))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            controlplane::info!(
                "sluice: stopping {} worker(s) before closing the ports",
                self.workers.len()
            );
        }
        self.stop_workers();
        // No admin answer reads a port from here on (withdraw waits for
        // one in progress).
        self.admin.withdraw();
        self.sources = None;
        self.queues.clear();
        self.tap_queues.clear();
        // Closing the ports flushes drivers (net_pcap writes its TX file
        // here); closing a TAP removes its kernel interface.
        self.ports.clear();
        self.taps.clear();
        self.pool = None;
        self.idle_lcores.clear();
        if let Some(eal) = self.eal.take() {
            if let Err(in_use) = eal.close() {
                controlplane::warn!("sluice: {in_use}: EAL not cleaned up");
                // Cleaning up under them would not be safe; the process
                // is ending.
                std::mem::forget(in_use.eal);
            }
        }
    }
}

/// `per_port[p][w]` as `[w][p]`, `workers` wide (a port with fewer
/// entries gives None).
fn transpose<T>(per_port: Vec<Vec<T>>, workers: usize) -> Vec<Vec<Option<T>>> {
    let mut ports: Vec<_> = per_port.into_iter().map(Vec::into_iter).collect();
    (0..workers)
        .map(|_| ports.iter_mut().map(Iterator::next).collect())
        .collect()
}

/// How a data port is configured: one queue pair per worker.
fn port_config(p: &config::PortConfig, workers: usize) -> PortConfig {
    PortConfig {
        queue_pairs: workers as u16,
        // One flow, one shard (SPEC §3, AP-1): RSS on 5-tuples where the
        // device can, so one client address's connections spread over
        // every worker; what the NIC does not place by its key (2/3-tuple
        // keys, fragments, ICMP errors) the workers steer
        // (`dataplane::dpdk` rss, `sluice_core::steering`).
        rss_l4: true,
        mtu: Some(p.mtu),
        ..PortConfig::default()
    }
}

/// A data port's failure to probe or start, with its start hint.
fn port_error(
    p: &config::PortConfig,
    e: dataplane::dpdk::DpdkError,
    cfg: &Config,
    args: &[String],
) -> RunError {
    let errno = e.errno;
    let error = RunError::Port {
        name: p.name.clone(),
        device: p.device.clone(),
        source: e,
    };
    hinted(Step::Port { device: &p.device }, errno, error, cfg, args)
}

/// Whether the workers will steer, and how much: asked of the probed
/// devices before the pool that has to hold the steering rings' mbufs is
/// made. A port whose RSS places no tracked packet needs full-size rings,
/// one that places 5-tuple keys small ones.
fn steering(cfg: &Config, args: &[String]) -> Result<Steering, RunError> {
    use sluice_core::steering::RxPlacement;
    let workers = usize::from(cfg.dataplane.workers);
    let mut steering = Steering::Off;
    for p in &cfg.dataplane.ports {
        let placement = dataplane::dpdk::planned_placement(&p.device, &port_config(p, workers))
            .map_err(|e| port_error(p, e, cfg, args))?;
        match placement {
            RxPlacement::Software => return Ok(Steering::On),
            RxPlacement::FiveTuplesKept => steering = Steering::Rare,
            RxPlacement::Kept => {}
        }
    }
    Ok(steering)
}

/// The packet pool, sized for the configuration (`mbuf_pool`).
fn packet_pool(
    eal: &Eal,
    cfg: &Config,
    args: &[String],
    steering: Steering,
) -> Result<Mempool, RunError> {
    let demand = cfg.dataplane.pool_demand();
    let mbufs = mbuf_pool::mbuf_count(&demand, steering);
    let data_room = mbuf_pool::data_room(&demand.ports);
    let pool = Mempool::new(eal, "sluice_mbufs", mbufs, 256, data_room).map_err(|e| {
        let bytes = mbuf_pool::pool_bytes_at_least(mbufs, data_room);
        hinted(
            Step::PacketPool { bytes },
            e.errno,
            RunError::PacketPool(e),
            cfg,
            args,
        )
    })?;
    controlplane::info!(
        "sluice: packet pool: {mbufs} mbufs of {data_room} bytes (frames up to {} bytes)",
        usize::from(data_room) - dataplane::dpdk::MBUF_HEADROOM
    );
    Ok(pool)
}

/// A started port and its queue pairs.
type Started = (Port, Vec<QueuePair>);

/// AP-4: starts each port's TAP (a queue pair per worker, at most as many
/// as the TAP supports) with the port's MAC, and gives the kernel side the port's addresses and MTU.
fn start_taps(
    cfg: &Config,
    eal_args: &[String],
    port_macs: &[[u8; 6]],
    workers: u16,
    limit: Option<u16>,
    pool: &Mempool,
) -> Result<Vec<Option<Started>>, RunError> {
    let mut taps = Vec::with_capacity(cfg.dataplane.ports.len());
    for (i, p) in cfg.dataplane.ports.iter().enumerate() {
        let Some(iface) = &p.tap else {
            taps.push(None);
            continue;
        };
        let device_error = |e: dataplane::dpdk::DpdkError| {
            let errno = e.errno;
            let error = RunError::TapDevice {
                port: p.name.clone(),
                iface: iface.clone(),
                source: e,
            };
            hinted(Step::Tap, errno, error, cfg, eal_args)
        };
        let vdev = exception::tap_vdev(i, iface);
        // AP-4: a queue pair per worker up to what the TAP has and can be
        // started with; the other workers relay their punted packets to an
        // owner (workers.rs).
        let queue_pairs = dataplane::dpdk::max_queue_pairs(&vdev)
            .map_err(device_error)?
            .min(dataplane::dpdk::NET_TAP_START_QUEUE_PAIRS)
            .min(limit.unwrap_or(u16::MAX))
            .clamp(1, workers.max(1));
        let pc = PortConfig {
            queue_pairs,
            rss: false,
            promiscuous: false,
            rx_descriptors: 512,
            tx_descriptors: 512,
            mtu: Some(p.mtu),
            ..PortConfig::default()
        };
        // The kernel answers ARP/ND with the MAC the port's peers send to.
        let mac = p
            .mac
            .or_else(|| port_macs.get(i).copied())
            .unwrap_or_default();
        // The interface exists since EAL probed the vdev. Its MAC and
        // addresses go on before it comes up: a routing daemon that sees it
        // up without its addresses may try to use it (BIRD's BFD binds the
        // address once, and fails for good; docs/scale-out.md), and the
        // kernel's first IPv6 frames must already carry the port's MAC.
        exception::configure_tap(p, iface, mac).map_err(|source| {
            let error = RunError::TapKernel {
                port: p.name.clone(),
                iface: iface.clone(),
                source,
            };
            hinted(Step::Tap, 0, error, cfg, eal_args)
        })?;
        let (tap, pairs) = Port::start(&vdev, &pc, pool).map_err(device_error)?;
        tap.set_mac(mac).map_err(device_error)?;
        if queue_pairs < workers {
            controlplane::info!(
                "sluice: port {:?}: exception path on TAP {iface} ({queue_pairs} queue pairs: \
                 workers {queue_pairs} to {} relay to worker index mod {queue_pairs})",
                p.name,
                workers - 1
            );
        } else {
            controlplane::info!("sluice: port {:?}: exception path on TAP {iface}", p.name);
        }
        taps.push(Some((tap, pairs)));
    }
    Ok(taps)
}
