//! The sockets of the `udp` backend ([`UdpIo`]'s set-up, receive and send
//! paths, the raw socket's filter) and [`open`]; what goes on the wire is
//! in the parent module.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{self as nsock, sockopt, MsgFlags};
use roce_stack::wire::UdpPacket;
use socket2::{Domain, Protocol, SockAddr, SockFilter, Socket, Type};

use super::batch::Batch;
use super::wire::{frame_raw, header_len, locate_ipv4};
use super::{Routes, UdpConfig, UdpIo, UdpStats, ETH_LEN, IPV4_LEN, MAX_PAYLOAD, SOCKET_BUFFER};
use crate::open::{BackendError, BackendOptions, Opened};
use crate::sys::mmsg;

/// Classic BPF (`<linux/filter.h>`) opcodes of the socket filters.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_ALU_MOD_K: u16 = 0x94;
const BPF_RET_A: u16 = 0x16;
const BPF_LDX_B_MSH: u16 = 0xb1;
const BPF_LD_H_IND: u16 = 0x48;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;

/// One classic-BPF instruction: `(code, jt, jf, k)` (`struct sock_filter`).
type Bpf = (u16, u8, u8, u32);

/// The raw socket's filter (it sees each packet from its IPv4 header):
/// keep UDP packets to `ip:port`, drop the rest.
fn raw_filter(ip: Ipv4Addr, port: u16) -> [Bpf; 7] {
    [
        (BPF_LD_W_ABS, 0, 0, 16), // A = destination address
        (BPF_JEQ_K, 0, 4, u32::from(ip)),
        (BPF_LDX_B_MSH, 0, 0, 0), // X = 4 * IHL
        (BPF_LD_H_IND, 0, 0, 2),  // A = UDP destination port
        (BPF_JEQ_K, 0, 1, u32::from(port)),
        (BPF_RET_K, 0, 0, 0x0004_0000), // keep the whole packet
        (BPF_RET_K, 0, 0, 0),           // drop
    ]
}

/// The `SO_REUSEPORT` selector of [`UdpConfig::shard`] (it sees each
/// datagram from its UDP payload, the BTH): the index of the group's
/// socket = the destination QP (BTH bytes 5-7, IBTA 1.7 §9.2) modulo
/// `count`, [`super::Shard::of_qpn`]. A datagram too short for a BTH ends
/// the program, which then returns 0 (shard 0, whose device drops it).
fn shard_selector(count: u16) -> [Bpf; 4] {
    [
        (BPF_LD_W_ABS, 0, 0, 4),            // A = BTH bytes 4-7
        (BPF_ALU_AND_K, 0, 0, 0x00FF_FFFF), // A = DestQP
        (BPF_ALU_MOD_K, 0, 0, u32::from(count.max(1))),
        (BPF_RET_A, 0, 0, 0),
    ]
}

/// Attach `prog` to `sock` (`SO_ATTACH_FILTER`).
fn attach(sock: &Socket, prog: &[Bpf]) -> io::Result<()> {
    let f: Vec<SockFilter> = prog
        .iter()
        .map(|&(code, jt, jf, k)| SockFilter::new(code, jt, jf, k))
        .collect();
    sock.attach_filter(&f)
}

