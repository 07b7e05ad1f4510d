//! Batched datagram I/O for the `udp` backend: sendmmsg(2) and recvmmsg(2)
//! with the control messages of UDP segmentation offload (udp(7),
//! Linux 4.18+: `UDP_SEGMENT`, a `u16` segment size on send) and UDP GRO
//! (Linux 5.0+: `UDP_GRO` on a socket makes the kernel hand several
//! datagrams of one flow in one buffer, with their segment size as an `int`
//! control message), and the per-datagram `IP_TOS` / `IP_TTL` /
//! `IPV6_TCLASS` / `IPV6_HOPLIMIT` control messages of ip(7) and ipv6(7).
//!
//! The raw `mmsghdr`/`iovec` arrays live in a reusable [`Mmsg`] and are
//! rebuilt from safe descriptions (ranges of a buffer, socket addresses) on
//! every call, so nothing that points into a caller's buffer outlives the
//! call.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

/// Most segments one UDP GSO send may carry (`UDP_MAX_SEGMENTS`,
/// include/linux/udp.h).
pub const UDP_MAX_SEGMENTS: usize = 64;

/// Bytes of control-message space per datagram: room for three `int`
/// messages (`CMSG_SPACE(4)` is 16 on LP64).
const CMSG_ROOM: usize = 64;

/// One datagram of a [`Mmsg::send`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxMsg {
    /// Where it goes.
    pub to: SocketAddr,
    /// Its payload: the buffer ranges `segs[first..first + count]` of the
    /// call, in order.
    pub first: usize,
    /// How many ranges.
    pub count: usize,
    /// `> 0`: ask the kernel to cut the payload into datagrams of this many
    /// bytes (the last may be shorter), `UDP_SEGMENT`; 0: one datagram.
    pub segment: u16,
}

/// What [`Mmsg::recv`] learnt about one datagram (or GRO batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Bytes received.
    pub len: usize,
    /// The kernel cut it short (`MSG_TRUNC`): the buffer was too small.
    pub truncated: bool,
    /// The sender's address, `None` if the kernel gave none we read.
    pub from: Option<SocketAddr>,
    /// The TOS / traffic class byte it arrived with (`IP_TOS`,
    /// `IPV6_TCLASS`); 0 when not reported.
    pub tos: u8,
    /// The TTL / hop limit it arrived with (`IP_TTL`, `IPV6_HOPLIMIT`).
    pub ttl: Option<u8>,
    /// GRO: the buffer holds datagrams of this many bytes each, the last
    /// one possibly shorter (`UDP_GRO` control message); 0 when not
    /// reported (one datagram).
    pub segment: usize,
}

/// The scratch arrays of [`Mmsg::send`] and [`Mmsg::recv`], kept between
/// calls so a burst does not allocate.
#[derive(Default)]
pub struct Mmsg {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    /// `u64` so every datagram's control space is aligned for `cmsghdr`.
    cmsg: Vec<u64>,
    /// What the last [`Mmsg::recv`] received, one entry per datagram.
    pub meta: Vec<RxMeta>,
}

impl std::fmt::Debug for Mmsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mmsg").field("meta", &self.meta).finish()
    }
}

// SAFETY: the raw pointers in `hdrs` and `iovs` are written and used only
// inside `send`/`recv`, which rebuild them from borrowed arguments on every
// call; between calls they are never read, so moving the scratch to
// another thread shares nothing.
unsafe impl Send for Mmsg {}

