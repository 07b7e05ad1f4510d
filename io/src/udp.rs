//! `udp`: RoCEv2 over the kernel's UDP/IP: a UDP socket (unprivileged,
//! the default) or a raw IPv4 socket (`CAP_NET_RAW`, [`UdpConfig::raw`]).
//!
//! # Datagram mode (default)
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
//!   [`crate::mac_for_ip`] of the sender), IPv4 (IHL 5, the received TOS and
//!   TTL, the identification and DF bit found from the ICRC (below), no
//!   other flag, fragment offset 0, protocol UDP, lengths, header checksum)
//!   or IPv6 (the received traffic class and hop limit, flow label 0), and
//!   UDP (source port = the sender's port, destination port 4791, checksum
//!   0). The device then parses and checks this frame like any other.
//! - **Transmit**: take the device's frame, send its UDP payload with
//!   `sendto` to the destination IP (port 4791, or where [`Routes`] says),
//!   after setting `IP_TOS` / `IPV6_TCLASS` and the TTL / hop limit from
//!   its header when they differ from the previous frame's.
//!
//! ## The ICRC on the wire
//!
//! The ICRC covers the IP and UDP headers except the fields routers change
//! (IBTA Annex A17.4 / ROCEV2-DIGEST §4: IPv4 TOS, TTL and header checksum;
//! IPv6 traffic class, flow label and hop limit; the UDP checksum). Not
//! masked, so covered: the addresses, lengths, protocol, the IPv4
//! identification and flags, and both UDP ports. The device chooses a UDP
//! source port per QP and an IPv4 identification per packet; a socket has
//! one port, and the kernel chooses the identification. So before sending,
//! the backend rewrites the frame to what the kernel puts on the wire and
//! recomputes the ICRC over it ([`roce_stack::icrc::compute`]):
//!
//! - UDP source port = the socket's port; destination port = 4791. On
//!   RoCEv2's port 4791 the ICRC therefore verifies on the wire as sent;
//!   to a peer socket on another port (tests, several instances on one
//!   address) the ICRC is still computed as though the port were 4791, and
//!   the receiving backend rebuilds the header with 4791 (a RoCE NIC only
//!   listens on 4791, so only our own backends receive those).
//! - IPv4 identification 0 with DF. Linux sends exactly that only when
//!   the socket says `IP_MTU_DISCOVER = IP_PMTUDISC_DO`, which the backend
//!   sets: `ip_select_ident_segs()` (include/net/ip.h) writes
//!   identification 0 for an unconnected socket's packet when DF is set
//!   and `skb->ignore_df` is not, and `ip_sk_ignore_df()` is true for every
//!   mode below `IP_PMTUDISC_DO`, so with Linux's default
//!   (`IP_PMTUDISC_WANT`) the datagrams carry DF with a non-zero
//!   identification from `__ip_select_ident()` that no receiver can
//!   predict (seen on Linux 6.18: the default gives DF with 0x3e23,
//!   0x3e24, ...; `IP_PMTUDISC_DO` gives 0). The socket is never connected (a connected socket numbers
//!   its datagrams from a per-socket counter). Side effect: a datagram
//!   larger than the path MTU is refused (`EMSGSIZE`, counted in
//!   [`UdpStats::tx_errors`]) instead of fragmented, as a RoCE NIC would
//!   (RoCE packets are never fragmented). IPv6 sockets get
//!   `IPV6_PMTUDISC_DO` for the same reason (no local fragmentation).
//!   `tests/udp_wire.rs` captures what two backends exchange on `lo` and
//!   verifies every frame's ICRC with an independent CRC.
//!
//! TOS/TTL need not match (masked), which is why an ECN CE mark set on the
//! way arrives with a valid ICRC. IPv6 has no identification and every
//! header field the kernel chooses (traffic class, flow label, hop limit)
//! is masked, so IPv6 datagrams are exact in both directions.
//!
//! ## Receiving from peers that use other identifications
//!
//! A UDP socket never reports the IPv4 identification or flags, and real
//! peers do not send 0: rxe and ConnectX send DF with a per-packet
//! identification (every IPv4 frame of the public captures does). Since the
//! ICRC is linear over GF(2) and the 17 unknown bits (identification and
//! DF) map injectively into its 32 bits, the backend solves for them
//! ([`roce_stack::icrc::recover_ipv4_ident`]), writes the solution into the
//! rebuilt header and counts the frame in
//! [`UdpStats::rx_icrc_ident_recovered`] (frames that verify with
//! identification 0 + DF are not counted). When no solution exists the
//! frame goes to the device as rebuilt (identification 0 + DF), which drops
//! it as an ICRC error, and [`UdpStats::rx_icrc_ident_unsolved`] counts it.
//!
//! **The cost is integrity**: 17 of the ICRC's 32 bits are spent finding
//! the unknowns, so about 15 bits are left to detect corruption (a random
//! error passes with probability 2^-15, not 2^-32). Ethernet's FCS still
//! protects every link, and the kernel checks a non-zero UDP checksum, but
//! RoCE senders usually send 0. Turn it off with
//! [`UdpConfig::ident_recovery`] = `false` (`roce perf --no-ident-recovery`):
//! then only peers that send identification 0 + DF (this backend, any
//! Linux socket with `IP_PMTUDISC_DO`) are received over IPv4; or use raw
//! mode, which sees the real header.
//!
//! # Raw mode (`CAP_NET_RAW`, IPv4)
//!
//! [`UdpConfig::raw`]: frames go out through a raw IPv4 socket
//! (`SOCK_RAW`, `IPPROTO_UDP`, `IP_HDRINCL`, raw(7)) with the device's own
//! IPv4 and UDP headers, and come in through the same socket with the real
//! headers, so the bytes are exactly the stack's in both directions and the
//! ICRC is checked over what was on the wire (no recovery). The kernel
//! keeps a header-included packet's identification when it is non-zero or
//! DF is set (`raw_send_hdrinc()`, net/ipv4/raw.c, calls
//! `ip_select_ident()` only for identification 0, which keeps 0 when DF is
//! set; the device always sets DF), fills in the header checksum and total
//! length, and never touches the UDP header. Each QP's UDP source port therefore
//! reaches the wire (see below). A UDP socket stays bound to the address
//! and port, with a socket filter that drops everything, so the port is
//! reserved and the kernel does not answer the datagrams with ICMP port
//! unreachable; a socket filter on the raw socket keeps only datagrams to
//! that address and port (checked again here). To a peer on a port other
//! than 4791 (a [`Routes`] entry) the destination port on the wire is the
//! peer's while the ICRC stays the one the device computed with 4791, and
//! a raw backend on another port puts 4791 back before the device sees the
//! frame: the convention of datagram mode, so both modes interoperate.
//! IPv6 is refused in raw mode (IPv6 datagrams are already exact).
//!
//! # The UDP source port (ECMP entropy)
//!
//! RoCEv2 uses the UDP source port as flow entropy: switches hash the
//! 5-tuple to choose among equal-cost paths, and a QP keeps one port so
//! its packets stay in order (ROCEV2-DIGEST §1; rxe derives it from the
//! QPNs, [`roce_stack::transport::av::udp_sport`] does the same). In
//! datagram mode every frame leaves from the socket's one port: **a fabric
//! sees all QPs of one backend as one flow per peer** and puts them on one
//! path. Raw mode sends each QP's own source port, as rxe and ConnectX do.
//!
//! Frames that are not IPv4/IPv6 + UDP (ARP, PFC, CNPs over other media)
//! are counted in [`UdpStats::tx_not_udp`] and dropped.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use roce_stack::backend::FrameIo;
use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::{
    ethernet, ipv4, ipv6, udp, EthRepr, EthernetFrame, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    L2Info, UdpChecksum, UdpPacket, UdpRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ICRC_LEN,
    ROCEV2_UDP_PORT,
};
use socket2::Socket;

