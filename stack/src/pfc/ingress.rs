//! PFC / PAUSE **generation**: the receive side of a port watches its ingress
//! queues and tells the link partner to stop (XOFF) and to resume (XON).
//!
//! Rules (ROCEV2-DIGEST §7 "Thresholds"; IEEE 802.1Qbb clause 36; 802.3 §31B;
//! CASES R32, R34):
//!
//! - **XOFF** when the bytes queued for a lossless priority *reach* its XOFF
//!   threshold (`queue >= xoff`): a PFC frame with that priority's class-enable
//!   bit set and its timer = the configured quanta (default 0xFFFF). The other
//!   seven timers are present and 0 (CASES R32).
//! - **Refresh**: while the queue has not drained below XON, the XOFF is sent
//!   again when **half** of the advertised pause time has elapsed since the
//!   last XOFF for that priority, so a new timer reaches the partner long before
//!   the running one expires (the other half is the margin for the refresh's own
//!   queueing, serialisation and propagation). Half of the pause time is
//!   [`crate::wire::pfc::quanta_to_duration`] (floored to ns) divided by 2
//!   (floored), and at least 1 ns: 65535 quanta at 100 Gbit/s = 335,539.2 ns ->
//!   335,539 ns -> refresh 167,769 ns after the XOFF went out.
//! - **XON** as soon as the queue drops *below* the XON threshold
//!   (`queue < xon`, with `0 < xon < xoff`): enable bit set, timer 0 (CASES
//!   R34 d). Nothing is sent if no XOFF was sent (the queue crossed XOFF and fell
//!   below XON before the caller polled).
//! - **Sharing**: every priority that needs a frame at the same
//!   [`PfcGenerator::poll_transmit`] call (a new XOFF, a due refresh or an XON)
//!   goes into one PFC frame; a priority that is not due is not included (its
//!   refresh schedule is not disturbed). CASES R32: priorities 3 and 4 together
//!   -> vector 0x0018, both timers set.
//! - **PAUSE mode** (802.3x): the same machine on one class whose queue is the
//!   sum over all priorities, with [`GeneratorConfig::port`] thresholds; frames
//!   are PAUSE (opcode 0x0001).
//! - **Off**: bytes are accounted, nothing is sent.
//!
//! Frames: 60 bytes, DA 01:80:C2:00:00:01, SA = [`GeneratorConfig::port_mac`],
//! EtherType 0x8808, untagged (built by [`crate::wire::pfc::MacControl::emit`]).

use core::fmt;
use core::time::Duration;

use super::{bit, ns_to_us, prio_names, FlowControlMode, DEFAULT_XOFF_QUANTA, NUM_PRIORITIES};
use crate::time::Instant;
use crate::wire::pfc::{self, MacControl, PauseRepr, PfcRepr, FRAME_LEN};

/// XOFF/XON thresholds of one class (a priority, or the whole port in PAUSE
/// mode), bytes of queued frames, with the pause time its XOFF advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Thresholds {
    /// Send XOFF when the queue reaches this many bytes (`queue >= xoff`).
    pub xoff: u64,
    /// Send XON when the queue drops below this many bytes (`queue < xon`).
    /// Must satisfy `0 < xon < xoff`.
    pub xon: u64,
    /// Pause time carried by XOFF, quanta of 512 bit times (802.3 §31B.3.2);
    /// non-zero (0 would be XON). Default [`DEFAULT_XOFF_QUANTA`].
    pub quanta: u16,
}

impl Thresholds {
    /// `xoff` / `xon` in bytes with the default quanta 0xFFFF.
    pub const fn new(xoff: u64, xon: u64) -> Thresholds {
        Thresholds {
            xoff,
            xon,
            quanta: DEFAULT_XOFF_QUANTA,
        }
    }

    fn check(&self, prio: Option<u8>) -> Result<(), ConfigError> {
        if self.xon == 0 || self.xon >= self.xoff {
            return Err(ConfigError::BadThresholds {
                prio,
                xoff: self.xoff,
                xon: self.xon,
            });
        }
        if self.quanta == 0 {
            return Err(ConfigError::ZeroQuanta { prio });
        }
        Ok(())
    }
}

