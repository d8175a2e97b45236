//! `sluice run`: EAL, mempool, ports, workers, metrics, and an orderly stop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controlplane::config::Config;
use controlplane::control::Controller;
use controlplane::control_socket::{self, Pending, Request};
use controlplane::exception;
use controlplane::metrics::{self, MetricsSources};
use controlplane::neighbours::NeighbourResolver;
use dataplane::dpdk::{af_packet, mbuf_ring, Eal, Mempool, Port, PortConfig};
use dataplane::snapshot::Millis;
use dataplane::stats::WorkerStats;
use dataplane::worker::{ExceptionQueues, Steering, Worker};

/// Upper bound on backend ids counted per backend in each worker's stats.
const MAX_BACKEND_COUNTERS: usize = 1 << 16;

pub struct RunOptions {
    pub exit_on_idle: Option<Duration>,
    pub duration: Option<Duration>,
    pub metrics_dump: Option<PathBuf>,
    pub metrics_server: bool,
    /// The file `cfg` came from: SIGHUP and `sluice reload` re-read it.
    pub config_path: Option<PathBuf>,
    /// Unix socket for `sluice reload` / `sluice status` (None: none).
    pub control_socket: Option<PathBuf>,
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
}

/// EAL arguments: the configured ones, plus what the ports and workers need
/// unless the operator already said it (devices, lcores, a private runtime
/// directory so several instances and tests can run side by side).
pub fn eal_args(cfg: &Config) -> Vec<String> {
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
        args.push(format!("--file-prefix=sluice-{}", std::process::id()));
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
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&term))?;
    }
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;

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
    eprintln!(
        "sluice: conntrack: {capacity} connections per worker in {} slots, {} MiB per worker",
        dataplane::conntrack::Shard::slots_for(capacity),
        controlplane::memory_budget::conntrack_bytes(1, capacity) >> 20
    );

    let args = eal_args(&cfg);
    let eal = Eal::init(&args)?;
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
    // Enough for every RX and TX ring plus per-lcore caches and bursts in flight.
    let ntaps = cfg
        .dataplane
        .ports
        .iter()
        .filter(|p| p.tap.is_some())
        .count();
    let burst = usize::from(cfg.dataplane.burst_size);
    // Every steering ring into a worker full, and a burst held for each peer.
    let steered = (workers as u32).saturating_sub(1)
        * dataplane::steering::ring_slots(burst, workers)
        + (dataplane::dpdk::MAX_BURST * workers) as u32;
    let rings = nports as u32 * (1024 + 1024) + ntaps as u32 * (512 + 512) + steered;
    let auto = (rings * workers as u32 + 4096).next_power_of_two() - 1;
    let mbufs = if cfg.dataplane.mbufs == 0 {
        auto
    } else {
        cfg.dataplane.mbufs
    };
    let pool = Mempool::new("sluice_mbufs", mbufs, 256, dpdk_sys_default_buf_size())?;

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
        let port = Port::start(&p.device, &pc, &pool)
            .map_err(|e| RunError::Setup(format!("port {:?} ({}): {e}", p.name, p.device)))?;
        ports.push(port);
    }
    let port_macs: Vec<[u8; 6]> = ports.iter().map(Port::mac).collect();
    let taps = start_taps(&cfg, &port_macs, workers as u16, &pool)?;

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
                eprintln!(
                    "sluice: backend {} has no `mac` and no port has a `tap` to resolve it \
                     through the kernel: its packets are dropped as next_hop_unresolved",
                    b.address
                );
            }
        }
    }
    let snapshots = controller.snapshots();
    let stats: Vec<_> = (0..workers)
        .map(|_| Arc::new(WorkerStats::new(MAX_BACKEND_COUNTERS)))
        .collect();
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
            eprintln!("sluice: control socket: {e}; reload with SIGHUP instead");
            None
        }
        None => None,
    };
    if opts.metrics_server {
        metrics::serve(cfg.metrics.listen, Arc::clone(&sources))?;
        eprintln!("sluice: metrics on http://{}/metrics", cfg.metrics.listen);
    }

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
    eprintln!(
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
                format!(
                    "{}={}(dpdk {}, link {} {} Mb/s)",
                    p.name,
                    port.name(),
                    port.id(),
                    if link.up { "up" } else { "down" },
                    link.speed_mbps
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    );

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
        &term,
        &hup,
        &stats,
        &mut controller,
        requests.as_ref(),
    );

    stop.store(true, Ordering::Relaxed);
    for h in hook.into_iter().chain(reload_hook) {
        let _ = h.join();
    }
    for &lcore in &launched {
        eal.wait(lcore);
    }
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
    remove_runtime_dir(&args);
    Ok(())
}

