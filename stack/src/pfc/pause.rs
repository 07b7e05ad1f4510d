//! PFC / PAUSE **honouring**: the transmit side of a port obeys the MAC control
//! frames its link partner sends.
//!
//! Rules (IEEE 802.1Qbb clause 36; IEEE 802.3 §31B.3; ROCEV2-DIGEST §7;
//! CASES R33, R34):
//!
//! - A PFC frame (opcode 0x0101) pauses priority n for `time[n]` quanta × 512
//!   bit times at the link speed, **only** if its class-enable bit n is set
//!   (the timers of disabled classes are ignored, CASES R33 a) and n is
//!   PFC-enabled on this port ([`PauseConfig::pfc_enabled`]; lossy priorities
//!   ignore pauses, R33 d). The reserved high byte of the vector is ignored.
//! - An 802.3x PAUSE frame (opcode 0x0001) pauses every priority. It is never
//!   counted or treated as PFC (R33 b): a port in PFC mode ignores it, a port in
//!   PAUSE mode ignores PFC frames, a port with flow control off ignores both
//!   (the two modes are exclusive, ROCEV2-DIGEST §7).
//! - A new frame **replaces** the running timer (it does not add to it): XOFF
//!   0xFFFF at t = 0 and again at t = 200 µs on 100 Gbit/s ends at
//!   200,000 + 335,540 = 535,540 ns (R34 b).
//! - Time 0 with the enable bit set (XON) resumes **at once** (R34 a).
//! - Frames to a destination other than 01:80:C2:00:00:01 are dropped
//!   (R33 e, [`crate::wire::Error::MacControlBadDst`]).
//!
//! Timing: a pause starts at the `now` passed with the frame (the instant its
//! reception completed) and lasts [`crate::wire::pfc::quanta_to_duration_ceil`]
//! (rounded **up** to the ns, so the port never resumes early: 0xFFFF quanta at
//! 100 Gbit/s = 335,539.2 ns -> 335,540 ns). The caller finishes a frame already
//! being serialised (802.3 §31B.3.1 lets the current frame complete) and asks
//! [`PauseState::is_paused`] before starting the next one.

use super::{bit, ns_to_us, prio_names, FlowControlMode, NUM_PRIORITIES};
use crate::time::Instant;
use crate::wire::pfc::{self, MacControl};
use crate::wire::{Error, L2Info, ETHERTYPE_MAC_CONTROL};

/// Configuration of a [`PauseState`] (one port's transmit side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PauseConfig {
    /// Which frames are honoured: PFC, PAUSE or none.
    pub mode: FlowControlMode,
    /// Link speed, Mbit/s (100 Gbit/s = 100_000): one quantum is 512 bit times.
    /// 0 makes every pause last 0 ns.
    pub link_mbps: u64,
    /// PFC-enabled priorities (bit n = priority n); PFC timers for the others are
    /// ignored (PFC mode only).
    pub pfc_enabled: u8,
}

impl PauseConfig {
    /// Honour PFC for the priorities in `pfc_enabled`.
    pub fn pfc(link_mbps: u64, pfc_enabled: u8) -> PauseConfig {
        PauseConfig {
            mode: FlowControlMode::Pfc,
            link_mbps,
            pfc_enabled,
        }
    }
    /// Honour 802.3x PAUSE (all priorities).
    pub fn pause(link_mbps: u64) -> PauseConfig {
        PauseConfig {
            mode: FlowControlMode::Pause,
            link_mbps,
            pfc_enabled: 0,
        }
    }
    /// Honour nothing.
    pub fn off(link_mbps: u64) -> PauseConfig {
        PauseConfig {
            mode: FlowControlMode::Off,
            link_mbps,
            pfc_enabled: 0,
        }
    }
}

/// What [`PauseState::handle_frame`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Not a MAC control frame (EtherType other than 0x8808, or shorter than an
    /// Ethernet header): untouched, the caller processes it.
    NotMacControl,
    /// Consumed and obeyed.
    Applied {
        /// Priorities whose pause timer was started or restarted (bit n =
        /// priority n; 0xFF for a PAUSE frame).
        paused: u8,
        /// Priorities told to resume (XON; whether or not they were paused).
        resumed: u8,
    },
    /// A valid PFC or PAUSE frame this port does not obey (wrong mode, no
    /// enabled class among the port's PFC priorities; CASES R33 a, b, d).
    /// Consumed; counted in `rx_pause_ignored`.
    Ignored,
    /// A malformed MAC control frame, or one for another destination (R33 e).
    /// Consumed and dropped; counted under the error's counter name.
    Dropped(Error),
}