use crate::open::mac_for_ip;

mod socket;

pub use socket::open;

const ETH_LEN: usize = ethernet::HEADER_LEN;
const IPV4_LEN: usize = ipv4::HEADER_LEN;
const IPV6_LEN: usize = ipv6::HEADER_LEN;
const UDP_LEN: usize = udp::HEADER_LEN;
/// BTH (12 bytes) + ICRC: the shortest RoCEv2 UDP payload.
const MIN_ROCE: usize = 12 + ICRC_LEN;
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
    /// Raw mode (IPv4 only, needs `CAP_NET_RAW`): send and receive whole
    /// IPv4 + UDP packets through a raw socket, so the headers on the wire
    /// are the device's own (see the module docs). Default `false`.
    pub raw: bool,
    /// Datagram mode over IPv4: find the identification and DF bit a
    /// received packet was sent with from its ICRC
    /// ([`roce_stack::icrc::recover_ipv4_ident`]; leaves about 15 bits of
    /// integrity check). `false`: rebuild identification 0 with DF, so only
    /// peers that send those verify. Default `true`.
    pub ident_recovery: bool,
}

impl UdpConfig {
    /// Bind `bind`, MAC derived from its IP, peers on port 4791, datagram
    /// mode with identification recovery.
    pub fn new(bind: SocketAddr) -> UdpConfig {
        UdpConfig {
            bind,
            mac: mac_for_ip(bind.ip()),
            peer_port: ROCEV2_UDP_PORT,
            routes: Routes::default(),
            raw: false,
            ident_recovery: true,
        }
    }
}