/// The `sockaddr_in`/`sockaddr_in6` of `a`, and its length.
fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: `sockaddr_storage` is a C struct of integers; all-zero bytes
    // are a valid value (and the kernel's own initialisation).
    let mut st: libc::sockaddr_storage = unsafe { zeroed() };
    let p = (&mut st as *mut libc::sockaddr_storage).cast::<u8>();
    let len = match a {
        SocketAddr::V4(a) => {
            // SAFETY: `sockaddr_storage` is at least as large and as aligned
            // as `sockaddr_in` (its purpose, socket(7)), and `p` is its
            // start, exclusively borrowed.
            let sin = unsafe { &mut *p.cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for `sockaddr_in6`.
            let sin6 = unsafe { &mut *p.cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo().to_be();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// The address in `st` (as recvmmsg(2) wrote it, `len` bytes), if IPv4 or
/// IPv6.
fn socket_addr(st: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    let p = (st as *const libc::sockaddr_storage).cast::<u8>();
    match i32::from(st.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the kernel wrote a `sockaddr_in`, and
            // the storage is large and aligned enough for one.
            let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for `sockaddr_in6`.
            let s6 = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(s6.sin6_addr.s6_addr);
            let port = u16::from_be(s6.sin6_port);
            let a = SocketAddrV6::new(ip, port, u32::from_be(s6.sin6_flowinfo), s6.sin6_scope_id);
            Some(a.into())
        }
        _ => None,
    }
}

impl Mmsg {
    /// Make room for `n` datagrams: zeroed headers, names and control
    /// space; no iovecs.
    fn reset(&mut self, n: usize) {
        self.hdrs.clear();
        // SAFETY: `mmsghdr` is a C struct of integers and raw pointers;
        // all-zero bytes (null pointers, zero lengths) are a valid value.
        self.hdrs.resize_with(n, || unsafe { zeroed() });
        self.names.clear();
        // SAFETY: `sockaddr_storage` is a C struct of integers.
        self.names.resize_with(n, || unsafe { zeroed() });
        self.cmsg.clear();
        self.cmsg.resize(n * CMSG_ROOM / 8, 0);
        self.iovs.clear();
    }

    /// Send `msgs` with sendmmsg(2) (called again while the kernel takes
    /// some but not all), their payloads taken from `buf` at the ranges
    /// `segs`. Returns how many of `msgs` the kernel took: a datagram it
    /// refuses stops the call there, and is an `Err` when it is the first.
    ///
    /// # Errors
    /// sendmmsg(2)'s for the first datagram (e.g. `EMSGSIZE`, `EAGAIN`);
    /// `EINVAL` for a range outside `buf` or `segs`.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: &[u8],
        segs: &[(usize, usize)],
        msgs: &[TxMsg],
    ) -> io::Result<usize> {
        let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
        self.reset(msgs.len());
        for &(start, end) in segs {
            let s = buf.get(start..end).ok_or_else(invalid)?;
            self.iovs.push(libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            });
        }
        let cmsg_base = self.cmsg.as_mut_ptr().cast::<u8>();
        for (i, m) in msgs.iter().enumerate() {
            let end = m.first.checked_add(m.count).ok_or_else(invalid)?;
            let iov = self.iovs.get_mut(m.first..end).ok_or_else(invalid)?;
            let (name, namelen) = sockaddr(m.to);
            self.names[i] = name;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = iov.as_mut_ptr();
            h.msg_iovlen = iov.len() as _;
            if m.segment > 0 {
                // SAFETY: datagram `i`'s control space is `CMSG_ROOM` bytes
                // at `cmsg_base + i * CMSG_ROOM`, inside `self.cmsg` (sized
                // by `reset`), 8-aligned; CMSG_SPACE(2) = 16 fits. With the
                // control length set, CMSG_FIRSTHDR returns that space's
                // start and CMSG_DATA its first data byte, both inside it.
                unsafe {
                    h.msg_control = cmsg_base.add(i * CMSG_ROOM).cast();
                    h.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as _;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    libc::CMSG_DATA(c).cast::<u16>().write_unaligned(m.segment);
                }
            }
        }
        let mut done = 0;
        while done < msgs.len() {
            let rest = &mut self.hdrs[done..];
            // SAFETY: `rest` is a valid array of `rest.len()` headers whose
            // names, iovecs and control spaces point into `self` and `buf`,
            // all borrowed for the whole call; the kernel only reads them
            // (and writes `msg_len`).
            let rc = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    rest.as_mut_ptr(),
                    rest.len().min(1024) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if done == 0 {
                    return Err(e);
                }
                break;
            }
            if rc == 0 {
                break;
            }
            done += rc as usize;
        }
        Ok(done)
    }

    /// Receive up to `n` datagrams with one recvmmsg(2) (never waiting):
    /// datagram `i` into `arena[i * slot + room..(i + 1) * slot]`, what was
    /// learnt about it into `self.meta[i]`. Returns how many arrived (0
    /// when none is waiting, or on `EINTR`).
    ///
    /// # Errors
    /// recvmmsg(2)'s other than `EAGAIN` and `EINTR`; `EINVAL` when `n`
    /// slots do not fit in `arena` or `room >= slot`.
    pub fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        arena: &mut [u8],
        slot: usize,
        room: usize,
        n: usize,
    ) -> io::Result<usize> {
        self.meta.clear();
        if room >= slot || !n.checked_mul(slot).is_some_and(|b| b <= arena.len()) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.reset(n);
        for chunk in arena.chunks_exact_mut(slot).take(n) {
            let s = &mut chunk[room..];
            self.iovs.push(libc::iovec {
                iov_base: s.as_mut_ptr().cast(),
                iov_len: s.len(),
            });
        }
        let cmsg_base = self.cmsg.as_mut_ptr().cast::<u8>();
        for i in 0..n {
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            // SAFETY: `CMSG_ROOM` bytes at this offset lie inside
            // `self.cmsg` (sized by `reset` for `n` datagrams).
            h.msg_control = unsafe { cmsg_base.add(i * CMSG_ROOM) }.cast();
            h.msg_controllen = CMSG_ROOM as _;
        }
        // SAFETY: `n` valid headers whose names, iovecs (each inside its own
        // slot of `arena`) and control spaces are exclusively borrowed for
        // the call; the kernel writes at most their given lengths.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for i in 0..rc as usize {
            let m = &self.hdrs[i];
            let mut meta = RxMeta {
                len: m.msg_len as usize,
                truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                from: socket_addr(&self.names[i], m.msg_hdr.msg_namelen),
                tos: 0,
                ttl: None,
                segment: 0,
            };
            // SAFETY: the kernel set `msg_controllen` to the bytes of
            // control messages it wrote into this datagram's control space;
            // CMSG_FIRSTHDR/CMSG_NXTHDR walk only within that length and
            // return null at its end, and each message's data is read
            // unaligned, no longer than its `cmsg_len` says.
            unsafe {
                let h = &m.msg_hdr;
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    let dlen = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                    let int = || (dlen >= 4).then(|| data.cast::<libc::c_int>().read_unaligned());
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (libc::IPPROTO_IP, libc::IP_TOS) if dlen >= 1 => meta.tos = data.read(),
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                            meta.tos = int().unwrap_or(0) as u8;
                        }
                        (libc::IPPROTO_IP, libc::IP_TTL)
                        | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                            meta.ttl = int().map(|t| t as u8);
                        }
                        (libc::SOL_UDP, libc::UDP_GRO) => {
                            meta.segment = int().map_or(0, |s| s.max(0) as usize);
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            self.meta.push(meta);
        }
        Ok(rc as usize)
    }
}