const RX_PRIO_PAUSE: [&str; 8] = prio_names!("rx_prio", "_pause");
const RX_PRIO_PAUSE_DURATION: [&str; 8] = prio_names!("rx_prio", "_pause_duration");
const RX_PRIO_PAUSE_TRANSITION: [&str; 8] = prio_names!("rx_prio", "_pause_transition");

/// Receive-side flow-control counters of a port, named after mlx5's ethtool
/// counters (see the [module docs](super)). Durations are kept in nanoseconds;
/// [`RxPauseCounters::iter`] reports them in microseconds like mlx5.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RxPauseCounters {
    /// `rx_prio{N}_pause`: PFC frames obeyed with bit N set and a non-zero timer
    /// (XOFF). Frames whose bit N is clear, or N not PFC-enabled here, or 802.3x
    /// PAUSE frames, never count (CASES R33 a, b, d).
    pub rx_prio_pause: [u64; NUM_PRIORITIES],
    /// `rx_prio{N}_pause_duration`, **ns** here (µs in [`Self::iter`]): time
    /// priority N was paused. Accounted up to the latest `now` passed to
    /// [`PauseState::handle_frame`] or [`PauseState::handle_timeout`].
    pub rx_prio_pause_duration_ns: [u64; NUM_PRIORITIES],
    /// `rx_prio{N}_pause_transition`: XOFF -> XON transitions of priority N (a
    /// pause ended by XON or by expiry; a refresh is not a transition).
    pub rx_prio_pause_transition: [u64; NUM_PRIORITIES],
    /// `rx_global_pause`: 802.3x PAUSE frames obeyed with a non-zero time.
    pub rx_global_pause: u64,
    /// `rx_global_pause_duration`, **ns** here (µs in [`Self::iter`]).
    pub rx_global_pause_duration_ns: u64,
    /// `rx_global_pause_transition`: XOFF -> XON transitions of the port pause.
    pub rx_global_pause_transition: u64,
    /// `rx_pause_ctrl_phy`: valid 802.3x PAUSE frames (opcode 0x0001) received,
    /// in any mode, XON included (IEEE 802.3 §30.3.4.3
    /// aPAUSEMACCtrlFramesReceived). PFC frames are not counted here.
    pub rx_pause_ctrl_phy: u64,
    /// `rx_mac_control_phy`: MAC control frames to 01:80:C2:00:00:01 received
    /// (PAUSE, PFC and unknown opcodes).
    pub rx_mac_control_phy: u64,
    /// `rx_unsupported_op_phy`: MAC control frames with an opcode other than
    /// PAUSE and PFC.
    pub rx_unsupported_op_phy: u64,
    /// `rx_pause_ignored` (ours): valid PFC/PAUSE frames not obeyed (see
    /// [`Disposition::Ignored`]).
    pub rx_pause_ignored: u64,
    /// `rx_mac_control_bad_dst` ([`Error::MacControlBadDst`]): EtherType 0x8808
    /// to another destination MAC, dropped.
    pub rx_mac_control_bad_dst: u64,
    /// `rx_mac_control_truncated` ([`Error::MacControlTruncated`]).
    pub rx_mac_control_truncated: u64,
}

