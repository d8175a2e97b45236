//! EAL initialisation and cleanup, the worker lcores, and the TSC clock.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::error::DpdkError;
use super::ids::LcoreId;

static EAL_INITIALISED: AtomicBool = AtomicBool::new(false);

/// The severity of one DPDK log message (its `RTE_LOG_*` level).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DpdkLogLevel {
    /// RTE_LOG_EMERG .. RTE_LOG_ERR.
    Error,
    Warning,
    /// RTE_LOG_NOTICE, RTE_LOG_INFO.
    Info,
    /// RTE_LOG_DEBUG.
    Debug,
}

impl DpdkLogLevel {
    fn of(level: c_int) -> Self {
        match u32::try_from(level).unwrap_or(0) {
            0..=dpdk_sys::RTE_LOG_ERR => DpdkLogLevel::Error,
            dpdk_sys::RTE_LOG_WARNING => DpdkLogLevel::Warning,
            dpdk_sys::RTE_LOG_NOTICE | dpdk_sys::RTE_LOG_INFO => DpdkLogLevel::Info,
            _ => DpdkLogLevel::Debug,
        }
    }
}

static LOG_SINK: std::sync::OnceLock<fn(DpdkLogLevel, &str)> = std::sync::OnceLock::new();

extern "C" fn log_message(level: c_int, buf: *const std::ffi::c_char, len: usize) {
    let Some(sink) = LOG_SINK.get() else { return };
    // SAFETY: the stdio cookie stream hands its write callback `len`
    // readable bytes at `buf`, valid for the duration of the call.
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    sink(DpdkLogLevel::of(level), &String::from_utf8_lossy(bytes));
}

/// Sends DPDK's own log (EAL, drivers) to `sink`, one call per message
/// with its level, instead of EAL's default stream, which writes each
/// message to stdout and to syslog (twice in the journal). Set once,
/// before [`Eal::init`]; a second call keeps the first sink.
pub fn log_to(sink: fn(DpdkLogLevel, &str)) -> Result<(), DpdkError> {
    let _ = LOG_SINK.set(sink);
    // SAFETY: the shim opens a stdio stream whose write callback is
    // `log_message`, a plain function valid for the whole process, and
    // hands it to rte_openlog_stream, which only stores the pointer.
    let rc = unsafe { dpdk_sys::sluice_log_to(Some(log_message)) };
    if rc < 0 {
        return Err(DpdkError::msg(
            "rte_openlog_stream",
            "cannot open the log stream",
        ));
    }
    Ok(())
}

/// Proof that EAL is initialised and not cleaned up. Every object that
/// calls into DPDK after its creation holds one (mempools, ports and
/// through them queues, rings, lcores, launched jobs); [`Eal`] runs
/// `rte_eal_cleanup` only once it holds the last.
#[derive(Clone, Debug)]
pub(crate) struct EalGuard(Arc<EalAlive>);

#[derive(Debug)]
struct EalAlive;

/// Marks a type as usable only on the thread that initialised EAL (the
/// main lcore): `rte_eal_remote_launch`, `rte_eal_wait_lcore` and
/// `rte_eal_cleanup` must be called there.
type MainLcoreOnly = PhantomData<*const ()>;

/// The initialised Environment Abstraction Layer. At most one per process
/// (DPDK cannot be initialised twice). Dropping it (or [`Eal::close`]) runs
/// `rte_eal_cleanup` only when no pool, port, queue, ring or lcore is left:
/// while one is, cleanup is skipped, never run under it.
#[derive(Debug)]
pub struct Eal {
    guard: EalGuard,
    lcores_taken: bool,
    cleaned_up: bool,
    /// `rte_pdump_init` succeeded: undone before `rte_eal_cleanup`.
    capture_enabled: bool,
    _main_lcore: MainLcoreOnly,
}

/// [`Eal::close`] refused: DPDK objects still hold EAL. Gives the `Eal`
/// back, to close once they are gone.
#[derive(Debug, thiserror::Error)]
#[error("EAL is still used by {users} DPDK object(s) (pools, ports, queues, rings, lcores)")]
pub struct EalInUse {
    pub eal: Eal,
    pub users: usize,
}

type LcoreJob = Box<dyn FnOnce() -> i32 + Send + 'static>;