/// Set an `int` socket option (setsockopt(2)).
///
/// # Errors
/// setsockopt(2)'s: `ENOPROTOOPT` for an option the kernel does not know.
pub fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the option value is one `int`, passed by pointer with its
    // size; `value` lives on the stack for the whole call, and the kernel
    // only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the kernel does UDP segmentation offload on `fd`: it knows
/// `UDP_SEGMENT` (setting the socket's default segment size to 0, none,
/// succeeds; Linux 4.18+).
pub fn udp_gso_supported(fd: BorrowedFd<'_>) -> bool {
    set_int_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT, 0).is_ok()
}

/// Ask for UDP GRO on `fd` (`UDP_GRO` = 1, Linux 5.0+). Returns whether
/// the kernel took it.
pub fn enable_udp_gro(fd: BorrowedFd<'_>) -> bool {
    set_int_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// `SO_ATTACH_REUSEPORT_CBPF`: 51 in include/uapi/asm-generic/socket.h
/// (x86, ARM, RISC-V, PowerPC; Alpha, MIPS, PA-RISC and SPARC number their
/// socket options otherwise). The `libc` crate defines it for Android only.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attach the classic-BPF program `prog` (`(code, jt, jf, k)` per
/// instruction, `struct sock_filter`) as the `SO_REUSEPORT` group's socket
/// selector (`SO_ATTACH_REUSEPORT_CBPF`, socket(7), Linux 4.5+): for each
/// datagram the program runs over the UDP payload and returns the index,
/// in bind order, of the group's socket that receives it (an index past
/// the group falls back to the kernel's hash).
///
/// # Errors
/// setsockopt(2)'s: `EINVAL` for a socket without `SO_REUSEPORT` or a
/// program the kernel rejects.
pub fn attach_reuseport_cbpf(fd: BorrowedFd<'_>, prog: &[(u16, u8, u8, u32)]) -> io::Result<()> {
    let mut f: Vec<libc::sock_filter> = prog
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    let fprog = libc::sock_fprog {
        len: u16::try_from(f.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        filter: f.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `f`'s `len` instructions, both alive for
    // the whole call; the kernel copies the program and keeps no pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip() {
        for a in ["10.1.2.3:4791", "[fd00::5e:1]:49152"] {
            let a: SocketAddr = a.parse().unwrap();
            let (st, len) = sockaddr(a);
            assert_eq!(socket_addr(&st, len), Some(a));
        }
        let (st, _) = sockaddr("10.1.2.3:1".parse().unwrap());
        assert_eq!(socket_addr(&st, 4), None, "short length");
    }
}