impl UdpIo {
    /// Create, configure and bind the socket(s) (non-blocking).
    ///
    /// # Errors
    /// An unspecified bind address, raw mode over IPv6, or the socket
    /// calls' errors (e.g. `EADDRINUSE`; raw mode without `CAP_NET_RAW`:
    /// `EPERM`).
    pub fn bind(cfg: UdpConfig) -> io::Result<UdpIo> {
        if cfg.bind.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the UDP backend binds one address (the device's GID), not 0.0.0.0 or ::",
            ));
        }
        let v6 = cfg.bind.is_ipv6();
        if cfg.raw && cfg.shard.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shards are a datagram-mode feature (raw sockets see every packet)",
            ));
        }
        if v6 && cfg.raw {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "raw mode is IPv4 only (IPv6 datagrams are exact without it)",
            ));
        }
        let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if v6 {
            sock.set_only_v6(true)?;
            sock.set_recv_tclass_v6(true)?;
            nsock::setsockopt(&sock, sockopt::Ipv6RecvHopLimit, &true).map_err(io::Error::from)?;
        } else {
            sock.set_recv_tos_v4(true)?;
            nsock::setsockopt(&sock, sockopt::Ipv4RecvTtl, &true).map_err(io::Error::from)?;
        }
        // Identification 0 with DF, and no local fragmentation (module docs).
        crate::sys::set_pmtudisc_do(sock.as_fd(), v6)?;
        let raw = if cfg.raw {
            // Reserve the port; deliver nothing to this socket.
            attach(&sock, &[(BPF_RET_K, 0, 0, 0)])?;
            let r = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP))?;
            r.set_header_included_v4(true)?;
            Some(r)
        } else {
            None
        };
        for s in std::iter::once(&sock).chain(raw.as_ref()) {
            s.set_recv_buffer_size(SOCKET_BUFFER)?;
            s.set_send_buffer_size(SOCKET_BUFFER)?;
            // Above net.core.{r,w}mem_max only a privileged process gets
            // the size asked for; try, and live with the capped size
            // otherwise.
            let _ = nsock::setsockopt(s, sockopt::RcvBufForce, &SOCKET_BUFFER);
            let _ = nsock::setsockopt(s, sockopt::SndBufForce, &SOCKET_BUFFER);
            s.set_nonblocking(true)?;
        }
        if cfg.shard.is_some() {
            sock.set_reuse_port(true)?;
        }
        sock.bind(&SockAddr::from(cfg.bind))?;
        if let Some(sh) = cfg.shard.filter(|s| s.index == 0) {
            mmsg::attach_reuseport_cbpf(sock.as_fd(), &shard_selector(sh.count))?;
        }
        let local = sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("the socket has no IP address"))?;
        if let (Some(r), IpAddr::V4(ip)) = (&raw, local.ip()) {
            attach(r, &raw_filter(ip, local.port()))?;
        }
        let hl = header_len(v6);
        // Batching offloads (datagram mode): GSO where asked for and the
        // kernel has it, GRO where asked for.
        let gso = !cfg.raw && cfg.gso && mmsg::udp_gso_supported(sock.as_fd());
        if !cfg.raw && cfg.gro && cfg.shard.is_none() {
            mmsg::enable_udp_gro(sock.as_fd());
        }
        let (rx_buf, tx_buf) = if cfg.raw {
            (vec![0u8; hl + MAX_PAYLOAD], vec![0u8; hl + 4 + MAX_PAYLOAD])
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(UdpIo {
            sock,
            raw,
            local,
            v6,
            mac: cfg.mac,
            peer_port: cfg.peer_port,
            ident_recovery: cfg.ident_recovery,
            route_gen: u64::MAX,
            routes: cfg.routes,
            route_cache: Vec::new(),
            gso,
            batch: Box::new(Batch::new(v6, cfg.raw)),
            rx_buf,
            tx_buf,
            tos: None,
            ttl: None,
            stats: UdpStats::default(),
        })
    }

    /// The bound address (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether this is raw mode.
    pub fn is_raw(&self) -> bool {
        self.raw.is_some()
    }

    /// The route table handle.
    pub fn routes(&self) -> Routes {
        self.routes.clone()
    }

    /// What was counted.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Whether transmit bursts use UDP GSO ([`UdpConfig::gso`], and the
    /// kernel has it; turned off for good if a send says the path cannot).
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// The socket address frames for `ip` go to.
    pub(super) fn dest(&mut self, ip: IpAddr) -> SocketAddr {
        let g = self.routes.generation();
        if g != self.route_gen {
            self.route_cache = self.routes.snapshot();
            self.route_gen = g;
        }
        self.route_cache
            .iter()
            .find(|(i, _)| *i == ip)
            .map_or(SocketAddr::new(ip, self.peer_port), |(_, a)| *a)
    }

    /// Raw mode: receive one IPv4 packet after room for the Ethernet
    /// header and write that header.
    pub(super) fn recv_raw(&mut self) -> io::Result<Option<usize>> {
        let Some(raw) = &self.raw else {
            return Ok(None);
        };
        let r = nsock::recv(
            raw.as_raw_fd(),
            &mut self.rx_buf[ETH_LEN..],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
        );
        let n = match r {
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(nix::errno::Errno::EINTR) => return Ok(Some(0)),
            Err(e) => return Err(e.into()),
        };
        let IpAddr::V4(local) = self.local.ip() else {
            return Ok(Some(0));
        };
        let port = self.local.port();
        let Some(len) = frame_raw(&mut self.rx_buf, n, local, port, self.mac) else {
            self.stats.rx_dropped += 1;
            return Ok(Some(0));
        };
        self.stats.rx_datagrams += 1;
        Ok(Some(len))
    }

    /// Set the socket's TOS / traffic class and TTL / hop limit to a
    /// frame's (when they differ from what was set; TTL 0 is left alone).
    pub(super) fn set_tos_ttl(&mut self, tos: u8, ttl: u8) -> io::Result<()> {
        if self.tos != Some(tos) {
            if self.v6 {
                self.sock.set_tclass_v6(u32::from(tos))?;
            } else {
                self.sock.set_tos_v4(u32::from(tos))?;
            }
            self.tos = Some(tos);
        }
        if self.ttl != Some(ttl) && ttl != 0 {
            if self.v6 {
                self.sock.set_unicast_hops_v6(u32::from(ttl))?;
            } else {
                self.sock.set_ttl_v4(u32::from(ttl))?;
            }
            self.ttl = Some(ttl);
        }
        Ok(())
    }

    /// Raw mode: send the frame's IPv4 packet as it is, but for the
    /// destination port of a peer on another port than 4791.
    pub(super) fn send_raw(&mut self, len: usize) -> io::Result<()> {
        let Some((l3, end, dst)) = locate_ipv4(&self.tx_buf[..len]) else {
            self.stats.tx_not_udp += 1;
            return Ok(());
        };
        let to = self.dest(IpAddr::V4(dst));
        UdpPacket::new_unchecked(&mut self.tx_buf[l3 + IPV4_LEN..end]).set_dst_port(to.port());
        let Some(raw) = &self.raw else {
            return Ok(());
        };
        let r = raw.send_to(
            &self.tx_buf[l3..end],
            &SockAddr::from(SocketAddr::new(IpAddr::V4(dst), 0)),
        );
        self.sent(r)
    }

    /// Count a `sendto`'s outcome.
    fn sent(&mut self, r: io::Result<usize>) -> io::Result<()> {
        match r {
            Ok(_) => {
                self.stats.tx_datagrams += 1;
                Ok(())
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(nix::libc::EMSGSIZE)
                        | Some(nix::libc::ENOBUFS)
                        | Some(nix::libc::ECONNREFUSED)
                        | Some(nix::libc::EHOSTUNREACH)
                        | Some(nix::libc::ENETUNREACH)
                ) || e.kind() == io::ErrorKind::WouldBlock =>
            {
                // A lost datagram, as on a congested or broken link: RC
                // recovers.
                self.stats.tx_errors += 1;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Open the `udp` backend for a process-to-process run: bind
/// `o.local_ip:o.udp_port`, raw mode if `o.udp_raw`, identification
/// recovery unless `o.udp_no_ident_recovery`, UDP GSO unless
/// `o.udp_no_gso`.
///
/// # Errors
/// No local IP given, or the socket's errors.
pub fn open(o: &BackendOptions) -> Result<Opened, BackendError> {
    let ip = o
        .local_ip
        .ok_or_else(|| BackendError::msg("the udp backend needs a local IP address"))?;
    let mut cfg = UdpConfig::new(SocketAddr::new(ip, o.udp_port));
    if let Some(m) = o.mac {
        cfg.mac = m;
    }
    cfg.raw = o.udp_raw;
    cfg.ident_recovery = !o.udp_no_ident_recovery;
    cfg.gso = !o.udp_no_gso;
    let io = UdpIo::bind(cfg.clone()).map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::AddrInUse {
            " (is another `roce` or the kernel's rdma_rxe on it? choose another with --udp-port)"
        } else if cfg.raw && e.kind() == io::ErrorKind::PermissionDenied {
            " (raw mode needs CAP_NET_RAW: run as root, or drop --udp-raw)"
        } else {
            ""
        };
        BackendError::msg(format!("udp: bind {}: {e}{hint}", cfg.bind))
    })?;
    let udp = io.local_addr();
    let routes = io.routes();
    Ok(Opened {
        io: crate::AnyIo::new(io),
        ip,
        mac: cfg.mac,
        udp: Some(udp),
        routes: Some(routes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sockets ask for path MTU discovery "do" (ip(7)): what makes
    /// Linux send identification 0 with DF (checked on the wire by
    /// tests/udp_wire.rs).
    #[test]
    fn sockets_set_pmtudisc_do() {
        for (bind, v6) in [("127.0.0.1:0", false), ("[::1]:0", true)] {
            let Ok(io) = UdpIo::bind(UdpConfig::new(bind.parse().unwrap())) else {
                eprintln!("cannot bind {bind}: skipped");
                continue;
            };
            let want = if v6 {
                nix::libc::IPV6_PMTUDISC_DO
            } else {
                nix::libc::IP_PMTUDISC_DO
            };
            assert_eq!(crate::sys::pmtudisc(io.sock.as_fd(), v6).unwrap(), want);
        }
        let e = UdpIo::bind(UdpConfig {
            raw: true,
            ..UdpConfig::new("[::1]:0".parse().unwrap())
        })
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// The raw socket's filter, run by a classic-BPF interpreter written
    /// from the opcode definitions of `<linux/filter.h>`.
    #[test]
    fn raw_filter_keeps_only_our_address_and_port() {
        fn run(prog: &[Bpf], pkt: &[u8]) -> u32 {
            let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
            loop {
                let (code, jt, jf, k) = prog[pc];
                let (jt, jf) = (usize::from(jt), usize::from(jf));
                let at = |o: usize, w: usize| -> u32 {
                    pkt.get(o..o + w)
                        .map_or(0, |b| b.iter().fold(0, |v, &x| v << 8 | u32::from(x)))
                };
                pc += 1;
                match code {
                    0x20 => a = at(k as usize, 4),
                    0xb1 => x = 4 * (at(k as usize, 1) & 0xf),
                    0x48 => a = at((x + k) as usize, 2),
                    0x54 => a &= k,
                    0x94 => a %= k,
                    0x16 => return a,
                    0x15 => pc += if a == k { jt } else { jf },
                    0x06 => return k,
                    c => panic!("opcode {c:#x}"),
                }
            }
        }
        let f = raw_filter(Ipv4Addr::new(10, 0, 0, 2), 4791);
        let mut pkt = [0u8; 28];
        pkt[0] = 0x45;
        pkt[16..20].copy_from_slice(&[10, 0, 0, 2]);
        pkt[22..24].copy_from_slice(&4791u16.to_be_bytes());
        assert_ne!(run(&f, &pkt), 0);
        pkt[23] ^= 1;
        assert_eq!(run(&f, &pkt), 0);
        pkt[23] ^= 1;
        pkt[19] = 3;
        assert_eq!(run(&f, &pkt), 0);
        // The shard selector over a BTH (RC WRITE ONLY to QP 0x012345).
        let bth = [0x0a, 0x40, 0xff, 0xff, 0x80, 0x01, 0x23, 0x45, 0, 0, 0, 7];
        for count in [1u16, 2, 3, 8] {
            assert_eq!(
                run(&shard_selector(count), &bth),
                u32::from(super::super::Shard::of_qpn(0x012345, count)),
                "count {count}"
            );
        }
        assert_eq!(0x012345 % 8, 5);
    }
}