/// Waits on the main lcore until a signal, the duration, or idleness says stop.
///
/// Between checks it is the control thread (AP-2): health results, draining
/// deadlines, reloads (SIGHUP or the control socket) and status requests.
fn supervise(
    opts: &RunOptions,
    term: &AtomicBool,
    hup: &AtomicBool,
    stats: &[Arc<crossbeam_utils::CachePadded<WorkerStats>>],
    controller: &mut Controller,
    requests: Option<&std::sync::mpsc::Receiver<Pending>>,
) {
    let reload = |controller: &mut Controller| {
        let result = controller.reload();
        match &result {
            Ok(m) => eprint!("sluice: {m}"),
            Err(e) => eprint!("sluice: reload failed:\n{e}"),
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
    let mut last_rx = rx_total();
    let mut last_change = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(10));
        if term.load(Ordering::Relaxed) {
            eprintln!("sluice: signal received, stopping");
            return;
        }
        controller.tick();
        if hup.swap(false, Ordering::Relaxed) {
            let _ = reload(controller);
        }
        for p in requests.into_iter().flat_map(|r| r.try_iter()) {
            let answer = match p.request {
                Request::Reload => reload(controller),
                Request::Status => Ok(controller.status_text()),
            };
            let _ = p.reply.send(answer);
        }
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            return;
        }
        if let Some(idle) = opts.exit_on_idle {
            // Idle counts from the first packet on, and only once every
            // worker polls: on a loaded machine a worker may start late
            // (its conntrack shard is touched first), and stopping before
            // it read its queue would silently cut a replay short. A
            // source that never sends anything still ends, after
            // IDLE_STARTUP_GRACE.
            let rx = rx_total();
            let all_polling = stats.iter().all(|s| s.polls.get() > 0);
            if rx != last_rx {
                last_rx = rx;
                last_change = Instant::now();
            } else if (rx > 0 && all_polling && last_change.elapsed() >= idle)
                || last_change.elapsed() >= idle.max(IDLE_STARTUP_GRACE)
            {
                return;
            }
        }
    }
}

/// One flow, one shard: when a port cannot keep an address pair on one RX
/// queue (net_af_packet, RSS-less devices) and there are several workers,
/// a ring from every worker to every other carries tracked packets to the
/// worker that owns their key (`dataplane::steering`).
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
    let slots = dataplane::steering::ring_slots(burst_size, workers);
    for from in 0..workers {
        for to in (0..workers).filter(|&t| t != from) {
            let (p, c) = mbuf_ring(&format!("sluice_steer_{from}_{to}"), slots)?;
            per_worker[from].to[to] = Some(p);
            per_worker[to].from.push(c);
        }
    }
    eprintln!(
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
        let setup = |e: String| RunError::Setup(format!("port {:?} TAP {iface:?}: {e}", p.name));
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
            .map_err(|e| setup(e.to_string()))?;
        // The kernel answers ARP/ND with the MAC the port's peers send to.
        let mac = p
            .mac
            .or_else(|| port_macs.get(i).copied())
            .unwrap_or_default();
        tap.set_mac(mac).map_err(|e| setup(e.to_string()))?;
        exception::configure_tap(p, iface).map_err(setup)?;
        eprintln!("sluice: port {:?}: exception path on TAP {iface}", p.name);
        taps.push(Some(tap));
    }
    Ok(taps)
}

/// How long `--exit-on-idle` waits for the first packet.
const IDLE_STARTUP_GRACE: Duration = Duration::from_secs(5);

/// Mbuf data room: DPDK's default (2048 + headroom), enough for a 1500-byte
/// MTU plus any encapsulation in one segment.
fn dpdk_sys_default_buf_size() -> u16 {
    2048 + 128
}

/// EAL leaves its runtime directory behind; remove ours if we made it.
fn remove_runtime_dir(args: &[String]) {
    let own = format!("--file-prefix=sluice-{}", std::process::id());
    if args.contains(&own) {
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/sluice-{}", std::process::id()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12 item 8: af_packet gets a line-rate ring unless the
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