/// What the backend counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received and delivered as frames.
    pub rx_datagrams: u64,
    /// Datagrams dropped: larger than the buffer, from the other IP family,
    /// or (raw mode) not an option-less, unfragmented IPv4 + UDP packet to
    /// the bound address and port (the socket filter normally keeps those
    /// out).
    pub rx_dropped: u64,
    /// IPv4 datagrams whose ICRC verified only with an identification/DF
    /// other than 0 + DF, found from the ICRC (datagram mode).
    pub rx_icrc_ident_recovered: u64,
    /// IPv4 datagrams for which no identification/DF makes the ICRC verify
    /// (datagram mode, recovery on): corrupted, or from a sender whose
    /// header differs in another covered field. Delivered with
    /// identification 0 + DF; the device drops them as ICRC errors.
    pub rx_icrc_ident_unsolved: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Frames dropped because they are not IPv4/IPv6 + UDP, or malformed.
    pub tx_not_udp: u64,
    /// Datagrams the kernel refused (e.g. `EMSGSIZE`, `ENOBUFS`); dropped.
    pub tx_errors: u64,
}

/// The UDP socket backend.
pub struct UdpIo {
    /// Datagram mode: the socket frames go through. Raw mode: the socket
    /// that reserves the port (its filter drops everything).
    sock: Socket,
    /// Raw mode: the raw IPv4 socket.
    raw: Option<Socket>,
    local: SocketAddr,
    v6: bool,
    mac: [u8; 6],
    peer_port: u16,
    ident_recovery: bool,
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
            .field("raw", &self.raw.is_some())
            .field("peer_port", &self.peer_port)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn header_len(v6: bool) -> usize {
    ETH_LEN + if v6 { IPV6_LEN } else { IPV4_LEN } + UDP_LEN
}

/// Write the Ethernet, IP and UDP headers in front of the UDP payload that
/// sits at `buf[header_len..]` (`buf` ends with the payload). IPv4 gets
/// identification 0 with DF ([`recover_ident`] may change them). Returns
/// the frame length, or `None` when the address families differ.
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
    let (dscp, ecn) = (tos >> 2, tos & 3);
    let (ethertype, ip_len) = match (from.ip(), local) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let (ip, datagram) = rest.split_at_mut(IPV4_LEN);
            let ip_repr = Ipv4Repr {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                ident: 0,
                dont_frag: true,
            };
            ip_repr.emit(&mut Ipv4Packet::new_unchecked(ip), datagram.len() as u16);
            (ETHERTYPE_IPV4, IPV4_LEN)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let (ip, datagram) = rest.split_at_mut(IPV6_LEN);
            let ip_repr = Ipv6Repr {
                src,
                dst,
                dscp,
                ecn,
                flow_label: 0,
                hop_limit: ttl,
            };
            ip_repr.emit(&mut Ipv6Packet::new_unchecked(ip), datagram.len() as u16);
            (ETHERTYPE_IPV6, IPV6_LEN)
        }
        _ => return None,
    };
    let eth_repr = EthRepr {
        dst: mac,
        src: mac_for_ip(from.ip()),
        vlan: None,
    };
    eth_repr.emit(&mut EthernetFrame::new_unchecked(eth), ethertype);
    let udp_repr = UdpRepr {
        src_port: from.port(),
        dst_port: ROCEV2_UDP_PORT,
        checksum: UdpChecksum::Zero,
    };
    let datagram = &mut rest[ip_len..];
    let payload_len = (datagram.len() - UDP_LEN) as u16;
    udp_repr.emit(&mut UdpPacket::new_unchecked(datagram), payload_len);
    Some(len)
}

