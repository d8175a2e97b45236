use std::ffi::CStr;

/// A failed DPDK call: which call, and DPDK's errno text.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {message} (errno {errno})")]
pub struct DpdkError {
    pub call: String,
    pub errno: i32,
    pub message: String,
}

impl DpdkError {
    /// Builds an error from a negative return code (`-errno`) or, when `rc`
    /// is not negative, from `rte_errno`.
    pub(crate) fn from_rc(call: impl Into<String>, rc: i32) -> Self {
        if rc < 0 {
            Self::from_errno(call, -rc)
        } else {
            Self::from_rte_errno(call)
        }
    }

    /// Builds an error from `rte_errno`: for calls that return NULL or a
    /// bare -1 and leave the reason there (`rte_eal_init`,
    /// `rte_pktmbuf_pool_create`). Their -1 is not `-EPERM`.
    pub(crate) fn from_rte_errno(call: impl Into<String>) -> Self {
        // SAFETY: reads the calling thread's rte_errno; no preconditions.
        let errno = unsafe { dpdk_sys::sluice_rte_errno() };
        Self::from_errno(call, errno)
    }

    fn from_errno(call: impl Into<String>, errno: i32) -> Self {
        // SAFETY: rte_strerror returns a pointer to a static or thread-local
        // NUL-terminated string, valid at least until the next call on this
        // thread; we copy it out at once.
        let message = unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        Self {
            call: call.into(),
            errno,
            message,
        }
    }

    pub(crate) fn msg(call: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            call: call.into(),
            errno: 0,
            message: message.into(),
        }
    }
}

#[cfg(feature = "test-hooks")]
impl DpdkError {
    /// A failure of `call` made up by a test hook, to drive an error path
    /// through the real binary.
    pub fn injected(call: impl Into<String>) -> Self {
        Self::msg(call, "failure injected by a test hook")
    }
}