impl RxPauseCounters {
    /// Every counter as `(name, value)`: per priority `rx_prio{N}_pause`,
    /// `rx_prio{N}_pause_duration` (µs, floored), `rx_prio{N}_pause_transition`,
    /// then `rx_global_pause`, `rx_global_pause_duration` (µs),
    /// `rx_global_pause_transition`, `rx_pause_ctrl_phy`, `rx_mac_control_phy`,
    /// `rx_unsupported_op_phy`, `rx_pause_ignored`, `rx_mac_control_bad_dst`,
    /// `rx_mac_control_truncated`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        (0..NUM_PRIORITIES)
            .flat_map(move |p| {
                [
                    (RX_PRIO_PAUSE[p], self.rx_prio_pause[p]),
                    (
                        RX_PRIO_PAUSE_DURATION[p],
                        ns_to_us(self.rx_prio_pause_duration_ns[p]),
                    ),
                    (
                        RX_PRIO_PAUSE_TRANSITION[p],
                        self.rx_prio_pause_transition[p],
                    ),
                ]
            })
            .chain([
                ("rx_global_pause", self.rx_global_pause),
                (
                    "rx_global_pause_duration",
                    ns_to_us(self.rx_global_pause_duration_ns),
                ),
                (
                    "rx_global_pause_transition",
                    self.rx_global_pause_transition,
                ),
                ("rx_pause_ctrl_phy", self.rx_pause_ctrl_phy),
                ("rx_mac_control_phy", self.rx_mac_control_phy),
                ("rx_unsupported_op_phy", self.rx_unsupported_op_phy),
                ("rx_pause_ignored", self.rx_pause_ignored),
                (
                    Error::MacControlBadDst.counter_name(),
                    self.rx_mac_control_bad_dst,
                ),
                (
                    Error::MacControlTruncated.counter_name(),
                    self.rx_mac_control_truncated,
                ),
            ])
    }

    /// A counter by its [`Self::iter`] name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// One pause timer.
#[derive(Debug, Clone, Copy, Default)]
struct Timer {
    /// When the running pause ends; `None` = not paused.
    until: Option<Instant>,
    /// Start of the not yet accumulated part of the pause duration.
    mark: Instant,
}

impl Timer {
    /// Account the pause up to `now`; expire it if it ended by then. Returns
    /// (ns to add to the duration, whether it expired).
    fn settle(&mut self, now: Instant) -> (u64, bool) {
        let Some(until) = self.until else {
            return (0, false);
        };
        if until <= now {
            self.until = None;
            ((until - self.mark).as_nanos() as u64, true)
        } else {
            let add = (now - self.mark).as_nanos() as u64;
            self.mark = self.mark.max(now);
            (add, false)
        }
    }

    /// Start (or replace) the pause at `now` until `until`, or resume if
    /// `until <= now`. Call after `settle(now)`. Returns whether a running pause
    /// was ended (an XOFF -> XON transition).
    fn set(&mut self, now: Instant, until: Instant) -> bool {
        let was = self.until.is_some();
        if until > now {
            self.until = Some(until);
            self.mark = now;
            false
        } else {
            self.until = None;
            was
        }
    }

    fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| u > now)
    }
}

/// The transmit side of one port: which priorities the link partner has paused,
/// and until when (sans-IO; see the [module docs](self) for the rules).
///
/// Feed every received frame to [`handle_frame`](Self::handle_frame) (it returns
/// [`Disposition::NotMacControl`] for the others), ask
/// [`is_paused`](Self::is_paused) before starting a frame of a priority, and
/// call [`handle_timeout`](Self::handle_timeout) at
/// [`poll_timeout`](Self::poll_timeout) so expiries are counted. Queries are
/// correct without `handle_timeout`: it only settles the counters.
#[derive(Debug, Clone)]
pub struct PauseState {
    cfg: PauseConfig,
    prio: [Timer; NUM_PRIORITIES],
    global: Timer,
    counters: RxPauseCounters,
}

