//! A backend chosen at run time (`roce perf --backend`, `ROCE_BACKEND`).
//!
//! A run that does not know its backend's type at compile time holds an
//! [`AnyIo`]: any backend, its errors boxed into a [`BackendError`]. A
//! process-to-process run (`roce perf --server` / `--client`, the
//! libibverbs crate) opens one with [`open`], which returns the backend
//! together with the addresses the local device must use ([`Opened`]).
//!
//! # Plugging in a backend (TAP, DPDK)
//!
//! A backend module provides `open(&BackendOptions) -> Result<Opened,
//! BackendError>`: it sets the interface up, and returns the `FrameIo`
//! wrapped in an [`AnyIo`] ([`AnyIo::new`]) with its local IP address (the
//! device's GID 0), MAC address, and UDP socket address if it has one.
//! [`open`] dispatches on [`BackendKind`]; `tap::open` is called for `tap`,
//! [`open_dpdk`] (which needs the `dpdk` feature) for `dpdk`. A backend
//! whose feature is off is refused with a message naming the feature.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use std::os::fd::BorrowedFd;

use roce_stack::backend::{FrameIo, TxFrame};

/// The backends `--backend` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// In-memory queues between two endpoints of one process (default).
    Mem,
    /// A kernel UDP socket on port 4791 (unprivileged; RoCEv2 headers are
    /// synthesised around the UDP payload).
    Udp,
    /// A Linux TAP interface (root or `CAP_NET_ADMIN`).
    Tap,
    /// Frames read from a capture, frames written to a capture.
    Pcap,
    /// A DPDK poll-mode driver (a build with `--features dpdk`).
    Dpdk,
}

impl BackendKind {
    /// Every kind, in the order `--help` lists them.
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Mem,
        BackendKind::Udp,
        BackendKind::Tap,
        BackendKind::Pcap,
        BackendKind::Dpdk,
    ];

    /// One line on what it is (the `--help` text of each value).
    pub fn about(self) -> &'static str {
        match self {
            BackendKind::Mem => "In-memory queues between two endpoints of one process (default)",
            BackendKind::Udp => {
                "A kernel UDP socket on port 4791 (unprivileged; RoCEv2 headers are synthesised \
                 around the UDP payload)"
            }
            BackendKind::Tap => "A Linux TAP interface (root or `CAP_NET_ADMIN`)",
            BackendKind::Pcap => "Frames read from a capture, frames written to a capture",
            BackendKind::Dpdk => "A DPDK poll-mode driver (a build with `--features dpdk`)",
        }
    }

    /// The name `--backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Mem => "mem",
            BackendKind::Udp => "udp",
            BackendKind::Tap => "tap",
            BackendKind::Pcap => "pcap",
            BackendKind::Dpdk => "dpdk",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;

    /// A kind by its [`BackendKind::name`].
    fn from_str(s: &str) -> Result<BackendKind, String> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown backend {s:?} (mem, udp, tap, pcap or dpdk)"))
    }
}

/// The message of a `--backend dpdk` run in a build without DPDK.
pub const NO_DPDK: &str = "built without DPDK support; rebuild with --features dpdk";

/// A backend's failure, with its cause.
#[derive(Debug)]
pub struct BackendError {
    what: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl BackendError {
    /// An error with a message only.
    pub fn msg(what: impl Into<String>) -> BackendError {
        BackendError {
            what: what.into(),
            source: None,
        }
    }
    /// An error with a message and the error that caused it.
    pub fn with(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BackendError {
        BackendError {
            what: what.into(),
            source: Some(Box::new(source)),
        }
    }
    /// Wrap any backend error (the message is its `Display`).
    pub fn wrap(e: impl std::error::Error + Send + Sync + 'static) -> BackendError {
        BackendError {
            what: e.to_string(),
            source: None,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{}: {s}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The type-erased form of a backend: its errors become [`BackendError`].
trait ErasedIo: Send {
    fn max_frame_len(&self) -> usize;
    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, BackendError>;
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, BackendError>;
    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, BackendError>;
    fn wait_fd(&self) -> Option<BorrowedFd<'_>>;
}

impl<B> ErasedIo for B
where
    B: FrameIo + Send,
{
    fn max_frame_len(&self) -> usize {
        FrameIo::max_frame_len(self)
    }
    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, BackendError> {
        FrameIo::rx_burst(self, max, on_frame).map_err(BackendError::wrap)
    }
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, BackendError> {
        FrameIo::tx_burst(self, max, fill).map_err(BackendError::wrap)
    }
    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, BackendError> {
        FrameIo::tx_burst_gather(self, max, fill).map_err(BackendError::wrap)
    }
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        FrameIo::wait_fd(self)
    }
}

/// Any backend, chosen at run time: one virtual call per burst. Zero-copy
/// transmit and [`FrameIo::wait_fd`] reach the backend inside.
pub struct AnyIo(Box<dyn ErasedIo>);

impl AnyIo {
    /// Box `io`.
    pub fn new<B: FrameIo + Send + 'static>(io: B) -> AnyIo {
        AnyIo(Box::new(io))
    }
}

impl fmt::Debug for AnyIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyIo")
            .field("max_frame_len", &self.0.max_frame_len())
            .finish_non_exhaustive()
    }
}

impl FrameIo for AnyIo {
    type Error = BackendError;

