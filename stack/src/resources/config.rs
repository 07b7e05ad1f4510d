//! The static configuration of a device (one port) and the events it raises.

use crate::cc::CcConfig;
use crate::pfc::classify::PrioMap;
use crate::pfc::pause::PauseConfig;

use super::av::Gid;

/// Static facts about the (single) port.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// MAC address.
    pub mac: [u8; 6],
    /// GID table (index 0 first): IPv4-mapped and IPv6 GIDs.
    pub gids: Vec<Gid>,
    /// Ethernet MTU of the link, bytes (1500 by default); the active IB MTU is
    /// the largest that fits (rxe: netdev MTU − 80).
    pub netdev_mtu: usize,
    /// Window of unacknowledged PSNs per RC QP before the requester stalls
    /// (default 128: rxe's `RXE_MAX_UNACKED_PSNS`). A wider window is
    /// re-sent whole on every retry: against the kernel's rxe in an
    /// emulated guest, 1024 PSNs in flight took the guest longer to work
    /// through than seven local ACK timeouts, and `ib_write_bw` failed with
    /// retry-exceeded (docs/kernel-peer.md).
    pub max_unacked_psns: u32,
    /// Responder: send an ACK every this many in-order request packets even
    /// without AckReq (0 = only when AckReq is set). CASES R14.
    pub ack_coalesce: u32,
    /// Requester: set AckReq at least every this many packets (rxe: 64),
    /// besides on the last packet of a signalled, READ/ATOMIC or last-queued
    /// WQE (see `transport::rc::requester`).
    pub ackreq_interval: u32,
    /// Congestion control: ECN/DSCP/PCP of sent packets, CNPs, DCQCN, line
    /// rate ([`CcConfig::default`]: the ConnectX firmware defaults).
    pub cc: CcConfig,
    /// Which received pause frames the port obeys and how its own frames map
    /// to priorities ([`FlowControlConfig::default`]: PFC on every priority,
    /// trust DSCP).
    pub flow_control: FlowControlConfig,
    /// Zero-copy transmit ([`crate::verbs::Device::poll_transmit_gather`]): a packet whose
    /// payload is one contiguous range of a shared MR
    /// ([`crate::verbs::Device::reg_mr_shared`]) and at least this many bytes long is
    /// described by reference ([`crate::backend::TxFrame::Gather`]) instead of being copied
    /// into the frame buffer; 0 = never. Default 2048 bytes: attaching a
    /// payload by reference has a fixed cost whatever its size, copying one
    /// grows with it, and the two cross between 1024 and 2048 bytes for
    /// cold payloads (the usual case for large messages); the measurements
    /// are in the README (Benchmarks, "Zero-copy threshold").
    pub zero_copy_min_bytes: usize,
    /// Accept RoCE frames whatever their destination MAC (default `false`:
    /// only frames to [`DeviceConfig::mac`] are taken, the others count
    /// `rx_dmac_mismatch`, as a host's IP layer drops frames for another
    /// host, RFC 1122 §3.3.6 / Linux `PACKET_OTHERHOST`). For tools that
    /// feed captures whose MACs were rewritten.
    pub promiscuous: bool,
    /// The port's VLAN: `Some(vid)` when the port is a VLAN interface, so UD
    /// QPs take only frames tagged with `vid`; `None` (default): UD QPs take
    /// untagged and priority-tagged (VID 0) frames only. RC and UC QPs take
    /// only frames with the VLAN of their address vector (none: untagged or
    /// VID 0). Other frames count `rx_vlan_mismatch` (rxe: a frame matches
    /// only the GIDs of the netdev, base or VLAN, it arrived on).
    pub vlan: Option<u16>,
}

/// How the port honours pause frames (IEEE 802.1Qbb clause 36, 802.3
/// Annex 31B; ROCEV2-DIGEST §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControlConfig {
    /// PFC (per priority), 802.3x PAUSE (all traffic) or off, the
    /// PFC-enabled priorities and the link speed the quanta are timed at.
    /// Default: PFC honoured on all eight priorities at 100 Gbit/s (a
    /// priority the switch never pauses costs nothing; restrict the mask to
    /// match the switch's lossless priorities, e.g. `1 << 3`).
    pub pause: PauseConfig,
    /// How the peer classifies this port's frames, so that a pause of
    /// priority p stops exactly the frames it counts as p. Default trust
    /// DSCP with DSCP >> 3: data (DSCP 26) is priority 3, CNPs (DSCP 48)
    /// priority 6.
    pub prio_map: PrioMap,
}

impl Default for FlowControlConfig {
    fn default() -> Self {
        FlowControlConfig {
            pause: PauseConfig::pfc(100_000, 0xFF),
            prio_map: PrioMap::trust_dscp(),
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            mac: [0x02, 0, 0, 0, 0, 1],
            gids: Vec::new(),
            netdev_mtu: 1500,
            max_unacked_psns: 128,
            ack_coalesce: 0,
            ackreq_interval: 64,
            cc: CcConfig::default(),
            flow_control: FlowControlConfig::default(),
            zero_copy_min_bytes: 2048,
            promiscuous: false,
            vlan: None,
        }
    }
}

/// Asynchronous events (`enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqErr {
        /// The CQ.
        cq: u32,
    },
    /// A QP entered the error state (`IBV_EVENT_QP_FATAL`).
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// A QP moved from RTS to SQD and every send WQE started before the move
    /// has completed (`IBV_EVENT_SQ_DRAINED`, IBTA 1.7 §11.6.3). Raised once
    /// per RTS→SQD move, and not if the QP leaves SQD first.
    SqDrained {
        /// The QP.
        qpn: u32,
    },
}
