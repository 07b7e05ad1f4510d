//! The one place this crate names the backends (the `roce-io` crate). It
//! opens the configured backend and gives the engine a [`FrameIo`] plus
//! what it needs around it: the device's IP and MAC, the neighbour table of
//! an Ethernet backend (to resolve peers' MACs by ARP / neighbour
//! discovery, [`NeighIo`]), and the descriptor to sleep on
//! ([`FrameIo::wait_fd`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use roce_io::adapt::NeighIo;
use roce_io::tap::TapIo;
use roce_io::udp::{UdpConfig, UdpIo};
use roce_io::{mac_for_ip, AnyIo, BackendOptions, FrameIo};
use roce_stack::neigh::{Neighbors, Resolution};
use roce_stack::time::Instant;

use crate::config::{BackendKind, Config};
use crate::ffi::sys;

enum Io {
    Udp(UdpIo),
    Tap(NeighIo<TapIo>),
    Dpdk(NeighIo<AnyIo>),
}

/// An opened backend.
pub struct Backend {
    io: Io,
    /// The device's IP address (GID 0).
    pub ip: IpAddr,
    /// The device's MAC.
    pub mac: [u8; 6],
    /// The descriptor that becomes readable when a frame arrives
    /// ([`FrameIo::wait_fd`], valid while the backend lives); `None` for
    /// DPDK (a poll-mode driver: the progress thread naps and polls).
    pub fd: Option<RawFd>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("ip", &self.ip)
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// Open the backend `cfg` names.
    ///
    /// # Errors
    /// One line: the backend and what failed (bind, interface, EAL).
    pub fn open(cfg: &Config) -> Result<Backend, String> {
        let ip = cfg.local_ip;
        let max_frame_len = cfg.mtu.bytes() + 256;
        match cfg.backend {
            BackendKind::Udp => {
                let bind = SocketAddr::new(ip, cfg.udp_port);
                let mut u = UdpConfig::new(bind);
                u.peer_port = cfg.udp_port;
                u.gso = cfg.udp_gso;
                let io = UdpIo::bind(u).map_err(|e| {
                    format!(
                        "udp backend: bind {bind}: {e} (another process on this address? \
                         set ROCE_LOCAL_IP or ROCE_UDP_PORT)"
                    )
                })?;
                let fd = io.wait_fd().map(|f| f.as_raw_fd());
                Ok(Backend {
                    io: Io::Udp(io),
                    ip,
                    mac: mac_for_ip(ip),
                    fd,
                })
            }
            BackendKind::Tap => {
                let mtu = cfg.netdev_mtu();
                let io = TapIo::open(&cfg.ifname, mtu)
                    .map_err(|e| format!("tap backend: {e} (needs root / CAP_NET_ADMIN)"))?;
                let mac = mac_for_ip(ip);
                let fd = io.wait_fd().map(|f| f.as_raw_fd());
                Ok(Backend {
                    io: Io::Tap(NeighIo::for_address(io, ip, mac)),
                    ip,
                    mac,
                    fd,
                })
            }
            BackendKind::Dpdk => {
                let o = BackendOptions {
                    local_ip: Some(ip),
                    eal_args: cfg.dpdk_args.clone(),
                    max_frame_len,
                    ..BackendOptions::default()
                };
                // Without waiting for the link: the device opens with the
                // program's `ibv_open_device`, before its side channel, and a
                // `net_memif` server's link comes up only once its client has
                // started (which it does after the side channel connects).
                // Frames sent before the link is up are lost and resent (ARP
                // requests by the neighbour table, RC by its timers).
                //
                // The EAL pins the thread that initialises it (the
                // program's, here) to its main lcore; the program's threads
                // are not ours to pin, and the progress thread (spawned from
                // this one) must stay free to run beside a program that
                // spins on its buffer: the affinity is put back.
                let affinity = sys::thread_affinity().ok();
                let opened = roce_io::open_dpdk_unlinked(&o);
                if let Some(a) = &affinity {
                    if let Err(e) = sys::set_thread_affinity(a) {
                        tracing::warn!(%e, "could not restore the thread's CPU affinity after the EAL");
                    }
                }
                let opened = opened.map_err(|e| format!("dpdk backend: {e}"))?;
                let fd = opened.io.wait_fd().map(|f| f.as_raw_fd());
                Ok(Backend {
                    io: Io::Dpdk(NeighIo::for_address(opened.io, ip, opened.mac)),
                    ip,
                    mac: opened.mac,
                    fd,
                })
            }
        }
    }

    /// Whether peers' MACs must be resolved (an Ethernet backend); the
    /// `udp` backend's medium has none and any MAC does.
    pub fn resolves(&self) -> bool {
        !matches!(self.io, Io::Udp(_))
    }

    /// Start resolving `ip`: its MAC if it is known. The requests go out
    /// with the next transmit burst.
    pub fn request(&mut self, ip: IpAddr) -> Option<[u8; 6]> {
        match &mut self.io {
            Io::Udp(_) => Some(mac_for_ip(ip)),
            Io::Tap(n) => {
                let now = n.now();
                n.neigh_mut().request(now, ip)
            }
            Io::Dpdk(n) => {
                let now = n.now();
                n.neigh_mut().request(now, ip)
            }
        }
    }

    /// Where the resolution of `ip` stands.
    pub fn resolution(&self, ip: IpAddr) -> Resolution {
        match &self.io {
            Io::Udp(_) => Resolution::Reachable(mac_for_ip(ip)),
            Io::Tap(n) => n.neigh().status(n.now(), ip),
            Io::Dpdk(n) => n.neigh().status(n.now(), ip),
        }
    }

    /// How long until the neighbour table has a timer due (a request to
    /// repeat), if it has one.
    pub fn neigh_due(&self) -> Option<std::time::Duration> {
        let f = |n: &Neighbors, now: Instant| n.poll_at().map(|t| t.saturating_since(now));
        match &self.io {
            Io::Udp(_) => None,
            Io::Tap(n) => f(n.neigh(), n.now()),
            Io::Dpdk(n) => f(n.neigh(), n.now()),
        }
    }
}

impl FrameIo for Backend {
    type Error = io::Error;

    fn max_frame_len(&self) -> usize {
        match &self.io {
            Io::Udp(u) => u.max_frame_len(),
            Io::Tap(t) => t.max_frame_len(),
            Io::Dpdk(d) => d.max_frame_len(),
        }
    }

    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, io::Error> {
        match &mut self.io {
            Io::Udp(u) => u.rx_burst(max, on_frame),
            Io::Tap(t) => t.rx_burst(max, on_frame),
            Io::Dpdk(d) => d.rx_burst(max, on_frame).map_err(io::Error::other),
        }
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, io::Error> {
        match &mut self.io {
            Io::Udp(u) => u.tx_burst(max, fill),
            Io::Tap(t) => t.tx_burst(max, fill),
            Io::Dpdk(d) => d.tx_burst(max, fill).map_err(io::Error::other),
        }
    }
}