/// In a frame [`synthesize`]d over IPv4 (identification 0 + DF, fragment
/// offset 0), put the identification and DF bit with which its ICRC
/// verifies ([`icrc::recover_ipv4_ident`]) and fix the header checksum.
/// `Some(true)`: they differ from the frame's and were written;
/// `Some(false)`: the frame's verify; `None`: nothing does (the frame is
/// left as it was).
fn recover_ident(frame: &mut [u8]) -> Option<bool> {
    let ip = frame.get_mut(ETH_LEN..)?;
    let icrc_at = ip.len().checked_sub(ICRC_LEN)?;
    let wire: [u8; 4] = ip.get(icrc_at..)?.try_into().ok()?;
    let (ident, df) = icrc::recover_ipv4_ident(ip.get(..icrc_at)?, wire).ok()??;
    let mut h = Ipv4Packet::new_checked(ip).ok()?;
    let flags = if df { 0x4000 } else { 0 };
    if h.ident() == ident && h.flags_frag() == flags {
        return Some(false);
    }
    h.set_ident(ident);
    h.set_unfragmented(df);
    h.fill_checksum();
    Some(true)
}

/// Raw mode: the IPv4 packet of `n` bytes at `buf[ETH_LEN..]` (as a raw
/// socket returns it: real header) becomes an Ethernet frame: destination
/// `mac`, source [`mac_for_ip`] of the sender. Returns the frame length, or
/// `None` unless it is an option-less, unfragmented IPv4 + UDP packet of
/// consistent length to `local:port` (`n` may exceed the buffer: a
/// truncated packet). A packet to a port other than 4791 gets 4791, as a
/// datagram-mode backend rebuilds it (module docs).
fn frame_raw(buf: &mut [u8], n: usize, local: Ipv4Addr, port: u16, mac: [u8; 6]) -> Option<usize> {
    let frame = buf.get_mut(..ETH_LEN + n)?;
    let (eth, packet) = frame.split_at_mut(ETH_LEN);
    if n < IPV4_LEN + UDP_LEN {
        return None;
    }
    let (ip, datagram) = packet.split_at_mut(IPV4_LEN);
    let ip = Ipv4Packet::new_unchecked(&*ip);
    let mut udp = UdpPacket::new_unchecked(datagram);
    if !is_plain_udp(&ip)
        || usize::from(ip.total_len()) != n
        || ip.dst_addr() != local
        || udp.dst_port() != port
        || usize::from(udp.len()) != n - IPV4_LEN
    {
        return None;
    }
    udp.set_dst_port(ROCEV2_UDP_PORT);
    let eth_repr = EthRepr {
        dst: mac,
        src: mac_for_ip(IpAddr::V4(ip.src_addr())),
        vlan: None,
    };
    eth_repr.emit(&mut EthernetFrame::new_unchecked(eth), ETHERTYPE_IPV4);
    Some(ETH_LEN + n)
}