unsafe extern "C" fn lcore_trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Box<LcoreJob>` leaked by `Lcore::launch` for
    // exactly this call; EAL calls the function once, so we take it back once.
    let job: Box<LcoreJob> = unsafe { Box::from_raw(arg.cast::<LcoreJob>()) };
    job()
}

impl Eal {
    /// Initialises EAL with `args` (without argv[0]).
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        if EAL_INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError::msg("rte_eal_init", "EAL is already initialised"));
        }
        let mut owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
        owned.push(CString::new("sluice").expect("static string has no NUL"));
        for a in args {
            owned.push(CString::new(a.as_str()).map_err(|_| {
                DpdkError::msg(
                    "rte_eal_init",
                    format!("EAL argument {a:?} contains a NUL byte"),
                )
            })?);
        }
        let mut argv: Vec<*mut std::ffi::c_char> =
            owned.iter().map(|s| s.as_ptr().cast_mut()).collect();
        // SAFETY: argv holds argc valid NUL-terminated strings that outlive
        // the call (`owned`); EAL may permute the pointer array, which is ours.
        // EAL keeps no reference to the strings after returning (it strdup()s
        // what it keeps), and this runs once per process (flag above).
        let rc = unsafe { dpdk_sys::rte_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
        if rc < 0 {
            // rte_eal_init returns -1 and leaves the reason in rte_errno:
            // EACCES when it found no usable hugepages, ENOMEM when they
            // are too few, EAGAIN when VFIO could not be set up, EINVAL for
            // arguments it refuses.
            return Err(DpdkError::from_rte_errno("rte_eal_init"));
        }
        Ok(Eal {
            guard: EalGuard(Arc::new(EalAlive)),
            lcores_taken: false,
            cleaned_up: false,
            capture_enabled: false,
            _main_lcore: PhantomData,
        })
    }

    /// Enables DPDK's packet-capture framework (librte_pdump): a secondary
    /// process such as `dpdk-dumpcap --file-prefix PREFIX` may then ask
    /// this process, over EAL's multi-process channel, to copy the packets
    /// of a port/queue into its ring. Costs nothing until one does: the
    /// RX/TX callbacks are installed only while a capture runs.
    pub fn enable_packet_capture(&mut self) -> Result<(), DpdkError> {
        if self.capture_enabled {
            return Ok(());
        }
        // SAFETY: EAL is initialised (we hold `self`), on the main lcore
        // (`Eal` is not Send); the call registers a multi-process action
        // and allocates a memzone, and is undone in `cleanup` before EAL's.
        let rc = unsafe { dpdk_sys::rte_pdump_init() };
        if rc < 0 {
            return Err(DpdkError::from_rte_errno("rte_pdump_init"));
        }
        self.capture_enabled = true;
        Ok(())
    }

    pub(crate) fn guard(&self) -> EalGuard {
        self.guard.clone()
    }

    /// The worker lcores EAL started (main lcore excluded), each idle and
    /// ready for one job. Handed out once: a second call returns none, so
    /// no two owners can launch on one lcore.
    pub fn take_worker_lcores(&mut self) -> Vec<Lcore> {
        if std::mem::replace(&mut self.lcores_taken, true) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut id: c_uint = u32::MAX;
        loop {
            // SAFETY: EAL is initialised (we hold `self`); the call only reads
            // EAL's lcore configuration. skip_main = 1, wrap = 0.
            id = unsafe { dpdk_sys::rte_get_next_lcore(id, 1, 0) };
            if id >= dpdk_sys::RTE_MAX_LCORE {
                return out;
            }
            out.push(Lcore {
                id: LcoreId::new(id),
                _eal: self.guard(),
                _main_lcore: PhantomData,
            });
        }
    }

    pub fn tsc_clock(&self) -> TscClock {
        TscClock::new()
    }

    /// How many DPDK objects still hold EAL.
    fn users(&self) -> usize {
        // Only holders clone the guard, so a count of 1 (ours) cannot grow
        // behind our back: nobody else holds one to clone.
        Arc::strong_count(&self.guard.0) - 1
    }

    /// Runs `rte_eal_cleanup`, or gives the `Eal` back when DPDK objects
    /// still use it.
    pub fn close(mut self) -> Result<(), EalInUse> {
        match self.users() {
            0 => {
                self.cleanup();
                Ok(())
            }
            users => Err(EalInUse { eal: self, users }),
        }
    }

    fn cleanup(&mut self) {
        if std::mem::replace(&mut self.cleaned_up, true) {
            return;
        }
        if std::mem::replace(&mut self.capture_enabled, false) {
            // SAFETY: `rte_pdump_init` succeeded on this EAL, which is
            // still initialised; no port is left to capture from.
            unsafe {
                dpdk_sys::rte_pdump_uninit();
            }
        }
        // SAFETY: called once (flag above), on the main lcore (`Eal` is not
        // Send), and only when no guard but ours is left: no pool, port,
        // queue, ring, lcore or running job uses EAL any more.
        unsafe {
            dpdk_sys::rte_eal_cleanup();
        }
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        if self.cleaned_up {
            return;
        }
        match self.users() {
            0 => self.cleanup(),
            // The process is ending with DPDK objects alive (a leak in the
            // caller): leaving EAL up is safe, cleaning up under them is not.
            users => eprintln!("sluice: EAL not cleaned up: still used by {users} DPDK object(s)"),
        }
    }
}

/// A worker lcore EAL started, idle. Not `Clone`: one owner launches on it;
/// a launched job gives it back when waited for ([`Launched::wait`]).
/// Not `Send`: launched from the main lcore only.
///
/// ```compile_fail
/// fn a_second_owner<T: Clone>() {}
/// a_second_owner::<dataplane::dpdk::Lcore>();
/// ```
///
/// ```compile_fail
/// fn another_thread<T: Send>() {}
/// another_thread::<dataplane::dpdk::Lcore>();
/// ```
#[derive(Debug)]
pub struct Lcore {
    id: LcoreId,
    _eal: EalGuard,
    _main_lcore: MainLcoreOnly,
}

