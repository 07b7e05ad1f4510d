//! The Linux calls the library makes that `std` does not wrap: eventfd(2)
//! for the completion channels and the async-event fd, and ppoll(2) for the
//! progress thread, which sleeps on the backend's descriptor
//! (`FrameIo::wait_fd`) and the kick eventfd. The library never closes or
//! reads from the backend's descriptor, only polls it, and polls it only
//! while the backend that owns it is alive.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A new eventfd (counter 0, close-on-exec). `semaphore`: every read takes
/// 1 off the counter (`EFD_SEMAPHORE`), so one read is one event;
/// `nonblock`: reads of a zero counter fail with `EAGAIN` instead of waiting.
///
/// # Errors
/// eventfd(2)'s (`EMFILE`, `ENFILE`, `ENOMEM`).
pub fn eventfd(semaphore: bool, nonblock: bool) -> io::Result<OwnedFd> {
    let mut flags = libc::EFD_CLOEXEC;
    if semaphore {
        flags |= libc::EFD_SEMAPHORE;
    }
    if nonblock {
        flags |= libc::EFD_NONBLOCK;
    }
    // SAFETY: eventfd takes two integers and returns a new descriptor or -1;
    // it touches no memory of ours.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd, is open, and nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Wait until one of `fds` is readable or `timeout` passes (ppoll(2), to
/// the nanosecond; a timeout beyond `i64::MAX` seconds waits that long).
/// Returns a bit per descriptor (bit i: `fds[i]` readable or in error); 0
/// on timeout or `EINTR`. At most 8 descriptors.
///
/// # Errors
/// ppoll(2)'s other errors.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<u32> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 8];
    let n = fds.len().min(p.len());
    for (slot, fd) in p.iter_mut().zip(fds) {
        slot.fd = *fd;
        slot.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `p` is a valid array of `n` pollfd structures that ppoll may
    // write `revents` into, and `ts` a valid timespec it only reads; both
    // live across the call. A null signal mask leaves the mask unchanged.
    let rc = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    let mut bits = 0;
    for (i, s) in p[..n].iter().enumerate() {
        if s.revents != 0 {
            bits |= 1 << i;
        }
    }
    Ok(bits)
}

/// The calling thread's CPU affinity (sched_getaffinity(2)).
///
/// # Errors
/// sched_getaffinity(2)'s.
pub fn thread_affinity() -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = the calling thread; the kernel writes at most
    // `size_of::<cpu_set_t>()` bytes into `set`, which lives across the call.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(set)
}

/// Set the calling thread's CPU affinity (sched_setaffinity(2)).
///
/// # Errors
/// sched_setaffinity(2)'s.
pub fn set_thread_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: pid 0 = the calling thread; the kernel reads
    // `size_of::<cpu_set_t>()` bytes of `set`, a valid reference.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Block every asynchronous signal in the calling thread
/// (pthread_sigmask(3)), leaving the synchronous ones a fault raises
/// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) deliverable.
///
/// For a thread the library starts inside an application: a
/// process-directed signal (perftest's `SIGALRM` for `-D`, a `SIGINT`
/// handler) then always runs on one of the application's own threads, as
/// it does under rdma-core, whose providers start none; the application's
/// handlers need not be async-signal-safe against our thread's locks and
/// allocations, and our system calls are not interrupted by them.
///
/// # Errors
/// pthread_sigmask(3)'s.
pub fn block_async_signals() -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t for each call.
    unsafe {
        libc::sigfillset(&mut set);
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut set, s);
        }
    }
    // SAFETY: `set` is initialised above; the old mask is not wanted (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Set the calling thread's timer slack (prctl(2) `PR_SET_TIMERSLACK`), in
/// nanoseconds: how late the kernel may end its sleeps to batch wake-ups
/// (default 50 us).
///
/// # Errors
/// prctl(2)'s.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long by value and touches
    // no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