    fn max_frame_len(&self) -> usize {
        self.0.max_frame_len()
    }
    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, BackendError> {
        self.0.rx_burst(max, on_frame)
    }
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, BackendError> {
        self.0.tx_burst(max, fill)
    }
    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, BackendError> {
        self.0.tx_burst_gather(max, fill)
    }
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.wait_fd()
    }
}

/// What a process-to-process run asks of its backend (`roce perf --server`
/// / `--client`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// The local IP address: the device's GID 0 and, for `udp`, the address
    /// the socket binds. `None`: the backend's own choice (`udp`: the local
    /// address of the TCP side channel).
    pub local_ip: Option<IpAddr>,
    /// `udp`: the local UDP port (0 = any free port; RoCEv2's is 4791).
    pub udp_port: u16,
    /// `udp`: raw mode (IPv4, `CAP_NET_RAW`; `udp::UdpConfig::raw`).
    pub udp_raw: bool,
    /// `udp`: do not recover the IPv4 identification of received datagrams
    /// from their ICRC (`udp::UdpConfig::ident_recovery` `false`).
    pub udp_no_ident_recovery: bool,
    /// `udp`: one datagram per frame, no UDP GSO (`udp::UdpConfig::gso`
    /// `false`; the perf runs use GSO by default).
    pub udp_no_gso: bool,
    /// `tap`: the interface name (e.g. `roce0`); `None` = the backend's default.
    pub ifname: Option<String>,
    /// Ethernet backends: the device's MAC; `None` = the interface's own
    /// (TAP, DPDK) or a locally administered one derived from the IP.
    pub mac: Option<[u8; 6]>,
    /// `dpdk`: the EAL arguments (what follows `--` on the command line).
    pub eal_args: Vec<String>,
    /// The largest frame the run sends, bytes (without FCS).
    pub max_frame_len: usize,
}

/// An opened backend and the addresses the local device must use.
#[derive(Debug)]
pub struct Opened {
    /// The backend.
    pub io: AnyIo,
    /// The device's IP address (GID 0 is its IPv4-mapped or IPv6 form).
    pub ip: IpAddr,
    /// The device's MAC address.
    pub mac: [u8; 6],
    /// The UDP socket address peers send to (`udp` only).
    pub udp: Option<SocketAddr>,
    /// A handle that routes frames for a peer IP to a UDP socket address
    /// (`udp` only; see [`crate::udp::Routes`]).
    #[cfg(feature = "udp")]
    pub routes: Option<crate::udp::Routes>,
}

