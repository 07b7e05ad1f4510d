//! The Environment Abstraction Layer: one per process.
//!
//! DPDK allows `rte_eal_init` once per process; a second call fails (errno
//! 114, `EALREADY`) even after `rte_eal_cleanup`. [`Eal::init`] enforces
//! this with a process-wide flag and says so in its error. Test binaries
//! share one EAL (e.g. through a `OnceLock`) and add ports at run time with
//! [`Eal::probe_vdev`].

use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::{check, errno_text, rte_errno, DpdkError};

/// Set once `rte_eal_init` succeeded; never cleared.
static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// Held while `rte_eal_init` runs, so two threads cannot race into it.
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// Serialises DPDK's control path (probe, configure, start, stop, close,
/// pool creation), parts of which are not thread-safe in DPDK 22.11.
static CONTROL: Mutex<()> = Mutex::new(());

/// The lock that serialises control-path calls.
pub(crate) fn control_lock() -> MutexGuard<'static, ()> {
    CONTROL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `Ok` once the EAL is up, else [`DpdkError::NotInitialized`].
pub(crate) fn ensure_init() -> Result<(), DpdkError> {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(DpdkError::NotInitialized)
    }
}

/// Unregisters the thread's lcore (`rte_thread_unregister`) when the thread
/// that [`ensure_thread_lcore`] registered exits.
struct LcoreRegistration;

impl Drop for LcoreRegistration {
    fn drop(&mut self) {
        // SAFETY: only created on a thread whose rte_thread_register
        // succeeded; runs on that thread at its exit, once.
        unsafe { dpdk_sys::rte_thread_unregister() };
    }
}

thread_local! {
    /// Whether this thread has been looked at: `Some(lcore)` once it has an
    /// lcore id (its own or registered here), `Some(None)` if registration
    /// failed (no free lcore slot), `None` before the first look.
    static THREAD_LCORE: std::cell::Cell<Option<Option<u32>>> = const { std::cell::Cell::new(None) };
    /// Present on threads this module registered; its drop unregisters.
    static REGISTRATION: std::cell::RefCell<Option<LcoreRegistration>> = const { std::cell::RefCell::new(None) };
}

/// Give the calling thread an lcore id if it has none, so that mempool
/// operations on it use the per-lcore cache (DPDK Programmer's Guide,
/// "Mempool Library", "Cache"; without an lcore id every alloc and free is
/// a multi-producer/consumer ring operation with atomics, which cost a
/// threaded `roce perf` client over net_memif about a fifth of its time).
/// A thread the EAL created already has one; any other thread is
/// registered with `rte_thread_register` (DPDK 20.08+) and unregistered
/// when it exits. The first call on a thread does the work; later calls
/// read a thread-local. Returns the lcore id, `None` if every lcore slot is
/// taken (the thread then works uncached, as before).
pub(crate) fn ensure_thread_lcore() -> Option<u32> {
    if let Some(known) = THREAD_LCORE.with(|c| c.get()) {
        return known;
    }
    // SAFETY: reads per-thread state; valid on any thread.
    let id = unsafe { dpdk_sys::shim_rte_lcore_id() };
    let known = if id != u32::MAX {
        Some(id)
    } else if INITIALIZED.load(Ordering::Acquire)
        // SAFETY: the EAL is initialised (checked above); the call
        // registers the calling thread only and fails cleanly (-1,
        // rte_errno) when no lcore slot is free.
        && unsafe { dpdk_sys::rte_thread_register() } == 0
    {
        REGISTRATION.with(|r| *r.borrow_mut() = Some(LcoreRegistration));
        // SAFETY: as above.
        let id = unsafe { dpdk_sys::shim_rte_lcore_id() };
        (id != u32::MAX).then_some(id)
    } else {
        None
    };
    THREAD_LCORE.with(|c| c.set(Some(known)));
    known
}

