//! `tap`: frames over a Linux TAP interface (`/dev/net/tun`, `IFF_TAP`).
//!
//! A TAP interface is an Ethernet NIC whose wire is a file descriptor: every
//! frame the kernel sends out of the interface is one `read`, every `write`
//! is one frame the interface receives. The stack sits at the far end of
//! that wire, as a VM does behind QEMU's TAP backend. So it has a MAC
//! address of its own, never the interface's (the kernel, and a bridge the
//! interface is a port of, treat frames from the interface's own MAC as
//! their own and drop them).
//!
//! # Checksums and offloads (CASES R37)
//!
//! [`TapIo`] opens the interface with `IFF_NO_PI` and without
//! `IFF_VNET_HDR`, and sets its offloads to none (`TUNSETOFFLOAD` 0). With
//! no virtio-net header there is no way to pass "checksum partial" or GSO
//! metadata in either direction, and with no offloads advertised the kernel
//! completes every checksum and segments every GSO packet before the frame
//! reaches the descriptor: each read is one whole, fully checksummed frame of
//! at most MTU + 14 bytes (+ 4 with a VLAN tag). In the other direction the
//! kernel takes our frames as they are (`CHECKSUM_NONE`): the builder
//! computes the IPv4 header checksum in software and writes a UDP checksum
//! of 0 over IPv4 (RFC 768 "no checksum", what rxe and ConnectX send) or the
//! full RFC 768 checksum over IPv6 ([`roce_stack::wire::UdpChecksum`]),
//! never a partial value. On receive the device never reads the UDP
//! checksum (the ICRC protects the packet and masks that field), so a
//! partial or zero value from a peer that left it to an offload is accepted
//! (R37 a, b); `tests/tap_netns.rs` checks what actually crossed the bridge.
//!
//! # Neighbours
//!
//! The device's frames carry the next-hop MAC of the QP's address vector
//! (`AddressVector::dmac`), fixed when the QP is connected, as rdma-core
//! fixes it in `ibv_modify_qp` after the kernel resolved it. Here the
//! resolution is ARP / neighbour discovery by [`roce_stack::neigh`]:
//! [`TapHost::address_vector`] resolves the peer's IP and returns the
//! address vector to connect (or to put in a UD work request) with. The
//! same [`roce_stack::neigh::Neighbors`] answers ARP, neighbour
//! solicitations and pings for the stack's addresses, so the kernel and
//! other hosts can reach it. An entry that expires later does not change a
//! connected QP's address vector.
//!
//! - [`TapIo`]: the raw backend ([`FrameIo`]).
//! - [`TapHost`]: a [`Device`] and a [`TapIo`] behind a [`NeighIo`] (its
//!   [`Neighbors`]), driven by [`crate::pump()`] on the monotonic clock.
//! - [`open`]: the same [`NeighIo`] in front of a [`TapIo`], boxed, for a
//!   runner that only knows [`FrameIo`] (`roce perf --backend tap`).
//!
//! # Setting up by hand
//!
//! Two stacks (two `roce` processes) on two TAP interfaces bridged in a
//! network namespace of their own, the kernel on the bridge for `ping`:
//!
//! ```text
//! ip netns add roce && ip netns exec roce bash     # the rest inside it
//! ip link set lo up
//! ip link add rbr0 type bridge && ip link set rbr0 up
//! ip addr add 10.99.0.254/24 dev rbr0              # the kernel's address
//! for t in roce0 roce1; do
//!   ip tuntap add dev $t mode tap                  # persistent: roce attaches
//!   ip link set $t mtu 9000 master rbr0 up
//! done
//! roce perf write --server --backend tap --ifname roce0 --local-ip 10.99.0.1 &
//! roce perf write --client 127.0.0.1 --backend tap --ifname roce1 --local-ip 10.99.0.2
//! ping 10.99.0.1                                   # while a stack runs
//! ```
//!
//! The stack's MAC is `--mac`, or `02:00` and the four bytes of its IPv4
//! address ([`mac_for_ip`]); the TCP side channel (here over loopback)
//! carries the MACs, QPNs and keys.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use roce_stack::backend::FrameIo;
use roce_stack::neigh::{NeighConfig, Neighbors, Resolution};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::Device;

