//! [`Port`]: one ethdev port, configured, started and polled in bursts.

use std::ffi::CStr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use dpdk_sys::{rte_eth_conf, rte_eth_dev_info, rte_eth_link, rte_eth_stats};

use crate::eal::{control_lock, ensure_init};
use crate::error::{check, DpdkError};
use crate::mbuf::{free_bulk, Mbuf};
use crate::mempool::Mempool;

/// Largest burst passed to the driver in one call.
pub const MAX_BURST: usize = 512;

/// Ethernet header plus one VLAN tag, bytes: what a frame adds to the MTU
/// (the FCS is the driver's).
pub const FRAME_OVERHEAD: usize = 14 + 4;

/// Ports driven by a [`Port`] right now (bit per port id), so that two
/// handles can never poll one queue concurrently.
static CLAIMED: Mutex<[bool; dpdk_sys::RTE_MAX_ETHPORTS as usize]> =
    Mutex::new([false; dpdk_sys::RTE_MAX_ETHPORTS as usize]);

/// How to set a port up; [`PortConfig::default`] is one RX and one TX queue,
/// 1500-byte MTU, 512 descriptors each way, not promiscuous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// Receive queues.
    pub rx_queues: u16,
    /// Transmit queues.
    pub tx_queues: u16,
    /// MTU, bytes (IP packet size; the frame adds [`FRAME_OVERHEAD`]).
    pub mtu: u16,
    /// Receive descriptors per queue (adjusted to the driver's limits).
    pub rx_desc: u16,
    /// Transmit descriptors per queue (adjusted to the driver's limits).
    pub tx_desc: u16,
    /// Accept frames for any destination MAC (`rte_eth_promiscuous_enable`).
    /// Default `false`: the port takes frames for its own MAC (and the ones
    /// added with [`Port::add_mac_addr`]), broadcast and the multicast groups
    /// the driver passes, as a kernel interface does; a device whose
    /// `DeviceConfig::mac` differs from the port's MAC needs that MAC added
    /// (or this set). The stack checks the destination MAC itself as well
    /// (`rx_dmac_mismatch`), so promiscuous mode costs receive work, not
    /// correctness. Drivers without the notion (memif, ring, pcap) pass every
    /// frame either way.
    pub promiscuous: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            mtu: 1500,
            rx_desc: 512,
            tx_desc: 512,
            promiscuous: false,
        }
    }
}

/// Link state (`struct rte_eth_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Link up.
    pub up: bool,
    /// Speed, Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Port counters (`struct rte_eth_stats`), totals since start or reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Frames the hardware dropped for lack of RX descriptors.
    pub imissed: u64,
    /// Erroneous received frames.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// The exclusive right to drive one port id; released on drop.
#[derive(Debug)]
struct Claim(u16);

impl Claim {
    fn take(port_id: u16) -> Result<Claim, DpdkError> {
        let mut claimed = CLAIMED.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = claimed
            .get_mut(usize::from(port_id))
            .ok_or_else(|| DpdkError::NoSuchPort(port_id.to_string()))?;
        if *slot {
            return Err(DpdkError::PortInUse(port_id));
        }
        *slot = true;
        Ok(Claim(port_id))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = claimed.get_mut(usize::from(self.0)) {
            *slot = false;
        }
    }
}

/// A configured ethdev port and the pool its receive queues fill from.
/// Dropping it stops and closes the port (a vdev's kernel interface, socket
/// or pcap file goes with it).
#[derive(Debug)]
pub struct Port {
    id: u16,
    _claim: Claim,
    name: String,
    pool: Mempool,
    cfg: PortConfig,
    started: bool,
    multi_seg_tx: bool,
    driver: String,
}

