//! The few Linux system calls the backends need that neither `std` nor our
//! dependencies wrap. Every `unsafe` block of the `roce-io` crate lives here,
//! each with the reason it is sound.
//!
//! TAP (Linux `Documentation/networking/tuntap.rst`, `<linux/if_tun.h>`):
//! [`tap_attach`] turns an open `/dev/net/tun` descriptor into a TAP
//! interface (`TUNSETIFF` with `IFF_TAP | IFF_NO_PI`) and switches its
//! offloads off (`TUNSETOFFLOAD` 0); [`set_mtu`] and [`set_up`] are the
//! `SIOCSIFMTU` / `SIOCSIFFLAGS` requests of netdevice(7); [`poll_readable`]
//! is poll(2). [`set_pmtudisc_do`] is ip(7)'s `IP_MTU_DISCOVER` (ipv6(7)'s
//! `IPV6_MTU_DISCOVER`) set to "do", which neither `socket2` nor `nix`
//! wraps. [`try_lock_exclusive`] is flock(2). [`mmsg`]: sendmmsg(2) and
//! recvmmsg(2) with UDP GSO/GRO control messages, for the `udp` backend.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

pub mod mmsg;

/// An `ifreq` (netdevice(7)) naming `name`, every other byte zero.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name {name:?}: 1 to {} bytes, no NUL",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    // SAFETY: `ifreq` is a C struct of integers, byte arrays and a union of
    // those and raw pointers; all-zero bytes are a valid value of each (the
    // kernel's own initialisation).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(req)
}

/// The interface name the kernel wrote back into `req`.
fn ifreq_name(req: &libc::ifreq) -> String {
    let bytes: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Turn `fd`, an open `/dev/net/tun`, into the TAP interface `name` (created
/// if it does not exist; a persistent one is attached to) without packet
/// information (`IFF_NO_PI`) and without a virtio-net header, and turn every
/// offload off (`TUNSETOFFLOAD` 0), so the kernel checksums and segments
/// every frame before handing it over and expects whole frames back.
/// Returns the interface's name as the kernel reports it.
///
/// # Errors
/// The `ioctl`'s: `EPERM` without `CAP_NET_ADMIN`, `EBUSY` when the
/// interface is attached to another descriptor, `EINVAL` for a TUN one.
pub fn tap_attach(fd: BorrowedFd<'_>, name: &str) -> io::Result<String> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, and `req` is a
    // valid, exclusively borrowed `ifreq` that outlives the call; `fd` is an
    // open descriptor (a wrong one makes the call fail, not misbehave).
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETIFF,
            &mut req as *mut libc::ifreq,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let none: libc::c_ulong = 0;
    // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of
    // TUN_F_* flags; 0 = none), no memory is passed.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, none) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ifreq_name(&req))
}

/// A datagram socket for the netdevice(7) requests.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2), is open, and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One netdevice(7) request on `req`.
fn if_ioctl(request: libc::Ioctl, req: &mut libc::ifreq) -> io::Result<()> {
    let sock = control_socket()?;
    // SAFETY: the SIOC[GS]IF* requests read and/or write one `struct ifreq`;
    // `req` is valid and exclusively borrowed for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request, req as *mut libc::ifreq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set the MTU (bytes of L3 payload per frame) of interface `name` in the
/// calling thread's network namespace (`SIOCSIFMTU`).
///
/// # Errors
/// `ENODEV` when there is no such interface, `EINVAL` for an MTU the
/// interface (or a bridge it is a port of) does not take, `EPERM`.
pub fn set_mtu(name: &str, mtu: usize) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("MTU {mtu}")))?;
    if_ioctl(libc::SIOCSIFMTU, &mut req)
}

/// Bring interface `name` up (`SIOCGIFFLAGS`, then `SIOCSIFFLAGS` with
/// `IFF_UP` added).
///
/// # Errors
/// As [`set_mtu`].
pub fn set_up(name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    if_ioctl(libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled `ifru_flags`, the union member read here.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    if_ioctl(libc::SIOCSIFFLAGS, &mut req)
}

/// Wait until `fd` is readable or `timeout` passes (poll(2), `POLLIN`).
/// Returns whether it is readable (`false` on timeout or `EINTR`).
///
/// # Errors
/// poll(2)'s other errors.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Round up: a sub-millisecond wait must not become a busy poll.
    let ms = libc::c_int::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid, exclusively borrowed `pollfd` and its count 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
}

/// Set `IP_MTU_DISCOVER` to `IP_PMTUDISC_DO` (IPv4) or
/// `IPV6_MTU_DISCOVER` to `IPV6_PMTUDISC_DO` (`v6`) on socket `fd`: set DF
/// and never fragment locally (ip(7), ipv6(7)). Over IPv4 this is also
/// what makes Linux send identification 0 from an unconnected socket
/// (`ip_select_ident_segs`, see `crate::udp`).
///
/// # Errors
/// setsockopt(2)'s: `ENOPROTOOPT` on a socket of the other family.
pub fn set_pmtudisc_do(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    let (level, name, value) = if v6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    };
    // SAFETY: the option value is one `int`, passed by pointer with its
    // size; `value` lives on the stack for the whole call, and the kernel
    // only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The `IP_MTU_DISCOVER` (or, `v6`, `IPV6_MTU_DISCOVER`) mode of socket
/// `fd` (`IP_PMTUDISC_*`).
///
/// # Errors
/// getsockopt(2)'s.
#[cfg(test)]
pub fn pmtudisc(fd: BorrowedFd<'_>, v6: bool) -> io::Result<i32> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
    };
    let mut value: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes (one `int`) to `value`
    // and the new length to `len`, both valid and exclusively borrowed for
    // the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Take an exclusive advisory lock on `f` without waiting (`flock(2)`
/// `LOCK_EX | LOCK_NB`): `Ok(true)` when taken, `Ok(false)` when another
/// open file description holds it. The lock goes with the descriptor: it
/// is released when the file is closed, also when the process dies.
///
/// # Errors
/// `flock`'s, other than `EWOULDBLOCK`.
pub fn try_lock_exclusive(f: &std::fs::File) -> io::Result<bool> {
    loop {
        // SAFETY: `f` owns an open descriptor for the whole call; flock
        // reads nothing else.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(false),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(ifreq("").is_err());
        assert!(ifreq("a-name-of-16-chr").is_err());
        assert!(ifreq("nul\0").is_err());
        let r = ifreq("roce0").unwrap();
        assert_eq!(ifreq_name(&r), "roce0");
        assert!(ifreq("fifteen-chars-x").is_ok());
    }
}
