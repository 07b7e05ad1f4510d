//! Congestion control: ECN marking, CNPs and DCQCN (ROCEV2-DIGEST §6).
//!
//! - `np` (notification point): a CE-marked RoCEv2 packet for a QP makes the
//!   device queue a CNP (RoCEv2 Annex A17.9.3) to the packet's sender, at most
//!   one per flow per [`CcConfig::min_time_between_cnps`].
//! - [`dcqcn`] (reaction point): [`ReactionPoint`], the DCQCN rate controller
//!   of one QP (Zhu et al., SIGCOMM 2015; mlx5 firmware parameters), driven by
//!   received CNPs, bytes sent and timers. It can be used on its own.
//! - [`pacer`]: [`Pacer`], the token bucket that holds a QP to its current
//!   rate.
//!
//! # How the device uses them
//!
//! Every packet a QP sends is ECN-capable ([`CcConfig::data_ecn`], ECT(0) by
//! default) with DSCP [`CcConfig::data_dscp`] and, on a VLAN-tagged path, PCP
//! [`CcConfig::data_802p_prio`] (an address vector's own non-zero DSCP or PCP
//! wins; without a VLAN tag the priority only matters to whoever classifies
//! by DSCP). Switches mark CE; the receiving device's NP answers with CNPs
//! (DSCP 48, PCP 6 by default), which `Device::poll_transmit` sends before
//! any other frame. A received CNP goes to the reaction point of the QP in its
//! BTH DestQP; from the first one on, `poll_transmit` paces that QP: a QP
//! whose pacer is not ready is skipped and a timer is armed at its release
//! time, so `Device::poll_timeout` includes it and the caller can sleep until
//! then. ACK-class responses (ACK, NAK, ATOMIC ACKNOWLEDGE) are not paced or
//! charged, so a slow QP never delays acknowledgements into its peer's ACK
//! timeout; READ responses and every request are. A QP whose RP is idle (no
//! CNP yet, or recovered to line rate) never touches its pacer: with no QP
//! paced and no CNP queued, the fast path costs three branches per
//! `poll_transmit` (a queued CNP, a due pacer release, a paced QP).
//!
//! # Defaults
//!
//! [`CcConfig::default`] is what ConnectX firmware ships (ROCEV2-DIGEST §6,
//! two mlxconfig dumps; NVIDIA "DCQCN CC Parameters"): `min_time_between_cnps`
//! 4 µs, `cnp_dscp` 48, `cnp_802p_prio` 6, the [`DcqcnParams::mlx5`] reaction
//! point, and the usual lossless-RoCE data class DSCP 26 / priority 3.
//! [`CcConfig::paper`] uses the DCQCN paper's values instead (CNP interval
//! N = 50 µs, [`DcqcnParams::paper`]).
//!
//! Why 4 µs and not the paper's 50 µs between CNPs: it is what the shipping
//! firmware uses (both mlxconfig dumps), and it matches the firmware reaction
//! point we default to, which cuts at most once per 4 µs
//! `rate_reduce_monitor_period` and updates α every 1 µs; a 50 µs CNP spacing
//! would let that RP cut only once per 50 µs (625 KB at 100 Gbit/s). The
//! paper's N = 50 µs belongs with its own RP, which cuts on every CNP and
//! updates α every 55 µs, on 40 Gbit/s links; [`CcConfig::paper`] keeps the
//! two together. Note that mstflint describes the firmware's interval as
//! per port ("from the port"); here it is per flow (local QP, remote QPN),
//! as in the paper.

pub mod dcqcn;
mod np;
pub mod pacer;

use core::time::Duration;

pub use dcqcn::{AlphaGain, CutOrder, DcqcnParams, ReactionPoint};
pub(crate) use np::{cnp_repr, Admit, CnpPath, NotificationPoint};
pub use pacer::Pacer;

/// The IP ECN codepoint (RFC 3168 §5) a device writes into the packets it
/// sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Ecn {
    /// 00: not ECN-capable (switches drop instead of marking).
    NotEct = 0,
    /// 10: ECT(0), ECN-capable (what ConnectX sends; default).
    #[default]
    Ect0 = 2,
    /// 01: ECT(1), ECN-capable.
    Ect1 = 1,
}

