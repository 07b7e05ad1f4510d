//! `udp`: RoCEv2 over a kernel UDP socket, unprivileged.
//!
//! The kernel owns the Ethernet, IP and UDP headers; the datagram payload
//! is the RoCEv2 part of a frame: BTH, extension headers, payload, pad and
//! ICRC (RoCEv2 Annex A17.2). The backend turns one into the other:
//!
//! - **Receive**: `recvmsg` into the frame buffer after room for the
//!   headers, with `IP_RECVTOS` + `IP_RECVTTL` (IPv4) or `IPV6_RECVTCLASS` +
//!   `IPV6_RECVHOPLIMIT` (IPv6) so the ECN and DSCP bits (and the TTL) the
//!   datagram arrived with are known, then write in front of it the headers
//!   the sender's frame had: Ethernet (destination our MAC, source
//!   [`super::mac_for_ip`] of the sender), IPv4 (IHL 5, the received TOS and
//!   TTL, identification 0, DF set, protocol UDP, lengths, header checksum)
//!   or IPv6 (the received traffic class and hop limit, flow label 0), and
//!   UDP (source port = the sender's port, destination port 4791, checksum
//!   0). The device then parses and checks this frame like any other.
//! - **Transmit**: take the device's frame, send its UDP payload with
//!   `sendto` to the destination IP (port 4791, or where [`Routes`] says),
//!   after setting `IP_TOS` / `IPV6_TCLASS` and the TTL / hop limit from
//!   its header when they differ from the previous frame's.
//!
//! # The ICRC
//!
//! The ICRC covers the IP and UDP headers except the fields routers change
//! (ROCEV2-DIGEST §4: IPv4 TOS, TTL and header checksum; IPv6 traffic class,
//! flow label and hop limit; the UDP checksum). Not masked, so covered: the
//! addresses, lengths, protocol, the IPv4 identification and flags, and both
//! UDP ports. The device chooses a UDP source port per QP and an IPv4
//! identification per packet; a socket has one port, and the kernel
//! chooses the identification. So before sending, the backend rewrites the
//! frame to what goes on the wire and recomputes the ICRC over it
//! ([`roce_stack::icrc::compute`]):
//!
//! - UDP source port = the socket's port, destination port = 4791 (always,
//!   whatever port the peer's socket really listens on: the receiver
//!   rebuilds the header with 4791, so both sides agree);
//! - IPv4 identification = 0 with DF set: what Linux puts in an unconnected
//!   UDP socket's datagrams when DF is set (`ip_select_ident_segs`; DF is
//!   the default, path MTU discovery "want"), so a real RoCE NIC receiving
//!   our datagrams on port 4791 also finds the ICRC valid.
//!
//! The receiver rebuilds exactly these fields, so the ICRC it checks is the
//! one the sender computed. TOS/TTL need not match (masked), which is why an
//! ECN CE mark set on the way arrives with a valid ICRC.
//!
//! Frames that are not IPv4/IPv6 + UDP (ARP, PFC, CNPs over other media)
//! are counted in [`UdpStats::tx_not_udp`] and dropped.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{self as nsock, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use roce_stack::backend::FrameIo;
use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, ICRC_LEN, ROCEV2_UDP_PORT};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{mac_for_ip, BackendError, BackendOptions, Opened};

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
/// Largest UDP payload, bytes (65535 − 8 over IPv6 jumbo-less; more than
/// any RoCE packet).
const MAX_PAYLOAD: usize = 65535 - UDP_LEN;

/// Socket buffer size asked for, bytes (a window of 128 4-KiB messages is
/// 512 KiB; the default 208 KiB would drop datagrams on loopback). Capped
/// by `net.core.rmem_max` unless the process may force it (root).
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Where frames for a peer IP go: that IP's UDP socket address. Peers with
/// no route are sent to `IP:4791` (or the configured default port). The
/// handle is shared: a route added after the backend was boxed takes effect
/// at the next burst.
#[derive(Debug, Clone, Default)]
pub struct Routes(Arc<RoutesInner>);

