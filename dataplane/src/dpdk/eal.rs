//! EAL initialisation, lcore launch, and the TSC clock.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use super::DpdkError;

static EAL_INITIALISED: AtomicBool = AtomicBool::new(false);

/// The initialised Environment Abstraction Layer. At most one per process
/// (DPDK cannot be initialised twice); dropping it runs `rte_eal_cleanup`,
/// so it must outlive every port, mempool and mbuf.
#[derive(Debug)]
pub struct Eal {
    _not_send: std::marker::PhantomData<*const ()>,
}

type LcoreJob = Box<dyn FnOnce() -> i32 + Send + 'static>;

unsafe extern "C" fn lcore_trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Box<LcoreJob>` leaked by `Eal::launch` for
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
            _not_send: std::marker::PhantomData,
        })
    }

    /// Lcore ids of the worker lcores EAL started (main lcore excluded).
    pub fn worker_lcores(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut id: c_uint = u32::MAX;
        loop {
            // SAFETY: EAL is initialised (we hold `self`); the call only reads
            // EAL's lcore configuration. skip_main = 1, wrap = 0.
            id = unsafe { dpdk_sys::rte_get_next_lcore(id, 1, 0) };
            if id >= dpdk_sys::RTE_MAX_LCORE {
                return out;
            }
            out.push(id);
        }
    }

    /// Runs `job` on worker lcore `lcore`. The lcore must be idle.
    pub fn launch(
        &self,
        lcore: u32,
        job: impl FnOnce() -> i32 + Send + 'static,
    ) -> Result<(), DpdkError> {
        let boxed: Box<LcoreJob> = Box::new(Box::new(job));
        let arg = Box::into_raw(boxed).cast::<c_void>();
        // SAFETY: the trampoline takes ownership of `arg` exactly once when
        // the lcore runs it; if the launch fails it never runs and we
        // reclaim `arg` below.
        let rc = unsafe { dpdk_sys::rte_eal_remote_launch(Some(lcore_trampoline), arg, lcore) };
        if rc != 0 {
            // SAFETY: the launch failed, so EAL did not take `arg`.
            drop(unsafe { Box::from_raw(arg.cast::<LcoreJob>()) });
            return Err(DpdkError::from_rc(
                format!("rte_eal_remote_launch(lcore {lcore})"),
                rc,
            ));
        }
        Ok(())
    }

    /// Waits for the job on `lcore` to finish and returns its result.
    pub fn wait(&self, lcore: u32) -> i32 {
        // SAFETY: EAL is initialised; waiting on an idle lcore returns at once.
        unsafe { dpdk_sys::rte_eal_wait_lcore(lcore) }
    }

    pub fn tsc_clock(&self) -> TscClock {
        TscClock::new()
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: called once, after everything that used EAL (ports,
        // mempools, mbufs) has been dropped — callers own those by value and
        // drop them before the Eal (documented on the type).
        unsafe {
            dpdk_sys::rte_eal_cleanup();
        }
    }
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
