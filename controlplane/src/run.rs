//! `sluice run`: EAL, mempool, ports, workers, metrics, and an orderly stop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane::admin_http::{self, AdminServer, AdminState, Published};
use controlplane::config::Config;
use controlplane::control::Controller;
use controlplane::control_socket::{self, Pending, Request};
use controlplane::exception;
use controlplane::mbuf_pool;
use controlplane::metrics::{self, MetricsSources};
use controlplane::neighbours::NeighbourResolver;
use controlplane::service_manager::ServiceManager;
use controlplane::start_hints::{self, Facts, Step};
use dataplane::dpdk::{af_packet, mbuf_ring, Eal, Mempool, Port, PortConfig};
use dataplane::worker::{ExceptionQueues, Steering, Worker};
use sluice_core::snapshot::Millis;
use sluice_core::stats::WorkerStats;

pub struct RunOptions {
    pub exit_on_idle: Option<Duration>,
    pub duration: Option<Duration>,
    pub metrics_dump: Option<PathBuf>,
    pub metrics_server: bool,
    /// The file `cfg` came from: SIGHUP and `sluice reload` re-read it.
    pub config_path: Option<PathBuf>,
    /// Unix socket for `sluice reload` / `sluice status` (None: none).
    pub control_socket: Option<PathBuf>,
    /// EAL file prefix (None: `sluice-<pid>`, one per process).
    pub file_prefix: Option<String>,
    /// TEST HOOK: see [`crate::test_hook`].
    pub test_mark_unhealthy: Option<crate::test_hook::MarkUnhealthy>,
    /// TEST HOOK: see [`crate::test_hook`].
    pub test_reload: Option<crate::test_hook::ReloadAfter>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("DPDK: {0}")]
    Dpdk(#[from] dataplane::dpdk::DpdkError),
    #[error("{0}")]
    Setup(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A start-up failure with its likely cause and fix on this host, on
    /// a line of its own.
    #[error("{error}\n  hint: {hint}")]
    Hinted { error: Box<RunError>, hint: String },
}

/// `error`, the failure of `step` with `errno`, with the hint
/// [`start_hints`] gives for it from this host's state (read now, once).
fn hinted(
    step: Step<'_>,
    errno: i32,
    error: RunError,
    cfg: &Config,
    eal_args: &[String],
) -> RunError {
    let devices: Vec<&str> = cfg
        .dataplane
        .ports
        .iter()
        .map(|p| p.device.as_str())
        .collect();
    let facts = Facts::gather(eal_args, &devices);
    match start_hints::hint(step, errno, &error.to_string(), &facts) {
        Some(hint) => RunError::Hinted {
            error: Box::new(error),
            hint,
        },
        None => error,
    }
}

/// EAL arguments: the configured ones, plus what the ports and workers need
/// unless the operator already said it (devices, lcores, the runtime
/// directory's prefix: `file_prefix` if given, the stable name DPDK tools
/// attach to, else a private one so several instances and tests can run
/// side by side).
pub fn eal_args(cfg: &Config, file_prefix: Option<&str>) -> Vec<String> {
    let mut args = cfg.dataplane.eal_args.clone();
    let has = |args: &[String], flags: &[&str]| {
        args.iter().any(|a| {
            flags
                .iter()
                .any(|f| a == f || a.starts_with(&format!("{f}=")))
        })
    };
    if !has(&args, &["-l", "--lcores", "-c"]) {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Main lcore on CPU 0, worker i on CPU i (wrapping on small machines:
        // two pollers on one CPU work, just slower).
        let map: Vec<String> = (0..=usize::from(cfg.dataplane.workers))
            .map(|l| format!("{l}@{}", l % cpus))
            .collect();
        args.push(format!("--lcores={}", map.join(",")));
    }
    if !has(&args, &["--file-prefix", "--in-memory"]) {
        match file_prefix {
            Some(prefix) => args.push(format!("--file-prefix={prefix}")),
            None => args.push(format!("--file-prefix=sluice-{}", std::process::id())),
        }
    }
    for port in &cfg.dataplane.ports {
        if port.device.starts_with("net_") {
            args.push(format!("--vdev={}", with_af_packet_ring(&port.device)));
        } else {
            args.push("-a".into());
            args.push(port.device.clone());
        }
    }
    for (i, port) in cfg.dataplane.ports.iter().enumerate() {
        if let Some(tap) = &port.tap {
            args.push(format!("--vdev={}", exception::tap_vdev(i, tap)));
        }
    }
    args
}

/// Frames in each `net_af_packet` socket's RX (and TX) ring unless the
/// device string sets `framecnt`: 8192 frames of 2 KiB, 16 MiB per ring.
/// The driver's default, 512, is half a millisecond of a busy 1 Gbit/s
/// link: a 100 MB upload lost 2–10 % of its frames there, counted nowhere
/// DPDK reports, and the kernel's fanout then rolled flows over to other
/// queues, reordering TCP. 8192 rides out a worker's stalls of several
/// milliseconds at the rates af_packet reaches (~1 Mpps per queue).
pub const AF_PACKET_FRAMECNT: u32 = 8192;

/// The device string, with [`AF_PACKET_FRAMECNT`] added to a
/// `net_af_packet` device that does not size its ring itself.
pub fn with_af_packet_ring(device: &str) -> String {
    let is_af_packet = device.starts_with("net_af_packet");
    if !is_af_packet || device.split(',').any(|kv| kv.starts_with("framecnt=")) {
        return device.to_string();
    }
    format!("{device},framecnt={AF_PACKET_FRAMECNT}")
}

pub fn run(cfg: Config, opts: RunOptions) -> Result<(), RunError> {
    let mut service = ServiceManager::from_env();
    let signals = Signals::register()?;

    // Before EAL: net_tap must create each TAP, not attach to an interface
    // that is already there.
    if let Some((port, tap)) = exception::existing_taps(&cfg.dataplane.ports)
        .into_iter()
        .next()
    {
        return Err(RunError::Setup(exception::existing_tap_error(&port, &tap)));
    }
    if let Err(e) = admin_http::raise_open_files_limit() {
        controlplane::warn!("sluice: cannot raise the open files limit to its hard limit: {e}");
    }
    // Before EAL: a taken address fails here, in a second, by name.
    let admin = AdminState::new();
    let admin_server = if opts.metrics_server {
        let server = start_admin(&cfg, &opts, &admin)?;
        controlplane::info!(
            "sluice: metrics on http://{0}/metrics (also /healthz, /ready)",
            server.local_addr()
        );
        Some(server)
    } else {
        None
    };

    // Before EAL and the mempool: the shards are reserved and written at
    // start, so a capacity the machine cannot back is refused here, by name.
    let workers = usize::from(cfg.dataplane.workers);
    let capacity = cfg.dataplane.conntrack_capacity as usize;
    controlplane::memory_budget::check_conntrack(
        workers,
        capacity,
        controlplane::memory_budget::available_bytes(),
    )
    .map_err(RunError::Setup)?;
    controlplane::info!(
        "sluice: conntrack: {capacity} connections per worker in {} slots, {} MiB per worker",
        sluice_core::conntrack::Shard::slots_for(capacity),
        controlplane::memory_budget::conntrack_bytes(1, capacity) >> 20
    );

    let args = eal_args(&cfg, opts.file_prefix.as_deref());
    // Declared before `eal`: dropped after it, on every path out.
    let mut runtime_dir = RuntimeDir::of(&args);
    let eal = Eal::init(&args).map_err(|e| hinted(Step::Eal, e.errno, e.into(), &cfg, &args))?;
    runtime_dir.initialised();
    if let Some(server) = &admin_server {
        if let Err(e) = server.share_cpus_of_current_thread() {
            controlplane::warn!("sluice: admin http thread keeps its CPUs: {e}");
        }
    }
    admin.beat();
    let lcores = eal.worker_lcores();
    if lcores.len() < workers {
        return Err(RunError::Setup(format!(
            "the configuration asks for {workers} worker(s) but EAL started {} worker lcore(s); \
             give one more lcore than workers in dataplane.eal_args (-l/--lcores) or drop them \
             to let sluice choose",
            lcores.len()
        )));
    }
    let nports = cfg.dataplane.ports.len();
    let mbufs = mbuf_pool::mbuf_count(&cfg.dataplane);
    let data_room = mbuf_pool::data_room(&cfg.dataplane.ports);
    let pool = Mempool::new("sluice_mbufs", mbufs, 256, data_room).map_err(|e| {
        let bytes = mbuf_pool::pool_bytes_at_least(mbufs, data_room);
        hinted(Step::PacketPool { bytes }, e.errno, e.into(), &cfg, &args)
    })?;
    controlplane::info!(
        "sluice: packet pool: {mbufs} mbufs of {data_room} bytes (frames up to {} bytes)",
        usize::from(data_room) - dataplane::dpdk::MBUF_HEADROOM
    );
    admin.beat();

    let mut ports = Vec::with_capacity(nports);
    for p in &cfg.dataplane.ports {
        let pc = PortConfig {
            rx_queues: workers as u16,
            tx_queues: workers as u16,
            // One flow, one shard (SPEC §3, AP-1): RSS on addresses only.
            // Every tracking key — 5-, 3- or 2-tuple (CT-3) — and every
            // fragment of a datagram (HA-2: later fragments have no ports)
            // contains both addresses, so all its packets reach the same
            // queue and thus the same worker's shard. L4 RSS would split
            // PER_SESSION 2/3-tuple keys and fragments across workers.
            rss_l4: false,
            mtu: Some(p.mtu),
            ..PortConfig::default()
        };
        let port = Port::start(&p.device, &pc, &pool).map_err(|e| {
            let error = RunError::Setup(format!("port {:?} ({}): {e}", p.name, p.device));
            let step = Step::Port { device: &p.device };
            hinted(step, e.errno, error, &cfg, &args)
        })?;
        ports.push(port);
        admin.beat();
    }
    let port_macs: Vec<[u8; 6]> = ports.iter().map(Port::mac).collect();
    let taps = start_taps(&cfg, &args, &port_macs, workers as u16, &pool)?;

    // One clock for the control thread and the workers: draining deadlines
    // (CT-10) are compared against the workers' `now`.
    let ctl_clock = eal.tsc_clock();
    let mut controller = Controller::new(
        cfg.clone(),
        opts.config_path.clone(),
        port_macs,
        Box::new(move || Millis(ctl_clock.now_ms())),
    )?;
    if taps.iter().any(Option::is_some) {
        let names = cfg.dataplane.ports.iter().map(|p| p.tap.clone()).collect();
        controller.attach_neighbours(NeighbourResolver::spawn(names)?);
    } else {
        for b in cfg.backend_services.iter().flat_map(|s| &s.backends) {
            if b.mac.is_none() {
                controlplane::warn!(
                    "sluice: backend {} has no `mac` and no port has a `tap` to resolve it \
                     through the kernel: its packets are dropped as next_hop_unresolved",
                    b.address
                );
            }
        }
    }
    let snapshots = controller.snapshots();
    let stats: Vec<_> = (0..workers).map(|_| Arc::new(WorkerStats::new())).collect();
    controller.count_backends_in(stats.clone());
    let sources = Arc::new(MetricsSources {
        workers: stats.clone(),
        snapshot: Arc::clone(&snapshots),
        port_names: cfg.dataplane.ports.iter().map(|p| p.name.clone()).collect(),
        control: Some(Arc::clone(&controller.shared)),
        dpdk_port_ids: ports.iter().map(Port::id).collect(),
        kernel_drops: cfg
            .dataplane
            .ports
            .iter()
            .map(|p| af_packet::iface_of(&p.device).and_then(af_packet::KernelDrops::for_iface))
            .collect(),
    });
    let requests = match opts.control_socket.as_deref().map(control_socket::serve) {
        Some(Ok(rx)) => Some(rx),
        Some(Err(e)) => {
            controlplane::warn!("sluice: control socket: {e}; reload with SIGHUP instead");
            None
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let clock = ctl_clock;
    let mut steering = steering_rings(&ports, workers, usize::from(cfg.dataplane.burst_size))?;
    let mut launched = Vec::with_capacity(workers);
    for (w, &lcore) in lcores.iter().take(workers).enumerate() {
        let q = w as u16;
        let worker = Worker {
            index: w,
            port_ids: ports.iter().map(Port::id).collect(),
            steering: steering
                .as_mut()
                .and_then(|s| s.get_mut(w))
                .and_then(Option::take),
            rx: ports.iter().filter_map(|p| p.rx_queue(q)).collect(),
            tx: ports.iter().filter_map(|p| p.tx_queue(q)).collect(),
            exception: taps
                .iter()
                .map(|t| {
                    let t = t.as_ref()?;
                    Some(ExceptionQueues {
                        rx: t.rx_queue(q)?,
                        tx: t.tx_queue(q)?,
                    })
                })
                .collect(),
            stats: Arc::clone(&stats[w]),
            snapshots: Arc::clone(&snapshots),
            stop: Arc::clone(&stop),
            clock,
            burst_size: usize::from(cfg.dataplane.burst_size),
            conntrack_capacity: cfg.dataplane.conntrack_capacity as usize,
            test_pause_after_rx: (opts.test_mark_unhealthy.as_ref().map(|h| h.after_packets))
                .or(opts.test_reload.as_ref().map(|h| h.after_packets)),
        };
        eal.launch(lcore, move || worker.run())?;
        launched.push(lcore);
    }
    controlplane::info!(
        "sluice: {} worker(s) on lcores {:?}, {} port(s): {}",
        workers,
        launched,
        nports,
        cfg.dataplane
            .ports
            .iter()
            .zip(&ports)
            .map(|(p, port)| {
                let link = port.link();
                let speed = link
                    .speed_mbps
                    .map_or_else(|| "speed unknown".to_string(), |s| format!("{s} Mb/s"));
                format!(
                    "{}={}(dpdk {}, link {} {speed})",
                    p.name,
                    port.name(),
                    port.id(),
                    if link.up { "up" } else { "down" },
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    // /metrics and /ready answer from here on; withdrawn before the ports
    // close, on every path out of this function.
    admin.publish(Arc::clone(&sources));
    let published = Published(&admin);
    // Ports and TAPs are up, workers poll, the first snapshot is published.
    service.ready(&format!(
        "{workers} worker(s), {nports} port(s), {} service(s)",
        cfg.backend_services.len()
    ));

    let hook = opts.test_mark_unhealthy.clone().map(|h| {
        crate::test_hook::spawn(
            h,
            &cfg,
            Arc::clone(&snapshots),
            stats.clone(),
            Arc::clone(&stop),
        )
    });
    let reload_hook = opts.test_reload.clone().map(|h| {
        crate::test_hook::spawn_reload(
            h,
            opts.config_path.clone(),
            Arc::clone(&snapshots),
            stats.clone(),
            Arc::clone(&controller.shared),
            Arc::clone(&stop),
        )
    });
    supervise(
        &opts,
        &signals,
        &stats,
        &mut controller,
        requests.as_ref(),
        &admin,
        &mut service,
    );

    stop.store(true, Ordering::Relaxed);
    for h in hook.into_iter().chain(reload_hook) {
        let _ = h.join();
    }
    for &lcore in &launched {
        eal.wait(lcore);
    }
    drop(published);
    // The final metrics are rendered while the ports are still open: closing
    // a port resets its hardware counters.
    let final_metrics = opts
        .metrics_dump
        .as_ref()
        .map(|_| metrics::render(&sources));
    // Closing the ports flushes drivers (net_pcap writes its TX file here);
    // closing a TAP removes its kernel interface.
    drop(ports);
    drop(taps);
    if let (Some(path), Some(text)) = (&opts.metrics_dump, final_metrics) {
        if path.as_os_str() == "-" {
            print!("{text}");
        } else {
            std::fs::write(path, text)?;
        }
    }
    drop(sources);
    drop(pool);
    drop(eal);
    drop(runtime_dir);
    Ok(())
}

/// Binds the admin HTTP endpoint at `metrics.listen`; a refusal names the
/// field, the file and the way out.
fn start_admin(
    cfg: &Config,
    opts: &RunOptions,
    admin: &Arc<AdminState>,
) -> Result<AdminServer, RunError> {
    let listen = cfg.metrics.listen;
    AdminServer::start(listen, Arc::clone(admin)).map_err(|e| {
        let file = opts
            .config_path
            .as_ref()
            .map(|p| format!(" in {}", p.display()))
            .unwrap_or_default();
        let fix = if e.kind() == std::io::ErrorKind::AddrInUse {
            "another process listens there: set [metrics] listen to a free address"
        } else {
            "set [metrics] listen to an address of this host"
        };
        RunError::Setup(format!(
            "metrics.listen = \"{listen}\"{file}: cannot listen: {e}; {fix}, \
             or run with --no-metrics-server; nothing started"
        ))
    })
}

/// SIGINT/SIGTERM (stop) and SIGHUP (reload), raised since the last check.
struct Signals {
    term: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    fn register() -> std::io::Result<Self> {
        let term = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&term))?;
        }
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
        Ok(Self { term, hup })
    }
}

/// Waits on the main lcore until a signal, the duration, or idleness says stop.
///
/// Between checks it is the control thread (AP-2): health results, draining
/// deadlines, reloads (SIGHUP or the control socket) and status requests.
fn supervise(
    opts: &RunOptions,
    signals: &Signals,
    stats: &[Arc<crossbeam_utils::CachePadded<WorkerStats>>],
    controller: &mut Controller,
    requests: Option<&std::sync::mpsc::Receiver<Pending>>,
    admin: &AdminState,
    service: &mut ServiceManager,
) {
    // systemd sees RELOADING=1 ... READY=1 around every reload, refused or
    // not: a refused one leaves the running configuration serving.
    let reload = |controller: &mut Controller, service: &ServiceManager| {
        service.reloading();
        let result = controller.reload();
        match &result {
            Ok(m) => {
                controlplane::info!("sluice: {m}");
                service.ready(m.trim_end());
            }
            Err(e) => {
                controlplane::error!("sluice: reload failed:\n{e}");
                service.ready("reload refused; the running configuration is unchanged");
            }
        }
        result
    };
    let started = Instant::now();
    let rx_total = || -> u64 {
        stats
            .iter()
            .flat_map(|s| s.ports.iter())
            .map(|p| p.rx_packets.get())
            .sum()
    };
    let polls = || -> Vec<u64> { stats.iter().map(|s| s.polls.get()).collect() };
    let mut last_rx = rx_total();
    let mut last_change = Instant::now();
    let mut polls_at_change = polls();
    loop {
        // One liveness for /healthz and systemd's watchdog: this loop ran.
        admin.beat();
        service.alive();
        std::thread::sleep(Duration::from_millis(10));
        if signals.term.load(Ordering::Relaxed) {
            service.stopping();
            controlplane::info!("sluice: signal received, stopping");
            return;
        }
        controller.tick();
        if signals.hup.swap(false, Ordering::Relaxed) {
            let _ = reload(controller, service);
        }
        for p in requests.into_iter().flat_map(|r| r.try_iter()) {
            match p.request {
                Request::Reload => {
                    let _ = p.reply.send(reload(controller, service));
                }
                // Rendered on its own thread from the published state: a
                // status over a big configuration never delays a publish.
                Request::Status => {
                    let render = controller.status_renderer();
                    let spawned = std::thread::Builder::new()
                        .name("sluice-status".into())
                        .spawn(move || {
                            let _ = p.reply.send(Ok(render()));
                        });
                    if let Err(e) = spawned {
                        controlplane::error!("sluice: status: cannot start a thread: {e}");
                    }
                }
            }
        }
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            return;
        }
        if let Some(idle) = opts.exit_on_idle {
            // Idle counts from the first packet on: on a loaded machine the
            // workers may start polling late (each touches its conntrack
            // shard first), and stopping before any traffic would silently
            // cut a replay short. A source that never
            // sends anything still ends, after IDLE_STARTUP_GRACE.
            //
            // Quiet also means every worker has polled since the last packet
            // (twice: the first poll after a stall may still read a burst):
            // a worker the scheduler starved for longer than `idle` has not
            // read its queues yet. A worker that never polls again does not
            // hold the exit up for more than IDLE_STARTUP_GRACE beyond `idle`.
            let rx = rx_total();
            let quiet = last_change.elapsed();
            let all_polled = polls()
                .iter()
                .zip(&polls_at_change)
                .all(|(now, then)| now.saturating_sub(*then) >= 2);
            if rx != last_rx {
                last_rx = rx;
                last_change = Instant::now();
                polls_at_change = polls();
            } else if (rx > 0 && quiet >= idle && all_polled)
                || (rx > 0 && quiet >= idle + IDLE_STARTUP_GRACE)
                || (rx == 0 && quiet >= idle.max(IDLE_STARTUP_GRACE))
            {
                return;
            }
        }
    }
}

/// One flow, one shard: when a port cannot keep an address pair on one RX
/// queue (net_af_packet, RSS-less devices) and there are several workers,
/// a ring from every worker to every other carries tracked packets to the
/// worker that owns their key (`sluice_core::steering`).
fn steering_rings(
    ports: &[Port],
    workers: usize,
    burst_size: usize,
) -> Result<Option<Vec<Option<Steering>>>, RunError> {
    let needs: Vec<bool> = ports
        .iter()
        .map(|p| !p.keeps_address_pairs_on_one_queue())
        .collect();
    if workers < 2 || !needs.iter().any(|&n| n) {
        return Ok(None);
    }
    let mut per_worker: Vec<Steering> = (0..workers)
        .map(|_| Steering {
            to: (0..workers).map(|_| None).collect(),
            from: Vec::new(),
            ports: needs.clone(),
        })
        .collect();
    let slots = sluice_core::steering::ring_slots(burst_size, workers);
    for from in 0..workers {
        for to in (0..workers).filter(|&t| t != from) {
            let (p, c) = mbuf_ring(&format!("sluice_steer_{from}_{to}"), slots)?;
            per_worker[from].to[to] = Some(p);
            per_worker[to].from.push(c);
        }
    }
    controlplane::info!(
        "sluice: software steering between {workers} workers ({slots}-slot rings) for port(s) {:?} \
         (no RSS on addresses only)",
        ports
            .iter()
            .zip(&needs)
            .filter(|(_, &n)| n)
            .map(|(p, _)| p.name())
            .collect::<Vec<_>>()
    );
    Ok(Some(per_worker.into_iter().map(Some).collect()))
}

/// AP-4: starts each port's TAP (one queue pair per worker) with the
/// port's MAC, and gives the kernel side the port's addresses and MTU.
fn start_taps(
    cfg: &Config,
    eal_args: &[String],
    port_macs: &[[u8; 6]],
    workers: u16,
    pool: &Mempool,
) -> Result<Vec<Option<Port>>, RunError> {
    let mut taps = Vec::with_capacity(cfg.dataplane.ports.len());
    for (i, p) in cfg.dataplane.ports.iter().enumerate() {
        let Some(iface) = &p.tap else {
            taps.push(None);
            continue;
        };
        let setup = |errno: i32, e: String| {
            let error = RunError::Setup(format!("port {:?} TAP {iface:?}: {e}", p.name));
            hinted(Step::Tap, errno, error, cfg, eal_args)
        };
        let pc = PortConfig {
            rx_queues: workers,
            tx_queues: workers,
            rss: false,
            promiscuous: false,
            rx_descriptors: 512,
            tx_descriptors: 512,
            mtu: Some(p.mtu),
            ..PortConfig::default()
        };
        let tap = Port::start(&exception::tap_vdev(i, iface), &pc, pool)
            .map_err(|e| setup(e.errno, e.to_string()))?;
        // The kernel answers ARP/ND with the MAC the port's peers send to.
        let mac = p
            .mac
            .or_else(|| port_macs.get(i).copied())
            .unwrap_or_default();
        tap.set_mac(mac)
            .map_err(|e| setup(e.errno, e.to_string()))?;
        exception::configure_tap(p, iface).map_err(|e| setup(0, e))?;
        controlplane::info!("sluice: port {:?}: exception path on TAP {iface}", p.name);
        taps.push(Some(tap));
    }
    Ok(taps)
}

/// How long `--exit-on-idle` waits for the first packet.
const IDLE_STARTUP_GRACE: Duration = Duration::from_secs(5);

/// EAL's runtime directory (`/var/run/dpdk/<prefix>` for root, else under
/// `$XDG_RUNTIME_DIR` or `/tmp`), which EAL creates at init and leaves
/// behind (megabytes of memseg files with hugepages), removed when this is
/// dropped: after EAL's cleanup, on success and failure alike. The
/// per-process prefix sluice adds is always ours; an operator's
/// `--file-prefix` only once EAL init succeeded (a failed init may mean
/// another primary process holds it).
struct RuntimeDir {
    path: Option<std::path::PathBuf>,
    ours: bool,
}

impl RuntimeDir {
    fn of(args: &[String]) -> Self {
        let own = format!("sluice-{}", std::process::id());
        let prefix = args
            .iter()
            .zip(args.iter().skip(1).map(Some).chain([None]))
            .filter_map(|(a, next)| match a.strip_prefix("--file-prefix=") {
                Some(p) => Some(p.to_string()),
                None if a == "--file-prefix" => next.cloned(),
                None => None,
            })
            .last();
        let base = if rustix::process::getuid().is_root() {
            std::path::PathBuf::from("/var/run")
        } else {
            std::env::var_os("XDG_RUNTIME_DIR")
                .map_or_else(|| "/tmp".into(), std::path::PathBuf::from)
        };
        Self {
            ours: prefix.as_deref() == Some(own.as_str()),
            path: prefix.map(|p| base.join("dpdk").join(p)),
        }
    }

    /// EAL init succeeded: this process is the directory's primary.
    fn initialised(&mut self) {
        self.ours = self.path.is_some();
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        if let (true, Some(path)) = (self.ours, &self.path) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// af_packet gets a line-rate ring unless the
    /// operator sized it; other devices are left alone.
    #[test]
    fn af_packet_devices_get_a_large_ring_by_default() {
        assert_eq!(
            with_af_packet_ring("net_af_packet0,iface=lb0,qpairs=2"),
            "net_af_packet0,iface=lb0,qpairs=2,framecnt=8192"
        );
        assert_eq!(
            with_af_packet_ring("net_af_packet0,iface=lb0,framecnt=1024"),
            "net_af_packet0,iface=lb0,framecnt=1024"
        );
        assert_eq!(
            with_af_packet_ring("net_pcap0,rx_pcap=a.pcap"),
            "net_pcap0,rx_pcap=a.pcap"
        );
    }
}
