//! Background work on the control plane's core: the health prober's
//! thread and a reload's parse. The control plane shares one core (the
//! workers busy-poll the others); a health flip's publish or a `sluice
//! status` render must not queue behind 100,000 probes or 7 MB of TOML.
//! A background thread runs at nice 5 (CFS weight 335 against 1024): when
//! the core is free it runs as before; when a thread at the default
//! priority needs it, that one gets three quarters of it. Not lower: the
//! prober must keep its own checks on time while someone polls `sluice
//! status` in a loop (nice 10 starved it: `docs/performance-log.md`).

/// The nice value of background threads.
pub const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority to [`BACKGROUND_NICE`] (this
/// thread only). Lowering needs no privilege; a failure leaves the
/// thread where it was, with a warning naming `what`.
pub fn lower_this_thread(what: &str) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), BACKGROUND_NICE) {
        crate::warn!("sluice: {what} keeps its priority: {e}");
    }
}