impl PauseState {
    /// Nothing paused.
    pub fn new(cfg: PauseConfig) -> PauseState {
        PauseState {
            cfg,
            prio: [Timer::default(); NUM_PRIORITIES],
            global: Timer::default(),
            counters: RxPauseCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PauseConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &RxPauseCounters {
        &self.counters
    }

    /// Process a received frame at `now` (when its reception completed). Never
    /// panics, whatever the bytes.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Disposition {
        match L2Info::parse(frame) {
            Ok(l2) if l2.ethertype == ETHERTYPE_MAC_CONTROL => {}
            _ => return Disposition::NotMacControl,
        }
        match MacControl::parse(frame) {
            Ok(mc) => {
                self.counters.rx_mac_control_phy += 1;
                self.handle_mac_control(now, &mc)
            }
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    Error::MacControlBadDst => c.rx_mac_control_bad_dst += 1,
                    Error::MacControlUnknownOpcode(_) => {
                        c.rx_mac_control_phy += 1;
                        c.rx_unsupported_op_phy += 1;
                    }
                    _ => c.rx_mac_control_truncated += 1,
                }
                Disposition::Dropped(e)
            }
        }
    }

    /// Process an already parsed MAC control frame received at `now` (for
    /// callers that ran [`crate::wire::classify`]; `rx_mac_control_phy` is not
    /// incremented here).
    pub fn handle_mac_control(&mut self, now: Instant, mc: &MacControl) -> Disposition {
        self.handle_timeout(now);
        let link = self.cfg.link_mbps;
        match (mc, self.cfg.mode) {
            (MacControl::Pause(p), mode) => {
                self.counters.rx_pause_ctrl_phy += 1;
                if mode != FlowControlMode::Pause {
                    self.counters.rx_pause_ignored += 1;
                    return Disposition::Ignored;
                }
                let until = now + pfc::quanta_to_duration_ceil(p.quanta, link);
                if self.global.set(now, until) {
                    self.counters.rx_global_pause_transition += 1;
                }
                if p.quanta == 0 {
                    Disposition::Applied {
                        paused: 0,
                        resumed: 0xFF,
                    }
                } else {
                    self.counters.rx_global_pause += 1;
                    Disposition::Applied {
                        paused: 0xFF,
                        resumed: 0,
                    }
                }
            }
            (MacControl::Pfc(r), FlowControlMode::Pfc) => {
                let effective = (r.class_enable & 0xFF) as u8 & self.cfg.pfc_enabled;
                if effective == 0 {
                    self.counters.rx_pause_ignored += 1;
                    return Disposition::Ignored;
                }
                let (mut paused, mut resumed) = (0u8, 0u8);
                for p in 0..NUM_PRIORITIES {
                    if !bit(effective, p) {
                        continue;
                    }
                    let q = r.quanta[p];
                    let until = now + pfc::quanta_to_duration_ceil(q, link);
                    if self.prio[p].set(now, until) {
                        self.counters.rx_prio_pause_transition[p] += 1;
                    }
                    if q == 0 {
                        resumed |= 1 << p;
                    } else {
                        paused |= 1 << p;
                        self.counters.rx_prio_pause[p] += 1;
                    }
                }
                Disposition::Applied { paused, resumed }
            }
            (MacControl::Pfc(_), _) => {
                self.counters.rx_pause_ignored += 1;
                Disposition::Ignored
            }
        }
    }

    /// Settle the timers at `now`: expire the pauses that have ended (counting
    /// the XOFF -> XON transitions) and account pause durations up to `now`.
    /// Extra calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        let c = &mut self.counters;
        for (p, t) in self.prio.iter_mut().enumerate() {
            let (add, expired) = t.settle(now);
            c.rx_prio_pause_duration_ns[p] = c.rx_prio_pause_duration_ns[p].saturating_add(add);
            c.rx_prio_pause_transition[p] += expired as u64;
        }
        let (add, expired) = self.global.settle(now);
        c.rx_global_pause_duration_ns = c.rx_global_pause_duration_ns.saturating_add(add);
        c.rx_global_pause_transition += expired as u64;
    }

    /// The earliest end of a running pause (call
    /// [`handle_timeout`](Self::handle_timeout) then), or `None`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.prio
            .iter()
            .chain([&self.global])
            .filter_map(|t| t.until)
            .min()
    }

    /// Whether priority `prio` must not start a frame at `now` (its PFC timer,
    /// or the port's PAUSE timer, is running). For `prio` above 7 only the PAUSE
    /// timer applies.
    pub fn is_paused(&self, prio: u8, now: Instant) -> bool {
        self.global.active(now) || self.prio.get(prio as usize).is_some_and(|t| t.active(now))
    }

    /// The paused priorities at `now` (bit n = priority n).
    pub fn paused_mask(&self, now: Instant) -> u8 {
        (0..NUM_PRIORITIES as u8)
            .filter(|&p| self.is_paused(p, now))
            .fold(0, |m, p| m | 1 << p)
    }

    /// When the pause of `prio` ends (the later of its PFC timer and the PAUSE
    /// timer), or `None` if none runs. As of the last `handle_*` call: it may
    /// lie in the past until [`handle_timeout`](Self::handle_timeout) runs;
    /// [`is_paused`](Self::is_paused) is exact at any `now`.
    pub fn resume_at(&self, prio: u8) -> Option<Instant> {
        let own = self.prio.get(prio as usize).and_then(|t| t.until);
        own.max(self.global.until)
    }
}