/// DPDK alarm callback of [`intr_thread_barrier`]: sets the flag it owns a
/// reference to.
unsafe extern "C" fn barrier_cb(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` came from Arc::into_raw in intr_thread_barrier; DPDK
    // calls each alarm once, so the reference is reclaimed exactly once.
    let flag = unsafe { std::sync::Arc::from_raw(arg.cast::<AtomicBool>()) };
    flag.store(true, Ordering::Release);
}

/// Wait until the EAL's interrupt thread has run two full loop iterations
/// after this call (each marked by an alarm callback), so that the work a
/// driver queued for it (e.g. net_memif's deferred teardown of a closed
/// port's control channel, or the peer port's handling of the disconnect)
/// has finished. Without this, a process that exits right after closing a
/// memif port can crash in the interrupt thread while exit handlers run.
/// Gives up silently after `timeout`.
pub(crate) fn intr_thread_barrier(timeout: std::time::Duration) {
    let start = std::time::Instant::now();
    for _ in 0..2 {
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        let arg = std::sync::Arc::into_raw(flag.clone()).cast_mut().cast();
        // SAFETY: EAL up (callers hold a Port); barrier_cb matches the
        // rte_eal_alarm_callback signature and reclaims `arg`.
        let ret = unsafe { dpdk_sys::rte_eal_alarm_set(1, Some(barrier_cb), arg) };
        if ret != 0 {
            // SAFETY: the alarm was not armed, so `arg` is still ours.
            drop(unsafe { std::sync::Arc::from_raw(arg.cast::<AtomicBool>()) });
            return;
        }
        while !flag.load(Ordering::Acquire) {
            if start.elapsed() > timeout {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

/// How DPDK hands memory addresses to devices (`enum rte_iova_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IovaMode {
    /// Let the buses decide (`RTE_IOVA_DC`; never the mode once running).
    DontCare,
    /// Physical addresses (`RTE_IOVA_PA`).
    Pa,
    /// Virtual addresses (`RTE_IOVA_VA`): an IOVA is the process address.
    Va,
}

/// Proof that the process's EAL is running. Cheap to copy; the EAL itself
/// lives until the process exits (see [`Eal::cleanup`]).
#[derive(Debug, Clone, Copy)]
pub struct Eal {
    _private: (),
}

impl Eal {
    /// Initialise the EAL with `args`: EAL options without the program name,
    /// e.g. `["--no-huge", "-m", "128", "--no-pci", "--no-shconf", "-l", "0",
    /// "--vdev=net_ring0"]`. The calling thread becomes the main lcore (and
    /// is pinned to its CPU).
    ///
    /// The argument strings are copied and deliberately leaked: the EAL keeps
    /// pointers into `argv` for the life of the process. With `--no-shconf` or
    /// `--in-memory`, the EAL's empty runtime directory is removed at once.
    ///
    /// Every `--vdev` whose name starts with `net_` or `eth_` must have become
    /// an ethdev port (the EAL only logs a vdev that failed to probe); if one
    /// did not, this returns [`DpdkError::VdevProbe`] although the EAL itself
    /// is up ([`Eal::get`] then returns it).
    ///
    /// # Errors
    /// [`DpdkError::AlreadyInitialized`] on a second call in the process;
    /// [`DpdkError::EalInit`] with `rte_errno` and its text when
    /// `rte_eal_init` fails (e.g. `EACCES` when not root, `ENOMEM` for too
    /// small `-m`); [`DpdkError::InvalidArgument`] for an argument with a NUL.
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        let _guard = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        if INITIALIZED.load(Ordering::Acquire) {
            return Err(DpdkError::AlreadyInitialized);
        }
        let mut owned = Vec::with_capacity(args.len() + 1);
        owned.push(c"dpdk-glue".to_owned());
        for a in args {
            owned.push(
                CString::new(a.as_str()).map_err(|_| DpdkError::InvalidArgument {
                    value: a.clone(),
                    reason: "EAL argument contains a NUL byte",
                })?,
            );
        }
        let argc = c_int::try_from(owned.len()).map_err(|_| DpdkError::InvalidArgument {
            value: format!("{} arguments", owned.len()),
            reason: "too many EAL arguments",
        })?;
        // Leaked on purpose: rte_eal_init keeps pointers into argv and its
        // strings (e.g. the devargs) for the life of the process.
        let owned: &'static [CString] = Box::leak(owned.into_boxed_slice());
        let argv: &'static mut [*mut c_char] = Box::leak(
            owned
                .iter()
                .map(|c| c.as_ptr().cast_mut())
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        // SAFETY: argc/argv describe `argc` valid NUL-terminated strings
        // followed by a NULL, all leaked ('static) as the EAL requires; the
        // EAL may permute argv, which it owns from now on. INIT_LOCK and
        // INITIALIZED make this the only call in the process once it works.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            return Err(DpdkError::EalInit {
                errno,
                text: errno_text(errno),
                args: args.join(" "),
            });
        }
        INITIALIZED.store(true, Ordering::Release);
        let eal = Eal { _private: () };
        if args
            .iter()
            .any(|a| a == "--no-shconf" || a == "--in-memory")
        {
            remove_empty_runtime_dir();
        }
        for devargs in vdev_args(args) {
            let name = device_name(devargs);
            if (name.starts_with("net_") || name.starts_with("eth_"))
                && eal.port_by_name(name).is_err()
            {
                return Err(DpdkError::VdevProbe {
                    name: name.to_string(),
                    devargs: devargs.to_string(),
                    detail: "rte_eal_init succeeded but created no ethdev port with this name"
                        .to_string(),
                });
            }
        }
        Ok(eal)
    }

    /// The running EAL, if [`Eal::init`] succeeded in this process.
    pub fn get() -> Option<Eal> {
        INITIALIZED
            .load(Ordering::Acquire)
            .then_some(Eal { _private: () })
    }

    /// Create a virtual device at run time (`rte_dev_probe`), e.g.
    /// `"net_ring0"`, `"net_memif3,role=server,socket=/tmp/x.sock"`,
    /// `"net_pcap1,rx_pcap=in.pcap,tx_pcap=out.pcap"`, and return the id of
    /// the ethdev port it made (looked up by the device name, the devargs up
    /// to the first comma).
    ///
    /// # Errors
    /// [`DpdkError::VdevProbe`] when the probe fails or made no such port.
    pub fn probe_vdev(&self, devargs: &str) -> Result<u16, DpdkError> {
        let name = device_name(devargs);
        let c = CString::new(devargs).map_err(|_| DpdkError::InvalidArgument {
            value: devargs.to_string(),
            reason: "devargs contain a NUL byte",
        })?;
        let ret = {
            let _g = control_lock();
            // SAFETY: the EAL is up (self proves it); `c` is a valid C string
            // that DPDK copies; the control lock serialises hotplug.
            unsafe { dpdk_sys::rte_dev_probe(c.as_ptr()) }
        };
        if ret < 0 {
            let errno = ret.saturating_abs();
            return Err(DpdkError::VdevProbe {
                name: name.to_string(),
                devargs: devargs.to_string(),
                detail: format!("rte_dev_probe: {} (errno {errno})", errno_text(errno)),
            });
        }
        self.port_by_name(name).map_err(|_| DpdkError::VdevProbe {
            name: name.to_string(),
            devargs: devargs.to_string(),
            detail: "rte_dev_probe succeeded but no ethdev port has this name".to_string(),
        })
    }

    /// Remove a virtual device (`rte_eal_hotplug_remove("vdev", name)`), so
    /// that its name can be probed again. Drop its [`crate::Port`] first.
    ///
    /// # Errors
    /// [`DpdkError::Call`] with DPDK's errno (e.g. `ENOENT` for an unknown name).
    pub fn remove_vdev(&self, name: &str) -> Result<(), DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::InvalidArgument {
            value: name.to_string(),
            reason: "device name contains a NUL byte",
        })?;
        let _g = control_lock();
        // SAFETY: EAL up; both strings are valid C strings DPDK only reads.
        let ret = unsafe { dpdk_sys::rte_eal_hotplug_remove(c"vdev".as_ptr(), c.as_ptr()) };
        check("rte_eal_hotplug_remove", ret).map(|_| ())
    }

    /// The ethdev port named `name` (`rte_eth_dev_get_port_by_name`).
    ///
    /// # Errors
    /// [`DpdkError::NoSuchPort`].
    pub fn port_by_name(&self, name: &str) -> Result<u16, DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::InvalidArgument {
            value: name.to_string(),
            reason: "port name contains a NUL byte",
        })?;
        let mut id: u16 = 0;
        // SAFETY: EAL up; `c` is a valid C string; `id` is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
        if ret == 0 {
            Ok(id)
        } else {
            Err(DpdkError::NoSuchPort(name.to_string()))
        }
    }

    /// Ids of every usable ethdev port, in id order (`RTE_ETH_FOREACH_DEV`).
    pub fn ports(&self) -> Vec<u16> {
        let mut out = Vec::new();
        let mut id: u16 = 0;
        let max = dpdk_sys::RTE_MAX_ETHPORTS as u16;
        loop {
            // SAFETY: EAL up; rte_eth_find_next accepts any id and returns
            // the next valid one >= id, or RTE_MAX_ETHPORTS.
            let next = unsafe { dpdk_sys::rte_eth_find_next(id) };
            if next >= max {
                return out;
            }
            out.push(next);
            id = next + 1;
        }
    }

    /// Like [`Eal::ports`], but at least one is required.
    ///
    /// # Errors
    /// [`DpdkError::NoPorts`] when `rte_eth_dev_count_avail() == 0`.
    pub fn available_ports(&self) -> Result<Vec<u16>, DpdkError> {
        // SAFETY: EAL up; a plain query.
        if unsafe { dpdk_sys::rte_eth_dev_count_avail() } == 0 {
            return Err(DpdkError::NoPorts);
        }
        Ok(self.ports())
    }

    /// The IOVA mode the EAL chose (`rte_eal_iova_mode`).
    pub fn iova_mode(&self) -> IovaMode {
        // SAFETY: EAL up; a plain query.
        match unsafe { dpdk_sys::rte_eal_iova_mode() } {
            dpdk_sys::rte_iova_mode_RTE_IOVA_PA => IovaMode::Pa,
            dpdk_sys::rte_iova_mode_RTE_IOVA_VA => IovaMode::Va,
            _ => IovaMode::DontCare,
        }
    }

    /// NUMA socket of the calling thread (`rte_socket_id`).
    pub fn socket_id(&self) -> u32 {
        // SAFETY: reads per-thread state; valid on any thread.
        unsafe { dpdk_sys::shim_rte_socket_id() }
    }

    /// The calling thread's lcore id, `None` on a thread the EAL did not
    /// create or register (`rte_lcore_id() == LCORE_ID_ANY`).
    pub fn lcore_id(&self) -> Option<u32> {
        // SAFETY: reads per-thread state; valid on any thread.
        let id = unsafe { dpdk_sys::shim_rte_lcore_id() };
        (id != u32::MAX).then_some(id)
    }

    /// Give the calling thread an lcore id if it has none
    /// (`rte_thread_register`; unregistered when the thread exits), so that
    /// its mempool operations use the per-lcore cache. [`crate::DpdkPort`]
    /// does this itself on the thread that polls it. Returns the lcore id,
    /// `None` if no lcore slot is free (`RTE_MAX_LCORE` reached).
    pub fn register_thread(&self) -> Option<u32> {
        ensure_thread_lcore()
    }

    /// Release the EAL's resources (`rte_eal_cleanup`). The EAL cannot be
    /// initialised again afterwards.
    ///
    /// # Safety
    /// No DPDK object may be used after this call: every [`crate::Port`],
    /// [`crate::Mempool`] and [`crate::Mbuf`] must have been dropped, and no
    /// other thread may call into DPDK. (With two `net_memif` ends in one
    /// process DPDK 22.11 has been seen to crash here; skip cleanup there.)
    pub unsafe fn cleanup(self) -> Result<(), DpdkError> {
        let _g = control_lock();
        // SAFETY: the caller guarantees nothing uses DPDK any more.
        let ret = unsafe { dpdk_sys::rte_eal_cleanup() };
        check("rte_eal_cleanup", ret).map(|_| ())
    }
}