/// A locally administered unicast MAC derived from an IP address:
/// `02:00` followed by the last four bytes of the address (IEEE 802
/// §8.2.2: bit 1 of the first byte set = locally administered). The `udp`
/// backend's frames carry these (the medium has no MACs).
pub fn mac_for_ip(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let b = a.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// The message for a backend whose cargo feature is off.
#[allow(dead_code)]
fn without(feature: &str) -> String {
    format!("built without the {feature} backend (the roce-io feature `{feature}`)")
}

/// Open a backend of `kind` for a process-to-process run.
///
/// # Errors
/// `mem` and `pcap` cannot link two processes; `dpdk` without the `dpdk`
/// feature gives [`NO_DPDK`]; otherwise the backend's own failure (socket,
/// interface, EAL).
pub fn open(kind: BackendKind, o: &BackendOptions) -> Result<Opened, BackendError> {
    match kind {
        BackendKind::Mem => Err(BackendError::msg(
            "the mem backend joins two devices of one process; use udp, tap or dpdk between processes",
        )),
        BackendKind::Pcap => Err(BackendError::msg(
            "the pcap backend replays captures (see `roce replay`); use udp, tap or dpdk between processes",
        )),
        #[cfg(feature = "udp")]
        BackendKind::Udp => crate::udp::open(o),
        #[cfg(feature = "tap")]
        BackendKind::Tap => crate::tap::open(o),
        #[cfg(not(feature = "udp"))]
        BackendKind::Udp => Err(BackendError::msg(without("udp"))),
        #[cfg(not(feature = "tap"))]
        BackendKind::Tap => Err(BackendError::msg(without("tap"))),
        BackendKind::Dpdk => open_dpdk(o),
    }
}

/// The DPDK hook: initialise the EAL with `o.eal_args`, open the port and
/// return it as an [`Opened`] (its MAC, `o.local_ip` as the IP).
///
/// # Errors
/// Without the `dpdk` feature: always [`NO_DPDK`].
#[cfg(not(feature = "dpdk"))]
pub fn open_dpdk(o: &BackendOptions) -> Result<Opened, BackendError> {
    let _ = o;
    Err(BackendError::msg(NO_DPDK))
}

/// The DPDK hook: initialise the EAL with `o.eal_args`, take its first
/// port (as [`dpdk_glue::DpdkPort::open`] does: a pool of 8191 mbufs, one
/// queue pair, a 9000-byte MTU when the run's frames need more than 1500),
/// start it, wait up to [`DPDK_LINK_TIMEOUT`] for its link, and return it
/// as an [`Opened`]: `o.local_ip` as the IP (required: a DPDK port has no
/// address of its own), `o.mac` or the port's MAC.
///
/// # Errors
/// No local IP, or the EAL's or the port's failure (a link still down).
#[cfg(feature = "dpdk")]
pub fn open_dpdk(o: &BackendOptions) -> Result<Opened, BackendError> {
    open_dpdk_with(o, Some(DPDK_LINK_TIMEOUT))
}

/// Like [`open_dpdk`], without waiting for the link: what a `--server`
/// does before it listens on the side channel, so that a `net_memif`
/// server socket exists before a client can connect to it (a memif client
/// port fails to start while its server's socket is missing, and the
/// server's link comes up only once a client has started).
///
/// # Errors
/// As [`open_dpdk`], except a link that is down.
#[cfg(feature = "dpdk")]
pub fn open_dpdk_unlinked(o: &BackendOptions) -> Result<Opened, BackendError> {
    open_dpdk_with(o, None)
}

/// Without the `dpdk` feature: always [`NO_DPDK`].
///
/// # Errors
/// Always [`NO_DPDK`].
#[cfg(not(feature = "dpdk"))]
pub fn open_dpdk_unlinked(o: &BackendOptions) -> Result<Opened, BackendError> {
    open_dpdk(o)
}

/// How long [`open_dpdk`] waits for the port's link.
pub const DPDK_LINK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[cfg(feature = "dpdk")]
fn open_dpdk_with(
    o: &BackendOptions,
    link_timeout: Option<std::time::Duration>,
) -> Result<Opened, BackendError> {
    use dpdk_glue::{DpdkPort, Eal, Mempool, Port};
    let ip = o
        .local_ip
        .ok_or_else(|| BackendError::msg("dpdk: give the device's address with --local-ip"))?;
    let mtu: u16 = if o.max_frame_len > 1514 { 9000 } else { 1500 };
    let dpdk = |e| BackendError::with("dpdk", e);
    let eal = match Eal::get() {
        Some(e) => e,
        None => Eal::init(&o.eal_args).map_err(dpdk)?,
    };
    let id = *eal
        .available_ports()
        .map_err(dpdk)?
        .first()
        .ok_or_else(|| dpdk(dpdk_glue::DpdkError::NoPorts))?;
    let room = usize::from(mtu) + dpdk_glue::FRAME_OVERHEAD + dpdk_glue::HEADROOM;
    let pool = Mempool::new(
        &format!("roce_pool{id}"),
        8191,
        256,
        dpdk_glue::DEFAULT_DATA_ROOM.max(u16::try_from(room).unwrap_or(u16::MAX)),
    )
    .map_err(dpdk)?;
    let port = Port::configure(id, 1, 1, &pool, mtu).map_err(|e| {
        BackendError::with(
            format!(
                "dpdk: port MTU {mtu} (a path MTU above 1024 needs 9000; ports limited \
                 to 1500-byte frames, e.g. net_memif, need --mtu 1024 or less)"
            ),
            e,
        )
    })?;
    let mut port = DpdkPort::new(port).map_err(dpdk)?;
    if let Some(t) = link_timeout {
        port.port().wait_link_up(t).map_err(dpdk)?;
    }
    let port_mac = port
        .port()
        .mac_addr()
        .map_err(|e| BackendError::with("dpdk: port MAC", e))?;
    let mac = o.mac.unwrap_or(port_mac);
    if mac != port_mac {
        // The port is not promiscuous (dpdk-glue `PortConfig`): let it take
        // the device's own MAC too. Drivers without MAC filters (memif,
        // ring: ENOTSUP) pass every frame anyway; a full filter table falls
        // back to promiscuous mode.
        match port.port().add_mac_addr(mac) {
            Ok(()) | Err(dpdk_glue::DpdkError::Call { errno: 95, .. }) => {}
            Err(_) => port
                .port_mut()
                .set_promiscuous(true)
                .map_err(|e| BackendError::with("dpdk: promiscuous mode for --mac", e))?,
        }
    }
    Ok(Opened {
        io: AnyIo::new(port),
        ip,
        mac,
        udp: None,
        #[cfg(feature = "udp")]
        routes: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_for_ip_is_locally_administered_unicast() {
        let m = mac_for_ip("127.0.0.2".parse().unwrap());
        assert_eq!(m, [0x02, 0, 127, 0, 0, 2]);
        assert_eq!(m[0] & 0x03, 0x02);
    }

    #[test]
    fn dpdk_without_the_feature_says_how_to_get_it() {
        if cfg!(feature = "dpdk") {
            return;
        }
        let e = open(BackendKind::Dpdk, &BackendOptions::default()).unwrap_err();
        assert_eq!(e.to_string(), NO_DPDK);
    }
}