use crate::adapt::NeighIo;
use crate::open::{mac_for_ip, AnyIo, BackendError, BackendOptions, Opened};
use crate::pump::{pump, PumpStats};
use crate::sys;

/// Interface name [`open`] uses when none is given.
pub const DEFAULT_IFNAME: &str = "roce0";

/// Default MTU, bytes of IP packet per frame (Ethernet's 1500).
pub const DEFAULT_MTU: usize = 1500;

/// Ethernet header plus one 802.1Q tag, bytes: a frame is at most MTU + 18.
const L2_OVERHEAD: usize = 18;

/// Receive buffer, bytes: the largest frame a TAP descriptor can deliver
/// (64 KiB IP packet + L2), so an oversize frame is counted, not truncated.
const RX_BUF_LEN: usize = 65_536 + L2_OVERHEAD;

/// What a [`TapIo`] moved and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames read and handed on.
    pub rx_frames: u64,
    /// Frames written.
    pub tx_frames: u64,
    /// Frames read that were longer than [`FrameIo::max_frame_len`]
    /// (dropped; the interface's MTU was raised behind our back).
    pub rx_oversize: u64,
    /// Frames the kernel refused (`EIO` while the interface is down, as a
    /// NIC without link drops them); dropped, the transport retransmits.
    pub tx_dropped: u64,
}

/// A TAP interface as a [`FrameIo`]: one non-blocking `read` per received
/// frame, one `write` per sent frame, both on buffers allocated once.
#[derive(Debug)]
pub struct TapIo {
    file: File,
    name: String,
    mtu: usize,
    rx_buf: Box<[u8]>,
    tx_buf: Box<[u8]>,
    /// A frame in `tx_buf` the kernel would not take yet (`EAGAIN`).
    tx_pending: Option<usize>,
    stats: TapStats,
}

