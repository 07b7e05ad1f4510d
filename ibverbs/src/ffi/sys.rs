//! The Linux calls the library makes that `std` does not wrap: eventfd(2)
//! for the completion channels and the async-event fd, poll(2) for the
//! progress thread, and the two look-ups that find the descriptor a
//! backend reads from (getsockname(2), `TUNGETIFF`), so that the progress
//! thread can sleep on it.
//!
//! The backends in the `roce` crate do not expose their descriptors yet;
//! until they do, the descriptor is found among the process's own
//! (`/proc/self/fd`) by what it is bound to. The library never closes or
//! reads from such a descriptor, only polls it, and polls it only while the
//! backend that owns it is alive.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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

/// Wait until one of `fds` is readable or `timeout` passes (poll(2); a
/// timeout above `i32::MAX` ms waits that long). Returns a bit per
/// descriptor (bit i: `fds[i]` readable or in error); 0 on timeout or
/// `EINTR`. At most 8 descriptors.
///
/// # Errors
/// poll(2)'s other errors.
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
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // Round a sub-millisecond wait up: poll(2) counts whole milliseconds.
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    // SAFETY: `p` is a valid array of `n` pollfd structures that poll may
    // write `revents` into; it lives across the call.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
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

/// The process's open descriptors.
fn own_fds() -> Vec<RawFd> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The local address of socket `fd` (getsockname(2)), if it is an IP one.
fn sockname(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain integers; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` is writable for `len` bytes, `len` is a valid pointer;
    // on a descriptor that is not a socket the call fails with ENOTSOCK and
    // writes nothing.
    let rc = unsafe {
        libc::getsockname(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which
            // it is large and aligned enough for.
            let a = unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a =
                unsafe { &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                u16::from_be(a.sin6_port),
            ))
        }
        _ => None,
    }
}

/// Whether socket `fd` is a datagram socket (`SO_TYPE`).
fn is_dgram(fd: RawFd) -> bool {
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` is writable for `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && ty == libc::SOCK_DGRAM
}

/// The descriptor of the UDP socket bound to `local` (the `udp` backend's).
pub fn find_udp_socket(local: SocketAddr) -> Option<RawFd> {
    own_fds().into_iter().find(|&fd| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            && sockname(fd) == Some(local)
            && is_dgram(fd)
    })
}

/// The `/dev/net/tun` descriptor attached to interface `name` (the `tap`
/// backend's), found with `TUNGETIFF`.
pub fn find_tap_fd(name: &str) -> Option<RawFd> {
    own_fds().into_iter().find(|&fd| {
        if !std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|l| l.as_os_str() == "/dev/net/tun")
        {
            return false;
        }
        // SAFETY: ifreq is integers, byte arrays and a union of those; all
        // zero is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        // TUNGETIFF = _IOR('T', 210, unsigned int).
        const TUNGETIFF: libc::c_ulong = 0x8004_54d2;
        // SAFETY: TUNGETIFF writes at most one `struct ifreq` into `req`,
        // which is writable and lives across the call; on a descriptor not
        // attached to an interface it fails and writes nothing.
        let rc = unsafe { libc::ioctl(fd, TUNGETIFF, &mut req as *mut libc::ifreq) };
        if rc != 0 {
            return false;
        }
        let got: Vec<u8> = req
            .ifr_name
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        got == name.as_bytes()
    })
}