impl Ecn {
    /// The two ECN bits (0 Not-ECT, 2 ECT(0), 1 ECT(1)).
    #[inline]
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

/// The CE codepoint (RFC 3168 §5): the switch saw congestion.
pub const ECN_CE: u8 = 3;

/// Congestion-control configuration of a device (`DeviceConfig::cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcConfig {
    /// Line rate of the port, Mbit/s: the rate of an unlimited QP and the
    /// ceiling of every reaction point. Default 100 000 (100 GbE).
    pub line_rate_mbps: u64,
    /// Send CNPs for CE-marked packets (mlx5 `roce_cc` NP enable). Default on.
    pub np_enabled: bool,
    /// React to received CNPs (mlx5 RP enable); when off, CNPs only count as
    /// `rp_cnp_ignored`. Default on.
    pub rp_enabled: bool,
    /// ECN codepoint of every packet a QP sends. Default ECT(0). The ECN bits
    /// of an address vector's traffic class are ignored (the NIC owns the ECN
    /// field, as on ConnectX).
    pub data_ecn: Ecn,
    /// DSCP of the packets a QP sends when its address vector's traffic class
    /// has DSCP 0 (a non-zero DSCP there wins). Default 26 (AF31), the usual
    /// lossless RoCE class.
    pub data_dscp: u8,
    /// 802.1p priority of the packets a QP sends: the PCP written when the
    /// address vector has a VLAN tag whose own PCP is 0 (a non-zero PCP
    /// there wins). Without a tag no PCP is sent and the priority follows
    /// from the DSCP (26 >> 3 = 3 under the default DSCP→priority map).
    /// Default 3.
    pub data_802p_prio: u8,
    /// DSCP of CNPs (mlx5 `cnp_dscp`). Default 48.
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs (mlx5 `cnp_802p_prio`): the PCP when the path
    /// is VLAN-tagged. Default 6.
    pub cnp_802p_prio: u8,
    /// ECN codepoint of CNPs. Default ECT(0), as in the ConnectX-4 Lx CNP of
    /// public-vectors.md A1 (TOS 0xC2).
    pub cnp_ecn: Ecn,
    /// UDP source port of CNPs. Default 0, as ConnectX sends
    /// (public-vectors.md A1, A3).
    pub cnp_udp_sport: u16,
    /// At most one CNP per flow (local QP, remote QPN) per this interval
    /// (mlx5 `min_time_between_cnps`; paper N). Default 4 µs (see the module
    /// docs); 0 = one per CE packet (still at most one queued per flow).
    pub min_time_between_cnps: Duration,
    /// Flows the NP tracks at once (storage reserved when the device is
    /// created). Default 256.
    pub np_max_flows: usize,
    /// Pacer bucket depth beyond one frame, bytes: 0 (default) spaces every
    /// frame; a backend polled late by wall-clock timers may want a few
    /// frames' worth so its average rate does not fall below the target.
    pub pacer_burst_bytes: u32,
    /// Bytes added to each frame's length when the pacer charges it (e.g. 24
    /// for FCS, preamble and inter-frame gap, to pace wire bytes). Default 0:
    /// frames are charged their length as built.
    pub pacer_overhead_bytes: u32,
    /// The reaction point's parameters. Default [`DcqcnParams::mlx5`].
    pub dcqcn: DcqcnParams,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            line_rate_mbps: 100_000,
            np_enabled: true,
            rp_enabled: true,
            data_ecn: Ecn::Ect0,
            data_dscp: 26,
            data_802p_prio: 3,
            cnp_dscp: 48,
            cnp_802p_prio: 6,
            cnp_ecn: Ecn::Ect0,
            cnp_udp_sport: 0,
            min_time_between_cnps: Duration::from_micros(4),
            np_max_flows: 256,
            pacer_burst_bytes: 0,
            pacer_overhead_bytes: 0,
            dcqcn: DcqcnParams::mlx5(),
        }
    }
}

impl CcConfig {
    /// The DCQCN paper's configuration: CNP interval N = 50 µs and
    /// [`DcqcnParams::paper`]; the rest as [`CcConfig::default`].
    pub fn paper() -> CcConfig {
        CcConfig {
            min_time_between_cnps: Duration::from_micros(50),
            dcqcn: DcqcnParams::paper(),
            ..CcConfig::default()
        }
    }
}

/// Congestion-control state of one QP (in the QP; its timers, the
/// reaction point's next event and the pacer release, are in the QP's timer
/// table).
#[derive(Debug, Clone)]
pub(crate) struct QpCc {
    pub rp: ReactionPoint,
    pub pacer: Pacer,
    /// Whether the device counts this QP as paced (mirrors `rp.is_active()`
    /// after every RP call).
    pub paced: bool,
}

impl QpCc {
    pub fn new(cfg: &CcConfig) -> QpCc {
        QpCc {
            rp: ReactionPoint::new(cfg.dcqcn, cfg.line_rate_mbps),
            pacer: Pacer::new(cfg.pacer_burst_bytes),
            paced: false,
        }
    }
}