/// Remove the EAL's runtime directory (`/var/run/dpdk/<file-prefix>`) if it
/// is empty, as it stays with `--no-shconf`/`--in-memory`: otherwise every
/// process with a unique file prefix leaves one behind.
fn remove_empty_runtime_dir() {
    // SAFETY: EAL up; returns a pointer to a static NUL-terminated string.
    let p = unsafe { dpdk_sys::rte_eal_get_runtime_dir() };
    if p.is_null() {
        return;
    }
    // SAFETY: non-null, NUL-terminated, static (see above).
    let dir = unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned();
    // remove_dir refuses a non-empty directory, so nothing in use is lost.
    let _ = std::fs::remove_dir(dir);
}

/// The devargs of every `--vdev=X` / `--vdev X` in `args`.
fn vdev_args(args: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--vdev=") {
            out.push(v);
        } else if a == "--vdev" {
            if let Some(v) = it.next() {
                out.push(v.as_str());
            }
        }
    }
    out
}

/// The device name of `devargs`: everything before the first comma.
pub(crate) fn device_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or(devargs).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdev_arguments_are_found_in_both_spellings() {
        let args: Vec<String> = [
            "--no-pci",
            "--vdev=net_ring0",
            "--vdev",
            "net_tap0,iface=x",
            "-l",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(vdev_args(&args), ["net_ring0", "net_tap0,iface=x"]);
        assert_eq!(device_name("net_tap0,iface=x"), "net_tap0");
        assert_eq!(device_name("net_ring0"), "net_ring0");
    }

    #[test]
    fn objects_need_an_eal() {
        // No test in this binary initialises the EAL.
        assert_eq!(ensure_init(), Err(DpdkError::NotInitialized));
        assert!(Eal::get().is_none());
    }
}