/// Configuration of a [`PfcGenerator`] (one port's receive side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneratorConfig {
    /// PFC, PAUSE or off.
    pub mode: FlowControlMode,
    /// Source MAC of the frames sent (the port's own MAC).
    pub port_mac: [u8; 6],
    /// Link speed, Mbit/s (100 Gbit/s = 100_000); sets the refresh interval.
    pub link_mbps: u64,
    /// Lossless priorities (bit n = priority n): the only ones that generate
    /// PFC frames. Others are accounted only.
    pub lossless: u8,
    /// Per-priority thresholds (PFC mode; used for the lossless priorities).
    pub priority: [Thresholds; NUM_PRIORITIES],
    /// Whole-port thresholds on the sum of all priorities (PAUSE mode).
    pub port: Thresholds,
}

impl GeneratorConfig {
    /// PFC for the priorities in `lossless`, each with thresholds `th`
    /// (override single priorities through [`GeneratorConfig::priority`]).
    pub fn pfc(port_mac: [u8; 6], link_mbps: u64, lossless: u8, th: Thresholds) -> Self {
        GeneratorConfig {
            mode: FlowControlMode::Pfc,
            port_mac,
            link_mbps,
            lossless,
            priority: [th; NUM_PRIORITIES],
            port: th,
        }
    }

    /// 802.3x PAUSE on the whole port with thresholds `th`.
    pub fn pause(port_mac: [u8; 6], link_mbps: u64, th: Thresholds) -> Self {
        GeneratorConfig {
            mode: FlowControlMode::Pause,
            lossless: 0,
            ..GeneratorConfig::pfc(port_mac, link_mbps, 0, th)
        }
    }

    /// Accounting only: no frame is ever generated.
    pub fn off(port_mac: [u8; 6], link_mbps: u64) -> Self {
        GeneratorConfig {
            mode: FlowControlMode::Off,
            ..GeneratorConfig::pfc(port_mac, link_mbps, 0, Thresholds::new(2, 1))
        }
    }

    /// Check the thresholds in use (the lossless priorities' in PFC mode, the
    /// port's in PAUSE mode) and the link speed.
    ///
    /// Errors: [`ConfigError::ZeroLinkSpeed`], [`ConfigError::BadThresholds`],
    /// [`ConfigError::ZeroQuanta`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.mode {
            FlowControlMode::Off => Ok(()),
            FlowControlMode::Pause => {
                if self.link_mbps == 0 {
                    return Err(ConfigError::ZeroLinkSpeed);
                }
                self.port.check(None)
            }
            FlowControlMode::Pfc => {
                if self.link_mbps == 0 {
                    return Err(ConfigError::ZeroLinkSpeed);
                }
                for (p, th) in self.priority.iter().enumerate() {
                    if bit(self.lossless, p) {
                        th.check(Some(p as u8))?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Why a [`GeneratorConfig`] was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigError {
    /// The link speed is 0 Mbit/s: pause times and the refresh point are
    /// undefined.
    ZeroLinkSpeed,
    /// Not `0 < xon < xoff` for a priority (`None` = the port's PAUSE
    /// thresholds).
    BadThresholds {
        /// The priority, or `None` for the port thresholds.
        prio: Option<u8>,
        /// The XOFF threshold, bytes.
        xoff: u64,
        /// The XON threshold, bytes.
        xon: u64,
    },
    /// XOFF quanta 0 (that would be an XON).
    ZeroQuanta {
        /// The priority, or `None` for the port thresholds.
        prio: Option<u8>,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLinkSpeed => f.write_str("link speed 0 Mbit/s"),
            ConfigError::BadThresholds { prio, xoff, xon } => write!(
                f,
                "thresholds of {}: need 0 < xon ({xon}) < xoff ({xoff})",
                Who(*prio)
            ),
            ConfigError::ZeroQuanta { prio } => write!(f, "XOFF quanta 0 for {}", Who(*prio)),
        }
    }
}

impl std::error::Error for ConfigError {}

struct Who(Option<u8>);
impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, "priority {p}"),
            None => f.write_str("the port"),
        }
    }
}