/// `e` with `what` in front of its message, same kind.
fn context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl TapIo {
    /// Open the TAP interface `name` (creating it if it does not exist, else
    /// attaching to a persistent one made with `ip tuntap add`), set its MTU
    /// to `mtu` bytes and bring it up, in the calling thread's network
    /// namespace. Frames of up to `mtu` + 18 bytes are moved. Needs
    /// `CAP_NET_ADMIN`.
    ///
    /// # Errors
    /// Opening `/dev/net/tun` (missing device node), `TUNSETIFF` (`EPERM`
    /// without the capability, `EBUSY` if another descriptor holds the
    /// interface), or setting the MTU or flags; the message names the step.
    pub fn open(name: &str, mtu: usize) -> io::Result<TapIo> {
        let io = TapIo::attach(name, mtu)?;
        sys::set_mtu(&io.name, mtu)
            .map_err(|e| context(e, format!("tap {}: MTU {mtu}", io.name)))?;
        sys::set_up(&io.name).map_err(|e| context(e, format!("tap {}: set up", io.name)))?;
        Ok(io)
    }

    /// Like [`TapIo::open`] but leave the interface's MTU and flags alone
    /// (configured by someone else, e.g. with `ip` in another network
    /// namespace); `mtu` only sizes the buffers.
    ///
    /// # Errors
    /// As [`TapIo::open`].
    pub fn attach(name: &str, mtu: usize) -> io::Result<TapIo> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")
            .map_err(|e| context(e, "open /dev/net/tun"))?;
        let name = sys::tap_attach(file.as_fd(), name)
            .map_err(|e| context(e, format!("tap {name}: TUNSETIFF")))?;
        Ok(TapIo {
            file,
            name,
            mtu,
            rx_buf: vec![0u8; RX_BUF_LEN].into_boxed_slice(),
            tx_buf: vec![0u8; mtu + L2_OVERHEAD].into_boxed_slice(),
            tx_pending: None,
            stats: TapStats::default(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MTU the buffers are sized for, bytes.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Counters.
    pub fn stats(&self) -> TapStats {
        self.stats
    }

    /// Wait until a frame can be read or `timeout` passes (poll(2)).
    /// Returns whether one can.
    ///
    /// # Errors
    /// poll(2)'s.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        sys::poll_readable(self.file.as_fd(), timeout)
    }

    /// Write the frame in `tx_buf[..len]`. `Ok(false)`: the kernel would
    /// block; keep it for later.
    fn write_frame(&mut self, len: usize) -> io::Result<bool> {
        let frame = self.tx_buf.get(..len).unwrap_or(&[]);
        loop {
            match (&self.file).write(frame) {
                Ok(_) => {
                    self.stats.tx_frames += 1;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    self.stats.tx_dropped += 1;
                    return Ok(true);
                }
                Err(e) => return Err(context(e, format!("tap {}: write", self.name))),
            }
        }
    }
}

/// The interface's descriptor: readable when a frame waits (what
/// [`TapIo::wait_readable`] polls).
impl AsFd for TapIo {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for TapIo {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl FrameIo for TapIo {
    type Error = io::Error;

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.file.as_fd())
    }

    fn max_frame_len(&self) -> usize {
        self.mtu + L2_OVERHEAD
    }

    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let limit = self.max_frame_len();
        let mut n = 0;
        while n < max {
            match (&self.file).read(&mut self.rx_buf) {
                Ok(len) if len > limit => self.stats.rx_oversize += 1,
                Ok(len) => {
                    on_frame(self.rx_buf.get(..len).unwrap_or(&[]));
                    self.stats.rx_frames += 1;
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(context(e, format!("tap {}: read", self.name))),
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
        if let Some(len) = self.tx_pending.take() {
            if !self.write_frame(len)? {
                self.tx_pending = Some(len);
                return Ok(0);
            }
            n += 1;
        }
        while n < max {
            let Some(len) = fill(&mut self.tx_buf) else {
                break;
            };
            let len = len.min(self.tx_buf.len());
            if !self.write_frame(len)? {
                self.tx_pending = Some(len);
                break;
            }
            n += 1;
        }
        Ok(n)
    }
}

/// A [`Device`] and the [`TapIo`] it shares with the [`Neighbors`] that
/// answer and resolve for it ([`NeighIo`]), on the monotonic clock
/// (nanoseconds since [`TapHost::new`]).
#[derive(Debug)]
pub struct TapHost {
    /// The RoCE device.
    pub dev: Device,
    /// The interface, with ARP/ND/ICMP for the device's MAC and GIDs in
    /// front.
    pub io: NeighIo<TapIo>,
}

impl TapHost {
    /// Join `dev` to `io`, with a [`Neighbors`] for the device's MAC and
    /// GIDs ([`NeighConfig::for_device`]).
    pub fn new(dev: Device, io: TapIo) -> TapHost {
        let cfg = NeighConfig {
            max_frame_len: io.max_frame_len(),
            ..NeighConfig::for_device(dev.config())
        };
        TapHost {
            dev,
            io: NeighIo::new(io, Neighbors::new(cfg)),
        }
    }

    /// The current time on this host's clock.
    pub fn now(&self) -> Instant {
        self.io.now()
    }

    /// The neighbours (cache, counters).
    pub fn neigh(&self) -> &Neighbors {
        self.io.neigh()
    }

    /// The interface.
    pub fn tap(&self) -> &TapIo {
        self.io.inner()
    }

    /// The interface, e.g. to write a frame past the device and the
    /// neighbours.
    pub fn tap_mut(&mut self) -> &mut TapIo {
        self.io.inner_mut()
    }

    /// One loop step at the current time ([`crate::pump()`]): up to `burst`
    /// frames in (ARP/ICMP to the neighbours, the rest to the device),
    /// timers, up to `burst` frames out (the neighbours' first).
    ///
    /// # Errors
    /// The interface's read or write error.
    pub fn poll(&mut self, burst: usize) -> io::Result<PumpStats> {
        let now = self.now();
        pump(&mut self.dev, &mut self.io, now, burst)
    }

    /// Sleep until a frame arrives, a timer of the device or the neighbours
    /// is due, or `max` passes, whichever is first. Returns whether a frame
    /// is waiting.
    ///
    /// # Errors
    /// poll(2)'s.
    pub fn wait(&self, max: Duration) -> io::Result<bool> {
        let now = self.now();
        let due = [self.dev.poll_timeout(), self.neigh().poll_at()]
            .into_iter()
            .flatten()
            .min()
            .map_or(max, |t| t.saturating_since(now).min(max));
        if due.is_zero() {
            return Ok(false);
        }
        self.tap().wait_readable(due)
    }

    /// Start resolving `ip` (see [`Neighbors::request`]); the requests go
    /// out from [`TapHost::poll`]. Returns the MAC if it is known.
    pub fn start_resolve(&mut self, ip: IpAddr) -> Option<[u8; 6]> {
        let now = self.now();
        self.io.neigh_mut().request(now, ip)
    }

    /// Where the resolution of `ip` stands.
    pub fn resolution(&self, ip: IpAddr) -> Resolution {
        self.neigh().status(self.now(), ip)
    }

    /// Resolve `ip` to a MAC by ARP (IPv4) or neighbour solicitation (IPv6),
    /// polling this host until it answers, [`NeighConfig::max_probes`]
    /// requests go unanswered, or `timeout` passes. For a peer served by
    /// the same thread, call [`TapHost::start_resolve`] and poll both hosts
    /// instead.
    ///
    /// # Errors
    /// `TimedOut` when no answer came; the interface's errors.
    pub fn resolve(&mut self, ip: IpAddr, timeout: Duration) -> io::Result<[u8; 6]> {
        let start = std::time::Instant::now();
        self.start_resolve(ip);
        loop {
            match self.resolution(ip) {
                Resolution::Reachable(mac) => return Ok(mac),
                Resolution::Failed => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{ip}: no answer to ARP / neighbour solicitation"),
                    ))
                }
                Resolution::Unknown => {
                    self.start_resolve(ip);
                }
                Resolution::Resolving => {}
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{ip}: not resolved within {timeout:?}"),
                ));
            }
            self.poll(32)?;
            self.wait(left.min(Duration::from_millis(10)))?;
        }
    }

    /// The address vector of the peer at `ip`: its GID, and its MAC as
    /// [`TapHost::resolve`] finds it; hop limit 64, GID index 0.
    ///
    /// # Errors
    /// As [`TapHost::resolve`].
    pub fn address_vector(&mut self, ip: IpAddr, timeout: Duration) -> io::Result<AddressVector> {
        let dmac = self.resolve(ip, timeout)?;
        Ok(AddressVector {
            dgid: Gid::from_ip(ip),
            dmac,
            hop_limit: 64,
            ..AddressVector::default()
        })
    }
}