#[derive(Debug, Default)]
struct RoutesInner {
    generation: AtomicU64,
    table: Mutex<Vec<(IpAddr, SocketAddr)>>,
}

impl Routes {
    /// Send frames for `ip` to `to` (replacing an earlier route for `ip`).
    pub fn set(&self, ip: IpAddr, to: SocketAddr) {
        if let Ok(mut t) = self.0.table.lock() {
            t.retain(|(i, _)| *i != ip);
            t.push((ip, to));
        }
        self.0.generation.fetch_add(1, Ordering::Release);
    }
    fn generation(&self) -> u64 {
        self.0.generation.load(Ordering::Acquire)
    }
    fn snapshot(&self) -> Vec<(IpAddr, SocketAddr)> {
        self.0.table.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// How [`UdpIo::bind`] sets up the socket.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Local address (not unspecified: it is the device's GID) and port
    /// (4791 for RoCEv2; 0 = any free port).
    pub bind: SocketAddr,
    /// The device's MAC: the destination of synthesised frames.
    pub mac: [u8; 6],
    /// Port of peers without a route (RoCEv2: 4791).
    pub peer_port: u16,
    /// Routes to peers on other ports.
    pub routes: Routes,
}

impl UdpConfig {
    /// Bind `bind`, MAC derived from its IP, peers on port 4791.
    pub fn new(bind: SocketAddr) -> UdpConfig {
        UdpConfig {
            bind,
            mac: mac_for_ip(bind.ip()),
            peer_port: ROCEV2_UDP_PORT,
            routes: Routes::default(),
        }
    }
}

/// What the backend counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received and delivered as frames.
    pub rx_datagrams: u64,
    /// Datagrams dropped: larger than the buffer, or from the other IP
    /// family.
    pub rx_dropped: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Frames dropped because they are not IPv4/IPv6 + UDP, or malformed.
    pub tx_not_udp: u64,
    /// Datagrams the kernel refused (e.g. `EMSGSIZE`, `ENOBUFS`); dropped.
    pub tx_errors: u64,
}

/// The UDP socket backend.
pub struct UdpIo {
    sock: Socket,
    local: SocketAddr,
    v6: bool,
    mac: [u8; 6],
    peer_port: u16,
    routes: Routes,
    route_gen: u64,
    route_cache: Vec<(IpAddr, SocketAddr)>,
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
    cmsg: Vec<u8>,
    /// TOS / traffic class and TTL / hop limit set on the socket.
    tos: Option<u8>,
    ttl: Option<u8>,
    stats: UdpStats,
}

impl std::fmt::Debug for UdpIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpIo")
            .field("local", &self.local)
            .field("peer_port", &self.peer_port)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn header_len(v6: bool) -> usize {
    ETH_LEN + if v6 { IPV6_LEN } else { IPV4_LEN } + UDP_LEN
}