const TX_PRIO_PAUSE: [&str; 8] = prio_names!("tx_prio", "_pause");
const TX_PRIO_PAUSE_DURATION: [&str; 8] = prio_names!("tx_prio", "_pause_duration");

/// Transmit-side flow-control counters of a port, named after mlx5's ethtool
/// counters (see the [module docs](super)). Durations are kept in nanoseconds;
/// [`TxPauseCounters::iter`] reports them in microseconds like mlx5.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxPauseCounters {
    /// `tx_prio{N}_pause`: PFC frames sent with bit N set and a non-zero timer
    /// (XOFF and its refreshes; XONs are not counted).
    pub tx_prio_pause: [u64; NUM_PRIORITIES],
    /// `tx_prio{N}_pause_duration`, **ns** here (µs in [`Self::iter`]): time
    /// from the first XOFF for N to the XON that ended it, accumulated at each
    /// frame for N (an XOFF still outstanding counts up to its last refresh).
    pub tx_prio_pause_duration_ns: [u64; NUM_PRIORITIES],
    /// `tx_global_pause`: 802.3x PAUSE frames sent with a non-zero time.
    pub tx_global_pause: u64,
    /// `tx_global_pause_duration`, **ns** here (µs in [`Self::iter`]), as
    /// `tx_prio_pause_duration_ns` for the port class.
    pub tx_global_pause_duration_ns: u64,
    /// `tx_pause_ctrl_phy`: 802.3x PAUSE frames (opcode 0x0001) sent, XON
    /// included (IEEE 802.3 §30.3.4.2 aPAUSEMACCtrlFramesTransmitted). PFC
    /// frames are not counted here.
    pub tx_pause_ctrl_phy: u64,
    /// `tx_mac_control_phy`: MAC control frames sent (PFC and PAUSE).
    pub tx_mac_control_phy: u64,
}

impl TxPauseCounters {
    /// Every counter as `(name, value)`: per priority `tx_prio{N}_pause`,
    /// `tx_prio{N}_pause_duration` (µs, floored), then `tx_global_pause`,
    /// `tx_global_pause_duration` (µs), `tx_pause_ctrl_phy`,
    /// `tx_mac_control_phy`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        (0..NUM_PRIORITIES)
            .flat_map(move |p| {
                [
                    (TX_PRIO_PAUSE[p], self.tx_prio_pause[p]),
                    (
                        TX_PRIO_PAUSE_DURATION[p],
                        ns_to_us(self.tx_prio_pause_duration_ns[p]),
                    ),
                ]
            })
            .chain([
                ("tx_global_pause", self.tx_global_pause),
                (
                    "tx_global_pause_duration",
                    ns_to_us(self.tx_global_pause_duration_ns),
                ),
                ("tx_pause_ctrl_phy", self.tx_pause_ctrl_phy),
                ("tx_mac_control_phy", self.tx_mac_control_phy),
            ])
    }

    /// A counter by its [`Self::iter`] name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// XOFF/XON state of one class.
#[derive(Debug, Clone, Copy, Default)]
struct Class {
    /// Congested: set when the queue reaches XOFF, cleared below XON.
    xoff: bool,
    /// The last frame sent for this class was an XOFF (the partner is paused,
    /// as far as we know).
    advertised: bool,
    /// When a frame for this class is due: the instant the state changed (a new
    /// XOFF or an XON to send), or the refresh point; `None` = nothing to send.
    due: Option<Instant>,
    /// Start of the not yet accumulated part of the transmitted pause duration.
    mark: Instant,
}