/// An IPv4 header without options, not a fragment, carrying UDP.
fn is_plain_udp<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> bool {
    ip.version() == 4
        && ip.header_len() == IPV4_LEN
        && ip.protocol() == ipv4::PROTOCOL_UDP
        && !ip.more_frags()
        && ip.frag_offset() == 0
}

/// Raw mode: where a frame's IPv4 packet is (start, end of the UDP
/// datagram) and its destination, if it is option-less IPv4 + UDP with
/// consistent lengths.
fn locate_ipv4(frame: &[u8]) -> Option<(usize, usize, Ipv4Addr)> {
    let l2 = L2Info::parse(frame).ok()?;
    if l2.ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    let l3 = l2.header_len();
    let (ip, datagram) = frame.get(l3..l3 + IPV4_LEN + UDP_LEN)?.split_at(IPV4_LEN);
    let ip = Ipv4Packet::new_unchecked(ip);
    let udp = UdpPacket::new_unchecked(datagram);
    if ip.version() != 4 || ip.header_len() != IPV4_LEN || ip.protocol() != ipv4::PROTOCOL_UDP {
        return None;
    }
    let total = usize::from(ip.total_len());
    let udp_len = usize::from(udp.len());
    if total != IPV4_LEN + udp_len || udp_len < UDP_LEN + MIN_ROCE || l3 + total > frame.len() {
        return None;
    }
    Some((l3, l3 + total, ip.dst_addr()))
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
    let l2 = L2Info::parse(frame).ok()?;
    let l3 = l2.header_len();
    let ip = frame.get_mut(l3..)?;
    let (v6, ihl, dst, tos, ttl, form) = match l2.ethertype {
        ETHERTYPE_IPV4 => {
            let h = Ipv4Packet::new_checked(&*ip).ok()?;
            if h.version() != 4 || h.header_len() != IPV4_LEN || h.protocol() != ipv4::PROTOCOL_UDP
            {
                return None;
            }
            let dst = IpAddr::V4(h.dst_addr());
            (false, IPV4_LEN, dst, h.tos(), h.ttl(), IcrcForm::Ipv4)
        }
        ETHERTYPE_IPV6 => {
            let h = Ipv6Packet::new_checked(&*ip).ok()?;
            if h.version() != 6 || h.next_header() != ipv4::PROTOCOL_UDP {
                return None;
            }
            let dst = IpAddr::V6(h.dst_addr());
            (
                true,
                IPV6_LEN,
                dst,
                h.traffic_class(),
                h.hop_limit(),
                IcrcForm::Ipv6,
            )
        }
        _ => return None,
    };
    let udp_len = usize::from(UdpPacket::new_checked(ip.get(ihl..)?).ok()?.len());
    if udp_len < UDP_LEN + MIN_ROCE || ihl + udp_len > ip.len() {
        return None;
    }
    if !v6 {
        let mut h = Ipv4Packet::new_unchecked(&mut *ip);
        h.set_ident(0);
        h.set_unfragmented(true);
    }
    let mut udp = UdpPacket::new_unchecked(&mut ip[ihl..]);
    udp.set_src_port(sport);
    udp.set_dst_port(ROCEV2_UDP_PORT);
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

/// The socket datagrams arrive on (raw mode: the raw socket): readable
/// when a frame waits.
impl AsFd for UdpIo {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.raw.as_ref().unwrap_or(&self.sock).as_fd()
    }
}

impl AsRawFd for UdpIo {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl FrameIo for UdpIo {
    type Error = io::Error;

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use roce_stack::wire::{checksum, IcrcStatus, ParseMode, RocePacket};

