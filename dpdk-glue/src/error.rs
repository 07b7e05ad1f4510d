//! [`DpdkError`]: every failure of the DPDK layer, including the ones the EAL
//! only logs (a vdev that did not probe, no ports, a link that never came up).

use std::ffi::CStr;
use std::time::Duration;

/// What went wrong in the DPDK layer. Each variant names the DPDK call or
/// check that failed and, where DPDK gave one, the `rte_errno`/`-errno`
/// value with its text (`rte_strerror`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DpdkError {
    /// `Eal::init` ran before in this process. DPDK supports one EAL per
    /// process: a second `rte_eal_init` fails (`EALREADY`), even after
    /// `rte_eal_cleanup`.
    #[error(
        "the DPDK EAL is already initialised in this process (one EAL per process: \
         rte_eal_init cannot run twice, even after rte_eal_cleanup); use Eal::get()"
    )]
    AlreadyInitialized,
    /// A DPDK object was requested before `Eal::init` succeeded.
    #[error("the DPDK EAL is not initialised: call Eal::init first")]
    NotInitialized,
    /// `rte_eal_init` returned an error.
    #[error("rte_eal_init failed: {text} (rte_errno {errno}); EAL arguments: {args}")]
    EalInit {
        /// `rte_errno` after the call.
        errno: i32,
        /// `rte_strerror(errno)`.
        text: String,
        /// The arguments, space-separated.
        args: String,
    },
    /// An argument or name holds a NUL byte, or a name is too long for DPDK.
    #[error("invalid argument {value:?}: {reason}")]
    InvalidArgument {
        /// The offending value.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A virtual device did not become an ethdev port. The EAL does not fail
    /// `rte_eal_init` for this (it only logs), so the glue checks every
    /// `--vdev` and every `probe_vdev` by the port name.
    #[error(
        "vdev {name:?} did not probe ({detail}); devargs {devargs:?} \
         (run with --log-level=*:info to see the driver's reason)"
    )]
    VdevProbe {
        /// Device name (devargs up to the first comma).
        name: String,
        /// The whole devargs string.
        devargs: String,
        /// The error `rte_dev_probe` returned, or why the port is missing.
        detail: String,
    },
    /// `rte_eth_dev_count_avail() == 0`.
    #[error(
        "no DPDK Ethernet ports are available (rte_eth_dev_count_avail() == 0): \
         add a --vdev, or bind a NIC to vfio-pci and drop --no-pci"
    )]
    NoPorts,
    /// No ethdev port has this id or name.
    #[error("no DPDK ethdev port {0}")]
    NoSuchPort(String),
    /// Another [`crate::Port`] already drives this port.
    #[error("DPDK port {0} is already configured by another Port in this process")]
    PortInUse(u16),
    /// A mempool cannot serve the request: too few mbufs for the port's
    /// descriptors, or too little data room for its MTU, or a cache larger
    /// than DPDK allows for the pool size.
    #[error("mempool {pool:?} too small: {what} needs {needed}, the pool has {have}")]
    PoolTooSmall {
        /// Pool name.
        pool: String,
        /// Which resource.
        what: &'static str,
        /// Required amount.
        needed: u64,
        /// Available amount.
        have: u64,
    },
    /// The pool has no free mbuf right now.
    #[error("mempool {0:?} has no free mbuf")]
    PoolExhausted(String),
    /// The link stayed down.
    #[error("link of DPDK port {port} still down after {waited:?}")]
    LinkDownTimeout {
        /// Port id.
        port: u16,
        /// How long it was polled.
        waited: Duration,
    },
    /// A DPDK call returned an error.
    #[error("{call} failed: {text} (errno {errno})")]
    Call {
        /// The DPDK function.
        call: &'static str,
        /// The positive errno (`-ret` or `rte_errno`).
        errno: i32,
        /// `rte_strerror(errno)`.
        text: String,
    },
    /// A frame or segment does not fit its mbuf.
    #[error("{what}: {len} bytes do not fit in {room}")]
    TooLong {
        /// What did not fit.
        what: &'static str,
        /// Its length, bytes.
        len: usize,
        /// The room, bytes.
        room: usize,
    },
    /// An external buffer cannot be attached.
    #[error("external buffer: {0}")]
    ExtBuf(String),
}

/// `rte_strerror(errno)` as an owned string (works for system errnos too).
pub(crate) fn errno_text(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a pointer to a static
    // or thread-local NUL-terminated string; it is copied out at once.
    let p = unsafe { dpdk_sys::rte_strerror(errno) };
    if p.is_null() {
        return format!("errno {errno}");
    }
    // SAFETY: non-null, NUL-terminated (see above); copied before any other
    // DPDK call on this thread can overwrite the buffer.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The current thread's `rte_errno`.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: reads a per-thread integer; no preconditions.
    unsafe { dpdk_sys::shim_rte_errno() }
}

/// A [`DpdkError::Call`] for a DPDK call that returned `ret` = `-errno`
/// (the ethdev convention).
pub(crate) fn call_error(call: &'static str, ret: i32) -> DpdkError {
    let errno = ret.saturating_abs();
    DpdkError::Call {
        call,
        errno,
        text: errno_text(errno),
    }
}

/// `Ok(ret)` when `ret >= 0`, else the [`DpdkError::Call`] for `-errno`.
pub(crate) fn check(call: &'static str, ret: i32) -> Result<i32, DpdkError> {
    if ret < 0 {
        Err(call_error(call, ret))
    } else {
        Ok(ret)
    }
}