impl Port {
    /// Configure port `port_id` with `rx_queues`/`tx_queues` queues, an MTU
    /// of `mtu` bytes and receive buffers from `pool`; other settings as
    /// [`PortConfig::default`].
    ///
    /// # Errors
    /// See [`Port::configure_with`].
    pub fn configure(
        port_id: u16,
        rx_queues: u16,
        tx_queues: u16,
        pool: &Mempool,
        mtu: u16,
    ) -> Result<Port, DpdkError> {
        Port::configure_with(
            port_id,
            pool,
            &PortConfig {
                rx_queues,
                tx_queues,
                mtu,
                ..PortConfig::default()
            },
        )
    }

    /// Configure port `port_id` as `cfg` says (`rte_eth_dev_configure`, then
    /// every queue's `rte_eth_*x_queue_setup`). Multi-segment transmit is
    /// enabled when the driver offers it. The port is not started.
    ///
    /// # Errors
    /// [`DpdkError::NoSuchPort`]; [`DpdkError::PortInUse`] if another `Port`
    /// drives it; [`DpdkError::PoolTooSmall`] when `pool` has fewer mbufs
    /// than the receive descriptors (plus a burst per queue) or its data
    /// room is shorter than an MTU-sized frame; [`DpdkError::InvalidArgument`]
    /// for queue counts or an MTU outside the driver's limits;
    /// [`DpdkError::Call`] from DPDK.
    pub fn configure_with(
        port_id: u16,
        pool: &Mempool,
        cfg: &PortConfig,
    ) -> Result<Port, DpdkError> {
        ensure_init()?;
        let _g = control_lock();
        // SAFETY: EAL up; a plain query for any id.
        if unsafe { dpdk_sys::rte_eth_dev_is_valid_port(port_id) } == 0 {
            return Err(DpdkError::NoSuchPort(port_id.to_string()));
        }
        let mut info = rte_eth_dev_info::default();
        // SAFETY: valid port; `info` is a valid out pointer.
        check("rte_eth_dev_info_get", unsafe {
            dpdk_sys::rte_eth_dev_info_get(port_id, &mut info)
        })?;
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: a static NUL-terminated string owned by the driver.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        if cfg.rx_queues == 0 || cfg.rx_queues > info.max_rx_queues {
            return Err(DpdkError::InvalidArgument {
                value: format!(
                    "{} RX queues (driver max {})",
                    cfg.rx_queues, info.max_rx_queues
                ),
                reason: "RX queue count out of the driver's range",
            });
        }
        if cfg.tx_queues == 0 || cfg.tx_queues > info.max_tx_queues {
            return Err(DpdkError::InvalidArgument {
                value: format!(
                    "{} TX queues (driver max {})",
                    cfg.tx_queues, info.max_tx_queues
                ),
                reason: "TX queue count out of the driver's range",
            });
        }
        if cfg.mtu < info.min_mtu || cfg.mtu > info.max_mtu {
            return Err(DpdkError::InvalidArgument {
                value: format!(
                    "MTU {} (driver range {}..={})",
                    cfg.mtu, info.min_mtu, info.max_mtu
                ),
                reason: "MTU out of the driver's range",
            });
        }
        let frame = usize::from(cfg.mtu) + FRAME_OVERHEAD;
        if pool.frame_room() < frame {
            return Err(DpdkError::PoolTooSmall {
                pool: pool.name().to_string(),
                what: "data room per mbuf for an MTU-sized frame (bytes, without headroom)",
                needed: frame as u64,
                have: pool.frame_room() as u64,
            });
        }
        // Receive descriptors as the driver will adjust them (clamped to
        // its limits), each holding an mbuf, plus a burst in flight.
        let lim = info.rx_desc_lim;
        let mut nb_rxd = cfg.rx_desc.clamp(lim.nb_min, lim.nb_max.max(lim.nb_min));
        let mut nb_txd = cfg.tx_desc;
        let needed = u64::from(cfg.rx_queues) * (u64::from(nb_rxd) + MAX_BURST as u64);
        if u64::from(pool.size()) < needed {
            return Err(DpdkError::PoolTooSmall {
                pool: pool.name().to_string(),
                what: "mbufs for the receive descriptors plus one burst per RX queue",
                needed,
                have: u64::from(pool.size()),
            });
        }
        let mut conf = rte_eth_conf::default();
        conf.rxmode.mtu = u32::from(cfg.mtu);
        let multi_seg_tx = info.tx_offload_capa & dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS != 0;
        if multi_seg_tx {
            conf.txmode.offloads |= dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
        }
        // Claim the port before touching its configuration; an error below
        // releases the claim and leaves the port unconfigured but open.
        let claim = Claim::take(port_id)?;
        // SAFETY: valid, stopped port that we claimed; `conf` is a fully
        // initialised rte_eth_conf that DPDK copies.
        check("rte_eth_dev_configure", unsafe {
            dpdk_sys::rte_eth_dev_configure(port_id, cfg.rx_queues, cfg.tx_queues, &conf)
        })?;
        // SAFETY: configured port; valid in/out pointers.
        check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nb_rxd, &mut nb_txd)
        })?;
        // SAFETY: configured port; a plain query.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(port_id) };
        let socket = if socket < 0 {
            dpdk_sys::SOCKET_ID_ANY
        } else {
            socket
        };
        let socket = socket as u32;
        for q in 0..cfg.rx_queues {
            // SAFETY: configured port, q < rx_queues; NULL rxconf = driver
            // defaults; the pool outlives the port (Port holds a clone).
            check("rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    port_id,
                    q,
                    nb_rxd,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            })?;
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: configured port, q < tx_queues; NULL txconf = driver
            // defaults plus the port-level offloads.
            check("rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(port_id, q, nb_txd, socket, std::ptr::null())
            })?;
        }
        Ok(Port {
            id: port_id,
            _claim: claim,
            name: port_name(port_id),
            pool: pool.clone(),
            cfg: PortConfig {
                rx_desc: nb_rxd,
                tx_desc: nb_txd,
                ..*cfg
            },
            started: false,
            multi_seg_tx,
            driver,
        })
    }

    /// Port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Device name (e.g. `net_memif0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Driver name (e.g. `net_memif`).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The configuration in force (descriptor counts as adjusted).
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// The pool receive buffers come from.
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// Whether multi-segment transmit was enabled (the driver offers
    /// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`). Some virtual drivers (net_ring)
    /// pass chains through without offering it.
    pub fn multi_seg_tx(&self) -> bool {
        self.multi_seg_tx
    }

    /// Largest frame this port sends or receives, bytes: MTU plus Ethernet
    /// header and one VLAN tag.
    pub fn max_frame_len(&self) -> usize {
        usize::from(self.cfg.mtu) + FRAME_OVERHEAD
    }

    /// Start the port (`rte_eth_dev_start`), then enable or disable
    /// promiscuous mode as configured ([`PortConfig::promiscuous`]).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn start(&mut self) -> Result<(), DpdkError> {
        if self.started {
            return Ok(());
        }
        let _g = control_lock();
        // SAFETY: configured port we own.
        check("rte_eth_dev_start", unsafe {
            dpdk_sys::rte_eth_dev_start(self.id)
        })?;
        self.started = true;
        self.apply_promiscuous(self.cfg.promiscuous)
    }

    /// `rte_eth_promiscuous_enable` / `_disable`. Drivers without the
    /// notion (memif, ring, pcap) return ENOTSUP, which is harmless.
    fn apply_promiscuous(&self, on: bool) -> Result<(), DpdkError> {
        let (call, ret) = if on {
            // SAFETY: valid port we own.
            let r = unsafe { dpdk_sys::rte_eth_promiscuous_enable(self.id) };
            ("rte_eth_promiscuous_enable", r)
        } else {
            // SAFETY: valid port we own.
            let r = unsafe { dpdk_sys::rte_eth_promiscuous_disable(self.id) };
            ("rte_eth_promiscuous_disable", r)
        };
        if ret < 0 && ret != -95 {
            check(call, ret)?;
        }
        Ok(())
    }

    /// Turn promiscuous mode on or off on a started port.
    ///
    /// # Errors
    /// [`DpdkError::Call`] (not for drivers without the notion).
    pub fn set_promiscuous(&mut self, on: bool) -> Result<(), DpdkError> {
        let _g = control_lock();
        self.apply_promiscuous(on)?;
        self.cfg.promiscuous = on;
        Ok(())
    }

    /// Whether the port is in promiscuous mode (`rte_eth_promiscuous_get`);
    /// `None` when the driver does not say.
    pub fn promiscuous(&self) -> Option<bool> {
        // SAFETY: valid port; a plain query.
        match unsafe { dpdk_sys::rte_eth_promiscuous_get(self.id) } {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }

    /// Let the port receive frames for `mac` as well as its own
    /// (`rte_eth_dev_mac_addr_add`, pool 0): for a device that uses a MAC
    /// other than the port's without promiscuous mode.
    ///
    /// # Errors
    /// [`DpdkError::Call`]: e.g. ENOTSUP from drivers without MAC filters
    /// (memif, ring, pcap, which pass every frame anyway), ENOSPC when the
    /// filter table is full.
    pub fn add_mac_addr(&self, mac: [u8; 6]) -> Result<(), DpdkError> {
        let _g = control_lock();
        let mut a = dpdk_sys::rte_ether_addr { addr_bytes: mac };
        // SAFETY: valid port; `a` is a valid, initialised address.
        check("rte_eth_dev_mac_addr_add", unsafe {
            dpdk_sys::rte_eth_dev_mac_addr_add(self.id, &mut a, 0)
        })?;
        Ok(())
    }

    /// Stop the port (`rte_eth_dev_stop`).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn stop(&mut self) -> Result<(), DpdkError> {
        if !self.started {
            return Ok(());
        }
        let _g = control_lock();
        // SAFETY: started port we own.
        check("rte_eth_dev_stop", unsafe {
            dpdk_sys::rte_eth_dev_stop(self.id)
        })?;
        self.started = false;
        Ok(())
    }

    /// Whether the port is started.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The port's MAC address (`rte_eth_macaddr_get`).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn mac_addr(&self) -> Result<[u8; 6], DpdkError> {
        let mut a = dpdk_sys::rte_ether_addr::default();
        // SAFETY: valid port; valid out pointer.
        check("rte_eth_macaddr_get", unsafe {
            dpdk_sys::rte_eth_macaddr_get(self.id, &mut a)
        })?;
        Ok(a.addr_bytes)
    }

    /// Link state now, without waiting (`rte_eth_link_get_nowait`).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn link(&self) -> Result<Link, DpdkError> {
        let mut l = rte_eth_link::default();
        // SAFETY: valid port; valid out pointer.
        check("rte_eth_link_get_nowait", unsafe {
            dpdk_sys::rte_eth_link_get_nowait(self.id, &mut l)
        })?;
        Ok(Link {
            up: u32::from(l.link_status()) == dpdk_sys::RTE_ETH_LINK_UP,
            speed_mbps: l.link_speed,
            full_duplex: u32::from(l.link_duplex()) == dpdk_sys::RTE_ETH_LINK_FULL_DUPLEX,
        })
    }

    /// Poll the link every millisecond until it is up.
    ///
    /// # Errors
    /// [`DpdkError::LinkDownTimeout`] after `timeout`; [`DpdkError::Call`].
    pub fn wait_link_up(&self, timeout: Duration) -> Result<Link, DpdkError> {
        let start = Instant::now();
        loop {
            let l = self.link()?;
            if l.up {
                return Ok(l);
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(DpdkError::LinkDownTimeout {
                    port: self.id,
                    waited,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The port's counters (`rte_eth_stats_get`).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn stats(&self) -> Result<PortStats, DpdkError> {
        let mut s = rte_eth_stats::default();
        // SAFETY: valid port; valid out pointer.
        check("rte_eth_stats_get", unsafe {
            dpdk_sys::rte_eth_stats_get(self.id, &mut s)
        })?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zero the counters (`rte_eth_stats_reset`).
    ///
    /// # Errors
    /// [`DpdkError::Call`].
    pub fn reset_stats(&mut self) -> Result<(), DpdkError> {
        // SAFETY: valid port we own.
        check("rte_eth_stats_reset", unsafe {
            dpdk_sys::rte_eth_stats_reset(self.id)
        })
        .map(|_| ())
    }

    /// Receive up to `max` frames (at most [`MAX_BURST`]) from `queue`,
    /// appending them to `out`. Returns how many arrived (0 when none, or
    /// when the port is stopped or `queue` does not exist).
    pub fn rx_burst(&mut self, queue: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        if !self.started || queue >= self.cfg.rx_queues {
            return 0;
        }
        let max = max.min(MAX_BURST);
        out.reserve(max);
        let len = out.len();
        // SAFETY: started port we own (so no other thread polls this queue),
        // valid queue; the spare capacity holds `max` pointer slots (Mbuf is
        // repr(transparent) over a non-null pointer).
        let n = unsafe {
            dpdk_sys::shim_rte_eth_rx_burst(
                self.id,
                queue,
                out.as_mut_ptr().add(len).cast(),
                max as u16,
            )
        };
        let n = usize::from(n).min(max);
        // SAFETY: the driver wrote `n` non-null mbuf pointers whose
        // ownership it passed to us.
        unsafe { out.set_len(len + n) };
        n
    }

    /// Transmit `pkts` on `queue`: the ones the driver accepts move to it
    /// (it frees them after sending), the rest are freed. `pkts` is empty on
    /// return. Returns how many the driver accepted.
    pub fn tx_burst(&mut self, queue: u16, pkts: &mut Vec<Mbuf>) -> usize {
        let sent = self.tx_burst_retain(queue, pkts);
        free_bulk(pkts);
        sent
    }

    /// Like [`Port::tx_burst`], but the frames the driver did not accept
    /// stay in `pkts`, in order, for a later retry.
    pub fn tx_burst_retain(&mut self, queue: u16, pkts: &mut Vec<Mbuf>) -> usize {
        if !self.started || queue >= self.cfg.tx_queues || pkts.is_empty() {
            return 0;
        }
        let mut total = 0;
        while !pkts.is_empty() {
            let n = pkts.len().min(MAX_BURST);
            // SAFETY: started port we own, valid queue; `pkts` holds `n`
            // valid owned mbuf pointers at its start (repr(transparent)).
            let sent = unsafe {
                dpdk_sys::shim_rte_eth_tx_burst(self.id, queue, pkts.as_mut_ptr().cast(), n as u16)
            };
            let sent = usize::from(sent).min(n);
            // The first `sent` now belong to the driver: remove them from
            // the vector without dropping (freeing) them.
            for m in pkts.drain(..sent) {
                let _ = m.into_raw();
            }
            total += sent;
            if sent < n {
                break;
            }
        }
        total
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        {
            let _g = control_lock();
            if self.started {
                // SAFETY: started port we own; errors are irrelevant here.
                let _ = unsafe { dpdk_sys::rte_eth_dev_stop(self.id) };
            }
            // SAFETY: stopped port we own; closing releases its queues (and
            // the mbufs they hold) and the port id. Nothing uses it after.
            let _ = unsafe { dpdk_sys::rte_eth_dev_close(self.id) };
        }
        // Let the interrupt thread finish what the close queued for it.
        crate::eal::intr_thread_barrier(Duration::from_secs(1));
    }
}

/// `rte_eth_dev_get_name_by_port`, or the id as text.
fn port_name(id: u16) -> String {
    let mut buf = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: valid port; `buf` holds RTE_ETH_NAME_MAX_LEN bytes as required.
    let ret = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    if ret != 0 {
        return id.to_string();
    }
    // SAFETY: DPDK wrote a NUL-terminated name into `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