impl Class {
    /// Apply a new queue level `q` at `now` with thresholds `th`.
    fn update(&mut self, now: Instant, q: u64, th: &Thresholds) {
        if !self.xoff && q >= th.xoff {
            self.xoff = true;
        } else if self.xoff && q < th.xon {
            self.xoff = false;
        }
        match (self.xoff, self.advertised) {
            // A new XOFF or an XON is needed now (keep an earlier due time).
            (true, false) | (false, true) => {
                if !matches!(self.due, Some(d) if d <= now) {
                    self.due = Some(now);
                }
            }
            // Still congested and advertised: keep the refresh point (if an XON
            // was pending and the queue rose to XOFF again before it went out,
            // the pending frame becomes an early refresh).
            (true, true) => {}
            (false, false) => self.due = None,
        }
    }

    /// Record that a frame for this class went out at `now`; returns the
    /// transmitted-pause time to add to the duration counter, ns.
    fn sent(&mut self, now: Instant, refresh: Duration) -> u64 {
        let add = if self.advertised {
            (now - self.mark).as_nanos() as u64
        } else {
            0
        };
        self.mark = now;
        if self.xoff {
            self.advertised = true;
            self.due = Some(now + refresh);
        } else {
            self.advertised = false;
            self.due = None;
        }
        add
    }
}

/// The receive side of one port: per-priority queue accounting and PFC/PAUSE
/// frame generation (sans-IO; see the [module docs](self) for the rules).
///
/// Feed queue changes with [`on_enqueue`](Self::on_enqueue) /
/// [`on_dequeue`](Self::on_dequeue) (or [`set_queue_bytes`](Self::set_queue_bytes)),
/// then call [`poll_transmit`](Self::poll_transmit) until it returns `None`; call
/// it again at [`poll_timeout`](Self::poll_timeout) for refreshes. Repeated
/// calls at the same `now` always end (a refresh is at least 1 ns later).
#[derive(Debug, Clone)]
pub struct PfcGenerator {
    cfg: GeneratorConfig,
    bytes: [u64; NUM_PRIORITIES],
    prio: [Class; NUM_PRIORITIES],
    port: Class,
    counters: TxPauseCounters,
}