/// The MTU of interface `name` in this network namespace, if it exists
/// (`/sys/class/net/NAME/mtu`).
fn current_mtu(name: &str) -> Option<usize> {
    if name.contains('/') {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Open the `tap` backend for a process-to-process run (`roce perf
/// --backend tap`): the interface `o.ifname` (default [`DEFAULT_IFNAME`]),
/// MTU large enough for `o.max_frame_len` (at least [`DEFAULT_MTU`], and
/// never lowered), up;
/// the stack's address `o.local_ip` (required) with MAC `o.mac` or else
/// [`mac_for_ip`] of it (never the interface's own MAC, see the module
/// docs); ARP, neighbour discovery and pings answered by a [`NeighIo`].
///
/// # Errors
/// No `local_ip`; the interface's errors ([`TapIo::open`]).
pub fn open(o: &BackendOptions) -> Result<Opened, BackendError> {
    let ip = o.local_ip.ok_or_else(|| {
        BackendError::msg(
            "tap: the stack's IP address is required (--local-ip): the address it answers ARP and ping for",
        )
    })?;
    let name = o.ifname.as_deref().unwrap_or(DEFAULT_IFNAME);
    // Large enough for the run's frames; an interface set up by hand with a
    // larger MTU keeps it.
    let mtu = o
        .max_frame_len
        .saturating_sub(14)
        .max(DEFAULT_MTU)
        .max(current_mtu(name).unwrap_or(0));
    let io = TapIo::open(name, mtu).map_err(|e| BackendError::with("tap", e))?;
    let mac = o.mac.unwrap_or_else(|| mac_for_ip(ip));
    Ok(Opened {
        io: AnyIo::new(NeighIo::for_address(io, ip, mac)),
        ip,
        mac,
        udp: None,
        #[cfg(feature = "udp")]
        routes: None,
    })
}