impl UdpIo {
    /// Create, configure and bind the socket (non-blocking).
    ///
    /// # Errors
    /// An unspecified bind address, or the socket calls' errors (e.g.
    /// `EADDRINUSE`).
    pub fn bind(cfg: UdpConfig) -> io::Result<UdpIo> {
        if cfg.bind.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the UDP backend binds one address (the device's GID), not 0.0.0.0 or ::",
            ));
        }
        let v6 = cfg.bind.is_ipv6();
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
        sock.set_recv_buffer_size(SOCKET_BUFFER)?;
        sock.set_send_buffer_size(SOCKET_BUFFER)?;
        // Above net.core.{r,w}mem_max only a privileged process gets the
        // size asked for; try, and live with the capped size otherwise.
        let _ = nsock::setsockopt(&sock, sockopt::RcvBufForce, &SOCKET_BUFFER);
        let _ = nsock::setsockopt(&sock, sockopt::SndBufForce, &SOCKET_BUFFER);
        sock.set_nonblocking(true)?;
        sock.bind(&SockAddr::from(cfg.bind))?;
        let local = sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("the socket has no IP address"))?;
        let hl = header_len(v6);
        Ok(UdpIo {
            sock,
            local,
            v6,
            mac: cfg.mac,
            peer_port: cfg.peer_port,
            route_gen: u64::MAX,
            routes: cfg.routes,
            route_cache: Vec::new(),
            rx_buf: vec![0u8; hl + MAX_PAYLOAD],
            tx_buf: vec![0u8; hl + 4 + MAX_PAYLOAD],
            cmsg: nix::cmsg_space!(libc_int, libc_int),
            tos: None,
            ttl: None,
            stats: UdpStats::default(),
        })
    }

    /// The bound address (with the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The route table handle.
    pub fn routes(&self) -> Routes {
        self.routes.clone()
    }

    /// What was counted.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// The socket address frames for `ip` go to.
    fn dest(&mut self, ip: IpAddr) -> SocketAddr {
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

    /// Receive one datagram and synthesise its frame in `rx_buf`; the frame
    /// length, `Ok(None)` when none is waiting, `Ok(Some(0))` for a dropped
    /// datagram.
    fn recv_one(&mut self) -> io::Result<Option<usize>> {
        let hl = header_len(self.v6);
        let fd = self.sock.as_raw_fd();
        let (n, from, tos, ttl, trunc) = {
            let mut iov = [io::IoSliceMut::new(&mut self.rx_buf[hl..])];
            let r = nsock::recvmsg::<SockaddrStorage>(
                fd,
                &mut iov,
                Some(&mut self.cmsg),
                MsgFlags::MSG_DONTWAIT,
            );
            let msg = match r {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(None),
                Err(nix::errno::Errno::EINTR) => return Ok(Some(0)),
                Err(e) => return Err(e.into()),
            };
            let mut tos = 0u8;
            let mut ttl = 64u8;
            if let Ok(cm) = msg.cmsgs() {
                for c in cm {
                    match c {
                        ControlMessageOwned::Ipv4Tos(t) => tos = t,
                        ControlMessageOwned::Ipv6TClass(t) => tos = t as u8,
                        ControlMessageOwned::Ipv4Ttl(t) => ttl = t as u8,
                        ControlMessageOwned::Ipv6HopLimit(t) => ttl = t as u8,
                        _ => {}
                    }
                }
            }
            let from: Option<SocketAddr> = msg.address.and_then(|a| {
                if let Some(a4) = a.as_sockaddr_in() {
                    Some(SocketAddr::new(IpAddr::V4(a4.ip()), a4.port()))
                } else {
                    a.as_sockaddr_in6()
                        .map(|a6| SocketAddr::new(IpAddr::V6(a6.ip()), a6.port()))
                }
            });
            (
                msg.bytes,
                from,
                tos,
                ttl,
                msg.flags.contains(MsgFlags::MSG_TRUNC),
            )
        };
        let Some(from) = from else {
            self.stats.rx_dropped += 1;
            return Ok(Some(0));
        };
        if trunc || n > MAX_PAYLOAD {
            self.stats.rx_dropped += 1;
            return Ok(Some(0));
        }
        let len = synthesize(
            &mut self.rx_buf[..hl + n],
            from,
            self.local.ip(),
            self.mac,
            tos,
            ttl,
        );
        match len {
            Some(l) => {
                self.stats.rx_datagrams += 1;
                Ok(Some(l))
            }
            None => {
                self.stats.rx_dropped += 1;
                Ok(Some(0))
            }
        }
    }

    /// Send the frame at the start of `tx_buf`.
    fn send_frame(&mut self, len: usize) -> io::Result<()> {
        let port = self.local.port();
        let Some(w) = rewrite_for_wire(&mut self.tx_buf[..len], port) else {
            self.stats.tx_not_udp += 1;
            return Ok(());
        };
        if w.v6 != self.v6 {
            self.stats.tx_not_udp += 1;
            return Ok(());
        }
        if self.tos != Some(w.tos) {
            let r = if self.v6 {
                self.sock.set_tclass_v6(u32::from(w.tos))
            } else {
                self.sock.set_tos_v4(u32::from(w.tos))
            };
            r?;
            self.tos = Some(w.tos);
        }
        if self.ttl != Some(w.ttl) && w.ttl != 0 {
            let r = if self.v6 {
                self.sock.set_unicast_hops_v6(u32::from(w.ttl))
            } else {
                self.sock.set_ttl_v4(u32::from(w.ttl))
            };
            r?;
            self.ttl = Some(w.ttl);
        }
        let to = self.dest(w.dst);
        let payload = &self.tx_buf[w.payload.0..w.payload.1];
        match self.sock.send_to(payload, &SockAddr::from(to)) {
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

/// Stand-in type for the control-message space (`int` values).
#[allow(non_camel_case_types)]
type libc_int = nix::libc::c_int;

/// Write the Ethernet, IP and UDP headers in front of the UDP payload that
/// sits at `buf[header_len..]` (`buf` ends with the payload). Returns the
/// frame length, or `None` when the address families differ.
fn synthesize(
    buf: &mut [u8],
    from: SocketAddr,
    local: IpAddr,
    mac: [u8; 6],
    tos: u8,
    ttl: u8,
) -> Option<usize> {
    let len = buf.len();
    let (eth, rest) = buf.split_at_mut(ETH_LEN);
    eth[..6].copy_from_slice(&mac);
    eth[6..12].copy_from_slice(&mac_for_ip(from.ip()));
    match (from.ip(), local) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            eth[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let total = (len - ETH_LEN) as u16;
            let ip = &mut rest[..IPV4_LEN];
            ip[0] = 0x45;
            ip[1] = tos;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[4..6].copy_from_slice(&[0, 0]);
            ip[6..8].copy_from_slice(&[0x40, 0]);
            ip[8] = ttl;
            ip[9] = 17;
            ip[10..12].copy_from_slice(&[0, 0]);
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let ck = ipv4_checksum(ip);
            ip[10..12].copy_from_slice(&ck.to_be_bytes());
            write_udp(&mut rest[IPV4_LEN..], from.port(), total - IPV4_LEN as u16);
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            eth[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let plen = (len - ETH_LEN - IPV6_LEN) as u16;
            let ip = &mut rest[..IPV6_LEN];
            let first = (6u32 << 28) | (u32::from(tos) << 20);
            ip[0..4].copy_from_slice(&first.to_be_bytes());
            ip[4..6].copy_from_slice(&plen.to_be_bytes());
            ip[6] = 17;
            ip[7] = ttl;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            write_udp(&mut rest[IPV6_LEN..], from.port(), plen);
        }
        _ => return None,
    }
    Some(len)
}

fn write_udp(udp: &mut [u8], sport: u16, len: u16) {
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&len.to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
}

/// RFC 791 header checksum of an option-less IPv4 header whose checksum
/// field is zero (RFC 1071 one's-complement sum).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// What [`rewrite_for_wire`] found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WireInfo {
    v6: bool,
    dst: IpAddr,
    tos: u8,
    ttl: u8,
    /// The UDP payload's range in the frame.
    payload: (usize, usize),
}

/// Rewrite a RoCEv2 frame to what the socket puts on the wire (UDP source
/// port `sport`, destination port 4791, IPv4 identification 0 and DF) and
/// recompute its ICRC. `None` if the frame is not IPv4/IPv6 + UDP with
/// consistent lengths.
fn rewrite_for_wire(frame: &mut [u8], sport: u16) -> Option<WireInfo> {
    let mut l3 = ETH_LEN;
    let mut et = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if et == ETHERTYPE_VLAN {
        et = u16::from_be_bytes([*frame.get(16)?, *frame.get(17)?]);
        l3 = 18;
    }
    let ip = frame.get_mut(l3..)?;
    let (v6, ihl, dst, tos, ttl, form) = match et {
        ETHERTYPE_IPV4 => {
            let h = ip.get(..IPV4_LEN)?;
            if h[0] != 0x45 || h[9] != 17 {
                return None;
            }
            let dst = IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]));
            (false, IPV4_LEN, dst, h[1], h[8], IcrcForm::Ipv4)
        }
        ETHERTYPE_IPV6 => {
            let h = ip.get(..IPV6_LEN)?;
            if h[0] >> 4 != 6 || h[6] != 17 {
                return None;
            }
            let tc = ((u16::from_be_bytes([h[0], h[1]]) >> 4) & 0xFF) as u8;
            let mut d = [0u8; 16];
            d.copy_from_slice(&h[24..40]);
            (
                true,
                IPV6_LEN,
                IpAddr::V6(Ipv6Addr::from(d)),
                tc,
                h[7],
                IcrcForm::Ipv6,
            )
        }
        _ => return None,
    };
    let udp = ip.get(ihl..ihl + UDP_LEN)?;
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_LEN + 12 + ICRC_LEN || ihl + udp_len > ip.len() {
        return None;
    }
    if !v6 {
        ip[4..6].copy_from_slice(&[0, 0]);
        ip[6] = 0x40;
        ip[7] = 0;
    }
    ip[ihl..ihl + 2].copy_from_slice(&sport.to_be_bytes());
    ip[ihl + 2..ihl + 4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    let end = ihl + udp_len;
    let crc = icrc::compute(form, ip.get(..end - ICRC_LEN)?).ok()?;
    ip.get_mut(end - ICRC_LEN..end)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(WireInfo {
        v6,
        dst,
        tos,
        ttl,
        payload: (l3 + ihl + UDP_LEN, l3 + end),
    })
}

