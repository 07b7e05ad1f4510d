//! Link-level flow control: IEEE 802.1Qbb priority-based flow control (PFC) and
//! IEEE 802.3 Annex 31B PAUSE ("802.3x"), sans-IO.
//!
//! One Ethernet port has two halves, and each is a separate state machine here:
//!
//! - [`ingress::PfcGenerator`] (**receive side**): accounts the bytes queued per
//!   priority, sends XOFF when a lossless priority's queue reaches its XOFF
//!   threshold, refreshes it while the queue stays above XON, and sends XON when
//!   it drains below XON (ROCEV2-DIGEST §7 "Thresholds"; CASES R32, R34).
//! - [`pause::PauseState`] (**transmit side**): consumes received PFC/PAUSE
//!   frames and says which priorities may transmit and until when (802.1Qbb
//!   clause 36 "PFC operation", 802.3 §31B.3; CASES R33, R34).
//!
//! Around them: [`headroom`] computes the buffer a lossless priority needs above
//! XOFF (ROCEV2-DIGEST §7), and [`classify`] maps a frame to its priority (trust
//! PCP or trust DSCP). Frame formats live in [`crate::wire::pfc`].
//!
//! # Driving the state machines
//!
//! Both take the time as an argument ([`crate::time::Instant`], nanoseconds) and
//! never read a clock, never allocate and never panic:
//!
//! ```
//! use roce_stack::pfc::ingress::{GeneratorConfig, PfcGenerator, Thresholds};
//! use roce_stack::pfc::pause::{PauseConfig, PauseState};
//! use roce_stack::time::Instant;
//!
//! // Switch port facing a NIC: priority 3 lossless, XOFF at 20 KiB, XON at 10 KiB.
//! let th = Thresholds::new(20 * 1024, 10 * 1024);
//! let cfg = GeneratorConfig::pfc([0x02, 0, 0, 0, 0, 1], 100_000, 1 << 3, th);
//! let mut gen = PfcGenerator::new(cfg).unwrap();
//! // NIC transmit side honouring PFC on priority 3 at 100 Gbit/s.
//! let mut nic = PauseState::new(PauseConfig::pfc(100_000, 1 << 3));
//!
//! let t0 = Instant::ZERO;
//! gen.on_enqueue(t0, 3, 20 * 1024); // the queue reaches XOFF
//! let mut buf = [0u8; 60];
//! let len = gen.poll_transmit(t0, &mut buf).unwrap(); // the XOFF frame
//! nic.handle_frame(t0, &buf[..len]);
//! assert!(nic.is_paused(3, t0));
//! assert!(!nic.is_paused(0, t0));
//! ```
//!
//! Call order for a port owner (simulator, switch model, later the `Device`):
//! feed every received frame to [`pause::PauseState::handle_frame`] first (MAC
//! control frames are consumed there, others come back as
//! [`pause::Disposition::NotMacControl`]); account queue changes with
//! [`ingress::PfcGenerator::on_enqueue`] / `on_dequeue`; before sending data,
//! drain [`ingress::PfcGenerator::poll_transmit`] (MAC control frames go ahead of
//! queued data, 802.3 §31B.1) and check [`pause::PauseState::is_paused`] for the
//! priority of the next frame; wake up at the earlier of both `poll_timeout()`s.
//!
//! # Counters
//!
//! Names follow the mlx5 ethtool counters (Linux
//! `Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst`,
//! `en_stats.c` `pport_per_prio_pfc_stats_desc`): `rx_prio{N}_pause`,
//! `rx_prio{N}_pause_duration`, `rx_prio{N}_pause_transition`,
//! `tx_prio{N}_pause`, `tx_prio{N}_pause_duration`, the `*_global_pause*` set
//! for 802.3x, and the 802.3 group's `rx_pause_ctrl_phy` / `tx_pause_ctrl_phy`,
//! `rx_mac_control_phy` / `tx_mac_control_phy`, `rx_unsupported_op_phy`.
//! Durations are reported in **microseconds** (floored), as mlx5 does; the
//! structs keep nanoseconds. See [`ingress::TxPauseCounters`] and
//! [`pause::RxPauseCounters`]; a port dump is
//! `gen.counters().iter().chain(pause.counters().iter())`.

pub mod classify;
pub mod headroom;
pub mod ingress;
pub mod pause;

pub use classify::{PrioMap, Trust};
pub use headroom::{Headroom, HeadroomParams};
pub use ingress::{ConfigError, GeneratorConfig, PfcGenerator, Thresholds, TxPauseCounters};
pub use pause::{Disposition, PauseConfig, PauseState, RxPauseCounters};

/// Number of IEEE 802.1Q priorities (PCP values) and of PFC classes
/// (802.1Qbb clause 36: one class-enable bit and one timer per priority).
pub const NUM_PRIORITIES: usize = 8;

/// Default pause time of an XOFF, quanta: the maximum, 0xFFFF (335.5 µs at
/// 100 Gbit/s, 3.355 ms at 10 Gbit/s; ROCEV2-DIGEST §7).
pub const DEFAULT_XOFF_QUANTA: u16 = 0xFFFF;

/// Which link-level flow control a port runs. PFC and PAUSE are mutually
/// exclusive on one port (ROCEV2-DIGEST §7, after mstflint's port settings), so
/// a port runs one of them or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowControlMode {
    /// Neither: frames are not generated, received ones are ignored (counted).
    #[default]
    Off,
    /// IEEE 802.3 Annex 31B PAUSE (opcode 0x0001): all traffic is one class.
    Pause,
    /// IEEE 802.1Qbb PFC (opcode 0x0101): per-priority, for the priorities in
    /// the configured mask only.
    Pfc,
}

/// `["<pre>0<post>", …, "<pre>7<post>"]` as `&'static str`s.
macro_rules! prio_names {
    ($pre:literal, $post:literal) => {
        [
            concat!($pre, "0", $post),
            concat!($pre, "1", $post),
            concat!($pre, "2", $post),
            concat!($pre, "3", $post),
            concat!($pre, "4", $post),
            concat!($pre, "5", $post),
            concat!($pre, "6", $post),
            concat!($pre, "7", $post),
        ]
    };
}
pub(crate) use prio_names;

/// Nanoseconds to the microseconds mlx5 reports its `*_pause_duration`
/// counters in (floored).
#[inline]
pub(crate) fn ns_to_us(ns: u64) -> u64 {
    ns / 1_000
}

/// Whether bit `prio` of `mask` is set (false for `prio` above 7).
#[inline]
pub(crate) fn bit(mask: u8, prio: usize) -> bool {
    prio < NUM_PRIORITIES && mask & (1 << prio) != 0
}