/// [`Lcore::launch`] failed: the lcore, still idle, and why.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct LaunchError {
    pub lcore: Lcore,
    pub error: DpdkError,
}

impl Lcore {
    pub fn id(&self) -> LcoreId {
        self.id
    }

    /// Runs `job` on this lcore; its return value is the lcore's exit code.
    pub fn launch(
        self,
        job: impl FnOnce() -> i32 + Send + 'static,
    ) -> Result<Launched, LaunchError> {
        let boxed: Box<LcoreJob> = Box::new(Box::new(job));
        let arg = Box::into_raw(boxed).cast::<c_void>();
        // SAFETY: we are on the main lcore (`Lcore` is not Send) and own
        // the idle lcore; the trampoline takes ownership of `arg` exactly
        // once when the lcore runs it; if the launch fails it never runs
        // and we reclaim `arg` below.
        let rc =
            unsafe { dpdk_sys::rte_eal_remote_launch(Some(lcore_trampoline), arg, self.id.get()) };
        if rc != 0 {
            // SAFETY: the launch failed, so EAL did not take `arg`.
            drop(unsafe { Box::from_raw(arg.cast::<LcoreJob>()) });
            let error = DpdkError::from_rc(format!("rte_eal_remote_launch(lcore {})", self.id), rc);
            return Err(LaunchError { lcore: self, error });
        }
        Ok(Launched { lcore: Some(self) })
    }
}

/// A job running on a worker lcore. Dropping it waits for the job to end,
/// so nothing the job uses can be torn down under it.
#[derive(Debug)]
pub struct Launched {
    /// Some until waited for (by [`Launched::wait`] or on drop).
    lcore: Option<Lcore>,
}

impl Launched {
    pub fn id(&self) -> LcoreId {
        self.lcore().id
    }

    fn lcore(&self) -> &Lcore {
        self.lcore
            .as_ref()
            .expect("a Launched holds its lcore until it is waited for")
    }

    /// Waits for the job to end; returns the idle lcore and the job's
    /// exit code.
    pub fn wait(mut self) -> (Lcore, i32) {
        let rc = wait_lcore(self.lcore());
        let lcore = self
            .lcore
            .take()
            .expect("a Launched holds its lcore until it is waited for");
        (lcore, rc)
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if let Some(lcore) = &self.lcore {
            wait_lcore(lcore);
        }
    }
}

fn wait_lcore(lcore: &Lcore) -> i32 {
    // SAFETY: on the main lcore (`Lcore` is not Send), EAL initialised
    // (the lcore holds a guard); returns when the job has finished.
    unsafe { dpdk_sys::rte_eal_wait_lcore(lcore.id.get()) }
}

/// The time-stamp counter turned into coarse milliseconds: one `rdtsc` per
/// call, no syscall.
#[derive(Copy, Clone, Debug)]
pub struct TscClock {
    origin: u64,
    cycles_per_ms: u64,
}

impl TscClock {
    fn new() -> Self {
        // SAFETY: these read the TSC frequency EAL measured at init and the
        // TSC itself; no memory is touched.
        let (hz, now) = unsafe { (dpdk_sys::rte_get_tsc_hz(), dpdk_sys::rte_rdtsc()) };
        Self {
            origin: now,
            cycles_per_ms: (hz / 1000).max(1),
        }
    }

    /// Milliseconds since the clock was created.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        // SAFETY: rdtsc reads a CPU register.
        let now = unsafe { dpdk_sys::rte_rdtsc() };
        now.wrapping_sub(self.origin) / self.cycles_per_ms
    }
}