impl FrameIo for UdpIo {
    type Error = io::Error;

    fn max_frame_len(&self) -> usize {
        // What fits in one datagram with the headers in front.
        header_len(self.v6) + 4 + MAX_PAYLOAD
    }

    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match self.recv_one()? {
                None => break,
                Some(0) => {}
                Some(len) => {
                    on_frame(&self.rx_buf[..len]);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(len) = fill(&mut self.tx_buf) else {
                break;
            };
            let len = len.min(self.tx_buf.len());
            self.send_frame(len)?;
            n += 1;
        }
        Ok(n)
    }
}

/// Open the `udp` backend for a process-to-process run: bind
/// `o.local_ip:o.udp_port`.
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
    let io = UdpIo::bind(cfg.clone()).map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::AddrInUse {
            " (is another `roce` or the kernel's rdma_rxe on it? choose another with --udp-port)"
        } else {
            ""
        };
        BackendError::msg(format!("udp: bind {}: {e}{hint}", cfg.bind))
    })?;
    let udp = io.local_addr();
    let routes = io.routes();
    Ok(Opened {
        io: super::AnyIo::new(io),
        ip,
        mac: cfg.mac,
        udp: Some(udp),
        routes: Some(routes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_stack::wire::{IcrcStatus, ParseMode, RocePacket};

    #[test]
    fn ipv4_checksum_of_a_known_header() {
        // RFC 1071 example-style check: a header whose checksum verifies.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let ck = ipv4_checksum(&h);
        assert_eq!(ck, 0xb861);
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        assert_eq!(ipv4_checksum(&h), 0);
    }

    #[test]
    fn rewrite_then_synthesize_round_trips_with_a_valid_icrc() {
        use roce_stack::testing::Pair;
        use roce_stack::wire::{BthRepr, ExtHeaders, Opcode};
        let p = Pair::new(1500, Default::default(), 1);
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, 0x12, 0x100)
        };
        let mut frame = p.frame(0, bth, ExtHeaders::default(), b"hello, world!");
        let w = rewrite_for_wire(&mut frame, 40000).unwrap();
        assert!(!w.v6);
        let payload = frame[w.payload.0..w.payload.1].to_vec();
        let mut buf = vec![0u8; header_len(false) + payload.len()];
        buf[header_len(false)..].copy_from_slice(&payload);
        let from: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        let n = synthesize(&mut buf, from, "10.0.0.2".parse().unwrap(), [2; 6], 3, 9).unwrap();
        let pkt = RocePacket::parse_with(&buf[..n], ParseMode::Lenient).unwrap();
        assert_eq!(pkt.icrc_status(), IcrcStatus::Ok);
        assert_eq!(pkt.net().ecn(), 3);
        assert_eq!(pkt.udp().unwrap().src_port, 40000);
        assert_eq!(pkt.payload(), b"hello, world!");
        RocePacket::parse(&buf[..n]).unwrap();
    }
}