impl PfcGenerator {
    /// A generator with empty queues.
    ///
    /// Errors: [`GeneratorConfig::validate`]'s.
    pub fn new(cfg: GeneratorConfig) -> Result<PfcGenerator, ConfigError> {
        cfg.validate()?;
        Ok(PfcGenerator {
            cfg,
            bytes: [0; NUM_PRIORITIES],
            prio: [Class::default(); NUM_PRIORITIES],
            port: Class::default(),
            counters: TxPauseCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GeneratorConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &TxPauseCounters {
        &self.counters
    }

    /// Bytes queued for `prio` (0 for a priority above 7).
    pub fn queue_bytes(&self, prio: u8) -> u64 {
        self.bytes.get(prio as usize).copied().unwrap_or(0)
    }

    /// Bytes queued over all priorities (the PAUSE-mode class).
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Whether `prio` is congested (reached XOFF, not yet below XON). In PAUSE
    /// mode this is the port's state, for every priority.
    pub fn is_xoff(&self, prio: u8) -> bool {
        match self.cfg.mode {
            FlowControlMode::Off => false,
            FlowControlMode::Pause => self.port.xoff,
            FlowControlMode::Pfc => self.prio.get(prio as usize).is_some_and(|c| c.xoff),
        }
    }

    /// A frame of `bytes` bytes for priority `prio` (0..=7) entered the ingress
    /// queue at `now`. Saturates; a priority above 7 is ignored.
    pub fn on_enqueue(&mut self, now: Instant, prio: u8, bytes: u64) {
        if let Some(q) = self.bytes.get(prio as usize).copied() {
            self.set_queue_bytes(now, prio, q.saturating_add(bytes));
        }
    }

    /// `bytes` bytes of priority `prio` left the ingress queue at `now`.
    /// Saturates at 0; a priority above 7 is ignored.
    pub fn on_dequeue(&mut self, now: Instant, prio: u8, bytes: u64) {
        if let Some(q) = self.bytes.get(prio as usize).copied() {
            self.set_queue_bytes(now, prio, q.saturating_sub(bytes));
        }
    }

    /// Set the bytes queued for `prio` at `now` (for callers that track the
    /// occupancy themselves). A priority above 7 is ignored.
    pub fn set_queue_bytes(&mut self, now: Instant, prio: u8, bytes: u64) {
        let p = prio as usize;
        let Some(q) = self.bytes.get_mut(p) else {
            return;
        };
        *q = bytes;
        match self.cfg.mode {
            FlowControlMode::Off => {}
            FlowControlMode::Pfc => {
                if bit(self.cfg.lossless, p) {
                    self.prio[p].update(now, bytes, &self.cfg.priority[p]);
                }
            }
            FlowControlMode::Pause => {
                let total = self.total_bytes();
                self.port.update(now, total, &self.cfg.port);
            }
        }
    }

    /// The earliest instant a frame is due: now-or-earlier when an XOFF/XON is
    /// pending, else the next refresh point; `None` when nothing is outstanding.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.cfg.mode {
            FlowControlMode::Off => None,
            FlowControlMode::Pause => self.port.due,
            FlowControlMode::Pfc => self.prio.iter().filter_map(|c| c.due).min(),
        }
    }

    /// Write the next MAC control frame due at `now` into `buf` (60 bytes, no
    /// FCS) and return its length, or `None` if nothing is due. All priorities
    /// due at `now` share the frame. `buf` shorter than 60 bytes: `None`, and
    /// the frame stays due.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if buf.len() < FRAME_LEN {
            return None;
        }
        let link = self.cfg.link_mbps;
        let src = self.cfg.port_mac;
        match self.cfg.mode {
            FlowControlMode::Off => None,
            FlowControlMode::Pause => {
                if !matches!(self.port.due, Some(d) if d <= now) {
                    return None;
                }
                let th = self.cfg.port;
                let quanta = if self.port.xoff { th.quanta } else { 0 };
                let len = MacControl::Pause(PauseRepr { quanta })
                    .emit(src, buf)
                    .ok()?;
                let add = self.port.sent(now, refresh_interval(th.quanta, link));
                let c = &mut self.counters;
                c.tx_global_pause_duration_ns = c.tx_global_pause_duration_ns.saturating_add(add);
                c.tx_pause_ctrl_phy += 1;
                c.tx_mac_control_phy += 1;
                if quanta != 0 {
                    c.tx_global_pause += 1;
                }
                Some(len)
            }
            FlowControlMode::Pfc => {
                let mut repr = PfcRepr::default();
                for (p, c) in self.prio.iter().enumerate() {
                    if matches!(c.due, Some(d) if d <= now) {
                        let q = if c.xoff {
                            self.cfg.priority[p].quanta
                        } else {
                            0
                        };
                        repr.set(p as u8, q);
                    }
                }
                if repr.class_enable == 0 {
                    return None;
                }
                let len = MacControl::Pfc(repr).emit(src, buf).ok()?;
                for p in 0..NUM_PRIORITIES {
                    if !repr.enabled(p as u8) {
                        continue;
                    }
                    let th = self.cfg.priority[p];
                    let add = self.prio[p].sent(now, refresh_interval(th.quanta, link));
                    let c = &mut self.counters;
                    c.tx_prio_pause_duration_ns[p] =
                        c.tx_prio_pause_duration_ns[p].saturating_add(add);
                    if repr.quanta[p] != 0 {
                        c.tx_prio_pause[p] += 1;
                    }
                }
                self.counters.tx_mac_control_phy += 1;
                Some(len)
            }
        }
    }
}

/// Refresh interval of an XOFF of `quanta` at `link_mbps`: half the pause time
/// (floored to ns, then halved and floored), at least 1 ns.
pub fn refresh_interval(quanta: u16, link_mbps: u64) -> Duration {
    (pfc::quanta_to_duration(quanta, link_mbps) / 2).max(Duration::from_nanos(1))
}