    /// A rebuilt IPv4 frame gets the identification and DF its ICRC was
    /// computed with (here by the `crc` crate, an independent CRC-32), and
    /// a valid header checksum.
    #[test]
    fn recover_ident_rewrites_identification_df_and_checksum() {
        let payload = [
            0x04u8, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 1, 0, b'h', b'i', 0, 0,
        ];
        let mut frame = vec![0u8; header_len(false) + payload.len() + ICRC_LEN];
        frame[header_len(false)..header_len(false) + payload.len()].copy_from_slice(&payload);
        let from: SocketAddr = "10.0.0.1:49152".parse().unwrap();
        let n = synthesize(&mut frame, from, "10.0.0.2".parse().unwrap(), [2; 6], 0, 64).unwrap();
        // The sender's header: identification 0x1234, DF.
        let mut pseudo = vec![0xFFu8; 8];
        pseudo.extend_from_slice(&frame[ETH_LEN..n - ICRC_LEN]);
        pseudo[8 + 4..8 + 6].copy_from_slice(&[0x12, 0x34]);
        for i in [1, 8, 10, 11, 26, 27, 28 + 4] {
            pseudo[8 + i] = 0xFF;
        }
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&pseudo);
        frame[n - ICRC_LEN..n].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(recover_ident(&mut frame[..n]), Some(true));
        assert_eq!(&frame[ETH_LEN + 4..ETH_LEN + 8], &[0x12, 0x34, 0x40, 0]);
        assert!(checksum::verify(&frame[ETH_LEN..ETH_LEN + IPV4_LEN]));
        let p = RocePacket::parse(&frame[..n]).expect("the ICRC verifies");
        assert_eq!(p.icrc_status(), IcrcStatus::Ok);
        // Once right, nothing to recover; a corrupted ICRC byte has no
        // solution here.
        assert_eq!(recover_ident(&mut frame[..n]), Some(false));
        frame[n - 1] ^= 0x80;
        assert_eq!(recover_ident(&mut frame[..n]), None);
    }

    /// Raw mode keeps only option-less unfragmented IPv4 + UDP to its
    /// address and port, and puts 4791 in a frame sent to another port.
    #[test]
    fn raw_frames_are_checked_and_get_port_4791() {
        let mut buf = vec![0u8; 200];
        let n = 20 + 8 + 16;
        let ip = &mut buf[ETH_LEN..];
        ip[..20].copy_from_slice(&[
            0x45, 0, 0, n as u8, 0xab, 0xcd, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        ip[20..28].copy_from_slice(&[0xc0, 0x00, 0x30, 0x39, 0, 24, 0, 0]);
        let local = Ipv4Addr::new(10, 0, 0, 2);
        let mut b = buf.clone();
        assert_eq!(
            frame_raw(&mut b, n, local, 12345, [2; 6]),
            Some(ETH_LEN + n)
        );
        assert_eq!(&b[ETH_LEN + 20..ETH_LEN + 24], &[0xc0, 0, 0x12, 0xb7]);
        assert_eq!(&b[6..14], &[2, 0, 10, 0, 0, 1, 0x08, 0x00]);
        assert_eq!(&b[ETH_LEN + 4..ETH_LEN + 6], &[0xab, 0xcd], "kept");
        for (at, v) in [
            (0, 0x46u8),
            (9, 6),
            (7, 1),
            (6, 0x60),
            (19, 3),
            (23, 0x3a),
            (25, 25),
        ] {
            let mut b = buf.clone();
            b[ETH_LEN + at] = v;
            assert_eq!(
                frame_raw(&mut b, n, local, 12345, [2; 6]),
                None,
                "byte {at}"
            );
        }
        let mut b = buf.clone();
        assert_eq!(
            frame_raw(&mut b, 300, local, 12345, [2; 6]),
            None,
            "truncated"
        );
        assert_eq!(frame_raw(&mut b, n - 1, local, 12345, [2; 6]), None);
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
