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
//!
//! # Batching (datagram mode)
//!
//! A burst costs a few system calls, not one per frame:
//!
//! - **Transmit**: `tx_burst` lets the device write its frames back to
//!   back into one arena, rewrites each for the wire (above), and sends
//!   them with sendmmsg(2). With [`UdpConfig::gso`], consecutive frames
//!   of one QP to one peer with one TOS/TTL and one UDP payload size (the
//!   last may be shorter) go as one UDP GSO send (`UDP_SEGMENT`, udp(7)):
//!   the kernel cuts the send into one datagram per frame, each a whole
//!   RoCEv2 packet with its own BTH and ICRC, at most 64 per send. Within
//!   a burst each QP's frames are put together, in order (QPs are
//!   independent flows), so a device that interleaves QPs still fills
//!   sends; a send never mixes QPs, so a receiver that steers by QPN
//!   ([`Shard`], RSS on the BTH) gets each one whole where it belongs.
//! - **Identification under GSO**: the kernel numbers a GSO send's
//!   segments itself (`inet_gso_segment()`, net/ipv4/af_inet.c: `id++`
//!   per segment unless `SKB_GSO_TCP_FIXEDID`, which is TCP's only), from
//!   the identification `ip_select_ident_segs()` gave the send: 0 with
//!   `IP_PMTUDISC_DO`. Seen on Linux 6.18 in a capture with `lo`'s
//!   `tx-udp-segmentation` off: a 5-segment send carries identifications
//!   0, 1, 2, 3, 4, all with DF (with `IP_PMTUDISC_WANT`: a random base,
//!   then consecutive). So segment `i`'s ICRC is computed with
//!   identification `i` and every segment verifies on the wire as sent
//!   (`tests/udp_wire.rs` checks each with an independent CRC). Whether
//!   the kernel segments in software or a NIC does (USO), the numbering is
//!   the same. On `lo` and veth the offload is on by default and a send
//!   stays one packet until the receiving socket, so a capture there shows
//!   one large packet per send; `ethtool -K lo tx-udp-segmentation off`
//!   shows the segments.
//! - **Receive**: `rx_burst` takes up to 16 datagrams with one
//!   recvmmsg(2), each into its own 64 KiB slot after room for the
//!   headers. With [`UdpConfig::gro`] (`UDP_GRO`) a slot may hold several
//!   datagrams of one sender (a GSO send that reached the socket whole, or
//!   datagrams the kernel's GRO merged) with their size in a control
//!   message; each is delivered as its own frame, its headers written in
//!   place over the tail of the one before (already delivered). Segment
//!   `i` of such a batch is rebuilt with identification `i` + DF, what a
//!   Linux GSO sender gives it, so recovery finds nothing to change;
//!   without recovery ([`UdpConfig::ident_recovery`] `false`) `i` or 0 is
//!   accepted (the one bit of guessing this needs). A lone datagram is
//!   rebuilt with 0 + DF, as before. A burst that ends inside a batch
//!   delivers the rest at the next call (call again after a full burst
//!   before waiting on [`FrameIo::wait_fd`]).
//!
//! # Shards (several cores, one address)
//!
//! [`UdpConfig::shard`]: `count` backends, each driving its own device on
//! its own core, bind one address and port with `SO_REUSEPORT`, and a
//! classic-BPF program (`SO_ATTACH_REUSEPORT_CBPF`, socket(7)) picks the
//! receiving socket from each datagram's BTH destination QP
//! ([`Shard::of_qpn`]: QPN mod `count`). Every packet of a connection
//! carries the receiving QP's number (requests, ACKs, READ responses,
//! CNPs), so each shard sees only its own QPs. Shards turn GRO off: the
//! kernel's GRO merges one peer's datagrams before the socket is chosen.
//! `docs/scaling.md` has the whole picture; `tests/udp_shards.rs` runs two.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use roce_stack::backend::FrameIo;
use roce_stack::wire::{ethernet, ipv4, ipv6, udp, ICRC_LEN, ROCEV2_UDP_PORT};
use socket2::Socket;

use crate::open::mac_for_ip;

mod batch;
mod socket;
mod wire;

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
    /// Datagram mode: send runs of same-sized frames to one peer as one
    /// UDP GSO send each (`UDP_SEGMENT`; Linux 4.18+, ignored where the
    /// kernel lacks it). Over IPv4 the kernel numbers the segments of a
    /// send 0, 1, 2, ... (module docs), so segment `i`'s ICRC is computed
    /// with identification `i`: valid on the wire, but peers that do not
    /// recover identifications (`--no-ident-recovery`) receive only the
    /// sends that reach them whole (a GRO batch, as over `lo` or a veth).
    /// Default `false` (one datagram per frame on the wire, identification
    /// 0).
    pub gso: bool,
    /// Datagram mode: ask for UDP GRO (`UDP_GRO`, Linux 5.0+): the kernel
    /// may hand several datagrams of one sender in one buffer, which the
    /// backend splits. Nothing changes on the wire. Default `true`; off
    /// for a [`UdpConfig::shard`] (the kernel's GRO merges datagrams of one
    /// peer before the shard is chosen, whatever their QPNs).
    pub gro: bool,
    /// Datagram mode: be shard `index` of `count` backends that share the
    /// address and port (`SO_REUSEPORT`), one per core, each driving its
    /// own device: the kernel hands each datagram to the shard
    /// [`Shard::of_qpn`] names for its BTH destination QP, with a classic
    /// BPF selector that shard 0 attaches (docs/scaling.md). Bind the
    /// shards in index order and keep them all open (the kernel numbers a
    /// group's sockets in bind order). Default `None`.
    pub shard: Option<Shard>,
}

/// One of several backends sharing an address and port, steered by QPN
/// ([`UdpConfig::shard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This backend's place in the group, `0..count`.
    pub index: u16,
    /// How many backends share the port (at least 1).
    pub count: u16,
}

impl Shard {
    /// The shard that receives datagrams for destination QP `qpn`: `qpn`
    /// modulo `count` (what the kernel's selector computes from the BTH).
    /// A sharded device creates its QPs with numbers it owns
    /// (`Device::create_qp_with_qpn`).
    pub fn of_qpn(qpn: u32, count: u16) -> u16 {
        ((qpn & 0x00FF_FFFF) % u32::from(count.max(1))) as u16
    }
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
            gso: false,
            gro: true,
            shard: None,
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
    /// other than the expected one (0 + DF; for segment `i` of a GRO batch,
    /// `i` + DF), found from the ICRC (datagram mode).
    pub rx_icrc_ident_recovered: u64,
    /// IPv4 datagrams for which no identification/DF makes the ICRC verify
    /// (datagram mode, recovery on): corrupted, or from a sender whose
    /// header differs in another covered field. Delivered with the
    /// expected identification; the device drops them as ICRC errors.
    pub rx_icrc_ident_unsolved: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Frames dropped because they are not IPv4/IPv6 + UDP, or malformed.
    pub tx_not_udp: u64,
    /// Datagrams the kernel refused (e.g. `EMSGSIZE`, `ENOBUFS`); dropped.
    pub tx_errors: u64,
    /// UDP GSO sends: datagrams of two or more frames that the kernel cut
    /// into one datagram per frame.
    pub tx_gso_sends: u64,
    /// Received buffers that held two or more datagrams (UDP GRO).
    pub rx_gro_batches: u64,
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
    /// Datagram mode: GSO on (and supported).
    gso: bool,
    /// Datagram mode: the burst buffers.
    batch: Box<batch::Batch>,
    /// Raw mode: one frame's buffers.
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
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
            .field("gso", &self.gso)
            .field("peer_port", &self.peer_port)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

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
        wire::header_len(self.v6) + 4 + MAX_PAYLOAD
    }

    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        if self.raw.is_none() {
            return self.rx_batch(max, on_frame);
        }
        let mut n = 0;
        while n < max {
            match self.recv_raw()? {
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
        if self.raw.is_none() {
            return self.tx_batch(max, fill);
        }
        let mut n = 0;
        while n < max {
            let Some(len) = fill(&mut self.tx_buf) else {
                break;
            };
            let len = len.min(self.tx_buf.len());
            self.send_raw(len)?;
            n += 1;
        }
        Ok(n)
    }
}
