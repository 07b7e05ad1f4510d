//! The device: the sans-IO entry point of the stack.
//!
//! A [`Device`] owns protection domains, memory regions, completion queues and
//! queue pairs. It never does I/O and never reads a clock; the caller drives it:
//!
//! 1. [`Device::handle_frame`] for every received frame, with the current time;
//! 2. [`Device::poll_transmit`] until it returns `None`, sending each frame;
//! 3. [`Device::poll_timeout`] for the next deadline, and
//!    [`Device::handle_timeout`] once it has passed;
//! 4. [`Device::poll_cq`] and [`Device::poll_event`] for completions and events.
//!
//! Received frames are checked as a host's network stack and rxe check them
//! (see [`Device::handle_frame`]): the destination MAC must be the port's
//! ([`DeviceConfig::mac`], unless [`DeviceConfig::promiscuous`]), the
//! destination IP one of the GIDs, the VLAN that of the QP's path (or the
//! port's, [`DeviceConfig::vlan`], for UD); every frame that is not taken
//! increments exactly one named counter ([`Counters`], the parser's drop
//! counters, or the pause counters).
//!
//! Idle QPs cost nothing per poll: only QPs with work are on the active list,
//! and timers sit in an ordered set with exactly one entry per armed QP timer
//! (a cancelled timer is removed at once), so [`Device::poll_timeout`] is exact
//! and `None` when no timer is armed.
//!
//! Congestion control ([`crate::cc`]): CE-marked packets make the device queue
//! CNPs (sent by `poll_transmit` before anything else); received CNPs drive
//! the DCQCN reaction point of their QP, and a QP with an active reaction
//! point is paced: `poll_transmit` skips it until its pacer releases it, and
//! the release time is one of the timers `poll_timeout` reports.
//!
//! Flow control ([`crate::pfc`]): received PFC and 802.3x PAUSE frames stop
//! the paused priorities at once (QPs of a paused priority, and CNPs when
//! theirs is, are skipped by `poll_transmit`); the pause expiry is one of the
//! deadlines `poll_timeout` reports, and XON resumes at once.

use std::collections::{BTreeSet, VecDeque};

use super::keymap::KeyMap;
use std::net::IpAddr;

use crate::cc::{self, Admit, CcConfig, CnpPath, NotificationPoint, QpCc, ReactionPoint};
use crate::pfc::classify::{PrioMap, Trust};
use crate::pfc::pause::{Disposition, PauseConfig, PauseState, RxPauseCounters};

use super::cq::Cq;
use super::mr::{Mr, MrMem, MrTable};
use super::qp::{transition_masks, Qp, QpAttr, QpInfo, QpInitAttr, VerbsError};
use super::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType};
use super::wr::{RecvWr, SendWr, Wc};
use crate::backend::TxFrame;
use crate::counters::Counters;
use crate::time::Instant;
use crate::transport::av::{udp_sport, Gid};
use crate::transport::psn::Psn;
use crate::transport::ZeroCopy;
use crate::transport::{rc, uc, ud};
use crate::wire::{
    DropCounters, Error as WireError, EthRepr, Ipv4Repr, Ipv6Repr, L2Info, NetInfo, NetRepr,
    RocePacket, Transport, UdpChecksum, UdpRepr, VlanTag, ETHERTYPE_IPV4, ETHERTYPE_IPV6,
    ROCEV2_UDP_PORT,
};
use std::sync::Arc;

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
    /// Window of unacknowledged PSNs per RC QP before the requester stalls.
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
    /// Zero-copy transmit ([`Device::poll_transmit_gather`]): a packet whose
    /// payload is one contiguous range of a shared MR
    /// ([`Device::reg_mr_shared`]) and at least this many bytes long is
    /// described by reference ([`TxFrame::Gather`]) instead of being copied
    /// into the frame buffer; 0 = never. Default 2048 bytes, from the
    /// dpdk-glue figures (2026-11-29, 2-core guest): building and freeing an
    /// extbuf chain costs ~250 ns whatever the size, copying 1024 bytes
    /// ~100 ns (cache-hot) to ~430 ns (cold), 2048 bytes ~115 to ~780 ns;
    /// end to end over memif, 64 KiB WRITEs at PMTU 1024 sent by reference
    /// ran at 0.88-0.97x the copying goodput. So 1024-byte packets copy,
    /// and from 2048 bytes (cold payloads, the usual case for large
    /// messages) the reference wins.
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
            max_unacked_psns: 1024,
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

/// lkey and rkey of a registered MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// Which timer of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    Ack,
    Rnr,
    /// The DCQCN reaction point's next event (`QpCc::rp_deadline`).
    Dcqcn,
}

/// The device state the transport engines need besides their QP.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a DeviceConfig,
    pub mrs: &'a mut MrTable,
    pub cqs: &'a mut KeyMap<u32, Cq>,
    pub counters: &'a mut Counters,
    pub events: &'a mut VecDeque<AsyncEvent>,
    pub timers: &'a mut BTreeSet<(Instant, u32, TimerKind)>,
    pub ip_ident: &'a mut u16,
    pub zc: &'a mut ZeroCopy,
}

impl Ctx<'_> {
    /// Deliver a completion; an overrun is counted and raised as an event.
    pub fn complete(&mut self, cq: u32, wc: Wc) {
        let ok = self.cqs.get_mut(&cq).is_some_and(|c| c.push(wc));
        if !ok {
            self.counters.cq_overrun += 1;
            let ev = AsyncEvent::CqErr { cq };
            if !self.events.contains(&ev) {
                self.events.push_back(ev);
            }
        }
    }

    /// Arm (`Some`), move or cancel (`None`) timer `kind` of `qp`. The QP's
    /// deadline field and the device's timer set always agree.
    pub fn set_timer(&mut self, qp: &mut Qp, kind: TimerKind, at: Option<Instant>) {
        let slot = match kind {
            TimerKind::Ack => &mut qp.comp.ack_deadline,
            TimerKind::Rnr => &mut qp.comp.rnr_deadline,
            // The reaction point's timer lives in `QpCc` (`set_rp_timer`).
            TimerKind::Dcqcn => return,
        };
        move_timer(self.timers, qp.qpn, kind, slot, at);
    }

    /// [`Ctx::headers`] for the packets of `qp` to its own address vector,
    /// from the QP's cache when the address vector and `sport` are those it
    /// was built for (only the IPv4 identification changes per packet).
    /// Inlined: returned through memory, the reprs cost the caller a
    /// store-forwarding stall per packet.
    #[inline(always)]
    pub fn headers_cached(
        &mut self,
        qp: &mut Qp,
        sport: u16,
    ) -> Option<(EthRepr, NetRepr, UdpRepr)> {
        if let Some(c) = &qp.hdr_cache {
            // modify_qp and reset drop the cache whenever the AV (or the
            // destination QPN, hence the sport) changes.
            debug_assert!(c.av == qp.attr.ah_attr);
            if c.sport == sport {
                let mut net = c.net;
                if let NetRepr::Ipv4(r) = &mut net {
                    *self.ip_ident = self.ip_ident.wrapping_add(1);
                    r.ident = *self.ip_ident;
                }
                return Some((c.eth, net, c.udp));
            }
        }
        let av = qp.attr.ah_attr;
        let (eth, net, udp) = self.headers(qp, &av, sport)?;
        qp.hdr_cache = Some(crate::verbs::qp::HeaderCache {
            av,
            sport,
            eth,
            net,
            udp,
            req: None,
        });
        Some((eth, net, udp))
    }

    /// Ethernet + network + UDP headers for a packet of `qp` to its peer (or to
    /// `av` for UD). DSCP and PCP: the address vector's when non-zero, else
    /// the configured data class; ECN: the configured codepoint
    /// ([`CcConfig`]).
    pub fn headers(
        &mut self,
        qp: &Qp,
        av: &crate::transport::av::AddressVector,
        sport: u16,
    ) -> Option<(EthRepr, NetRepr, UdpRepr)> {
        let sgid = *self.cfg.gids.get(av.sgid_index as usize)?;
        let _ = qp;
        let cc = &self.cfg.cc;
        let dscp = match av.traffic_class >> 2 {
            0 => cc.data_dscp & 0x3F,
            d => d,
        };
        let ecn = cc.data_ecn.bits();
        let eth = EthRepr {
            dst: av.dmac,
            src: self.cfg.mac,
            vlan: av.vlan.map(|t| VlanTag {
                pcp: if t.pcp == 0 {
                    cc.data_802p_prio & 7
                } else {
                    t.pcp
                },
                ..t
            }),
        };
        let net = match (sgid.to_ip(), av.dgid.to_ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                *self.ip_ident = self.ip_ident.wrapping_add(1);
                NetRepr::Ipv4(Ipv4Repr {
                    src,
                    dst,
                    dscp,
                    ecn,
                    ttl: if av.hop_limit == 0 { 64 } else { av.hop_limit },
                    ident: *self.ip_ident,
                    dont_frag: true,
                })
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => NetRepr::Ipv6(Ipv6Repr {
                src,
                dst,
                dscp,
                ecn,
                flow_label: av.flow_label,
                hop_limit: if av.hop_limit == 0 { 64 } else { av.hop_limit },
            }),
            _ => return None,
        };
        let udp = UdpRepr {
            src_port: sport,
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Default,
        };
        Some((eth, net, udp))
    }
}

/// Move timer `kind` of QP `qpn` from `*slot` to `at` (arm, move or cancel),
/// keeping the slot and the timer set in agreement.
fn move_timer(
    timers: &mut BTreeSet<(Instant, u32, TimerKind)>,
    qpn: u32,
    kind: TimerKind,
    slot: &mut Option<Instant>,
    at: Option<Instant>,
) {
    if *slot == at {
        return;
    }
    // Insert before removing: the set never empties on a move, so the
    // B-tree keeps its nodes (no free/allocate per re-armed timer).
    if let Some(new) = at {
        timers.insert((new, qpn, kind));
    }
    if let Some(old) = slot.take() {
        timers.remove(&(old, qpn, kind));
    }
    *slot = at;
}

/// Arm, move or cancel the reaction-point timer of `qpn`.
fn set_rp_timer(
    timers: &mut BTreeSet<(Instant, u32, TimerKind)>,
    qpn: u32,
    cc: &mut QpCc,
    at: Option<Instant>,
) {
    move_timer(timers, qpn, TimerKind::Dcqcn, &mut cc.rp_deadline, at);
}

/// Arm, move or cancel the pacer release of `qpn` (a set of its own, so
/// `poll_transmit` finds due releases without running other timers).
fn set_pacer_timer(
    pacer_timers: &mut BTreeSet<(Instant, u32)>,
    qpn: u32,
    cc: &mut QpCc,
    at: Option<Instant>,
) {
    if cc.pacer_deadline == at {
        return;
    }
    if let Some(new) = at {
        pacer_timers.insert((new, qpn));
    }
    if let Some(old) = cc.pacer_deadline.take() {
        pacer_timers.remove(&(old, qpn));
    }
    cc.pacer_deadline = at;
}

/// The priority the peer gives QP `qp`'s frames ([`FlowControlConfig::prio_map`]):
/// from the DSCP or PCP [`Device::headers`] writes (the address vector's when
/// non-zero, else the configured data class). A UD QP's address vector is
/// per work request; it is classified by the configured data class.
fn qp_priority(cfg: &DeviceConfig, qp: &Qp) -> u8 {
    let map = &cfg.flow_control.prio_map;
    let av = (qp.qp_type != QpType::Ud).then_some(&qp.attr.ah_attr);
    match map.trust {
        Trust::Dscp => {
            let dscp = match av.map_or(0, |a| a.traffic_class >> 2) {
                0 => cfg.cc.data_dscp & 0x3F,
                d => d,
            };
            map.dscp[dscp as usize] & 7
        }
        Trust::Pcp => match av.map_or(Some(None), |a| a.vlan.map(Some)) {
            None => map.default_prio & 7,
            Some(Some(t)) if t.pcp != 0 => t.pcp & 7,
            Some(_) => cfg.cc.data_802p_prio & 7,
        },
    }
}

/// The priority the peer gives this port's CNPs (`cnp_dscp`, or
/// `cnp_802p_prio` under trust PCP).
fn cnp_priority(cfg: &DeviceConfig) -> u8 {
    let map = &cfg.flow_control.prio_map;
    match map.trust {
        Trust::Dscp => map.dscp[(cfg.cc.cnp_dscp & 0x3F) as usize] & 7,
        Trust::Pcp => cfg.cc.cnp_802p_prio & 7,
    }
}

/// The VLAN ID of `frame` (0 when untagged; VID 0 is a priority tag, IEEE
/// 802.1Q §9.6, and means no VLAN).
#[inline]
fn frame_vid(frame: &[u8]) -> u16 {
    match frame.get(12..16) {
        Some(&[0x81, 0x00, hi, lo]) => u16::from_be_bytes([hi, lo]) & 0x0FFF,
        _ => 0,
    }
}

/// The VLAN ID a QP takes frames from: its address vector's for RC/UC, the
/// port's for UD (0: untagged).
#[inline]
fn qp_vid(cfg: &DeviceConfig, qp: &Qp) -> u16 {
    let vid = if qp.qp_type == QpType::Ud {
        cfg.vlan
    } else {
        qp.attr.ah_attr.vlan.map(|t| t.vid)
    };
    vid.unwrap_or(0) & 0x0FFF
}

/// Notification point (RoCEv2 Annex A17.9.3; DCQCN NP): a CE-marked RoCEv2
/// packet was accepted for `qp`. Counts it and, if the NP is enabled and the
/// flow's rate limit allows, queues a CNP to the packet's sender: for RC/UC
/// along the QP's address vector to its `dest_qp_num`, for UD back along the
/// packet's own addressing to its DETH source QP.
#[cold]
#[inline(never)]
fn notify_ce(
    cfg: &DeviceConfig,
    np: &mut NotificationPoint,
    counters: &mut Counters,
    qp: &Qp,
    pkt: &RocePacket<'_>,
    net: &NetInfo,
    now: Instant,
) {
    counters.np_ecn_marked_roce_packets += 1;
    if !cfg.cc.np_enabled {
        return;
    }
    let (remote, path) = if qp.qp_type == QpType::Ud {
        let l2 = pkt.l2();
        let path = CnpPath {
            src_mac: cfg.mac,
            dst_mac: l2.src,
            vlan: l2.vlan,
            src_ip: net.dst(),
            dst_ip: net.src(),
            ttl: 64,
            flow_label: 0,
        };
        (pkt.ext().deth().map(|d| d.src_qp), Some(path))
    } else {
        let av = &qp.attr.ah_attr;
        let path = cfg.gids.get(av.sgid_index as usize).map(|g| CnpPath {
            src_mac: cfg.mac,
            dst_mac: av.dmac,
            vlan: av.vlan,
            src_ip: g.to_ip(),
            dst_ip: av.dgid.to_ip(),
            ttl: if av.hop_limit == 0 { 64 } else { av.hop_limit },
            flow_label: av.flow_label,
        });
        (Some(qp.attr.dest_qp_num), path)
    };
    let (Some(remote), Some(path)) = (remote, path) else {
        return;
    };
    let key = (qp.qpn, remote);
    match np.admit(now, key, cfg.cc.min_time_between_cnps) {
        Admit::Send => match cc::cnp_repr(&cfg.cc, &path, remote) {
            Some(repr) => np.push(key, repr),
            None => np.cancel(key),
        },
        Admit::Limited => {}
        Admit::TableFull => counters.np_cnp_dropped += 1,
    }
}

/// One frame of a QP whose reaction point is active. ACK-class responses
/// (ACK, NAK, ATOMIC ACKNOWLEDGE) leave at once and are not charged; anything
/// else waits for the pacer (`Err(())`: a pacer timer is armed at the release
/// time) and, once sent, is charged to the pacer (frame length plus
/// `pacer_overhead_bytes`) and to the reaction point's byte counter.
#[inline(never)]
fn produce_paced(
    qp: &mut Qp,
    cc: &mut QpCc,
    pacer_timers: &mut BTreeSet<(Instant, u32)>,
    ctx: &mut Ctx<'_>,
    now: Instant,
    buf: &mut [u8],
) -> Result<Option<usize>, ()> {
    if qp.qp_type == QpType::Rc && rc::responder::next_is_ack(qp) {
        if let Some(n) = rc::responder::produce(qp, ctx, buf) {
            return Ok(Some(n));
        }
    }
    let rate = cc.rp.rate();
    if !cc.pacer.is_ready(now, rate) {
        let at = cc.pacer.release_time(rate);
        set_pacer_timer(pacer_timers, qp.qpn, cc, Some(at));
        return Err(());
    }
    // Released: a pacer timer still armed (the QP was woken another way)
    // has nothing left to do.
    set_pacer_timer(pacer_timers, qp.qpn, cc, None);
    let sent = crate::transport::produce(qp, ctx, now, buf);
    if let Some(n) = sent {
        let charged = n as u64 + u64::from(ctx.cfg.cc.pacer_overhead_bytes);
        cc.pacer.on_sent(now, charged, rate);
        cc.rp.on_bytes_sent(now, n as u64);
    }
    Ok(sent)
}

/// A [`Ctx`] over the device's fields (a macro, so the borrow of `self.qps`
/// stays separate).
macro_rules! ctx {
    ($d:expr) => {
        Ctx {
            cfg: &$d.cfg,
            mrs: &mut $d.mrs,
            cqs: &mut $d.cqs,
            counters: &mut $d.counters,
            events: &mut $d.events,
            timers: &mut $d.timers,
            ip_ident: &mut $d.ip_ident,
            zc: &mut $d.zc,
        }
    };
}

/// A RoCEv2 device (one port).
#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    active_mtu: Mtu,
    next_pd: u32,
    pds: Vec<u32>,
    mrs: MrTable,
    next_cq: u32,
    cqs: KeyMap<u32, Cq>,
    next_qpn: u32,
    qps: KeyMap<u32, Qp>,
    active: VecDeque<u32>,
    timers: BTreeSet<(Instant, u32, TimerKind)>,
    events: VecDeque<AsyncEvent>,
    counters: Counters,
    drops: DropCounters,
    ip_ident: u16,
    /// Congestion-control state per QP (created with the QP).
    cc_qps: KeyMap<u32, QpCc>,
    /// QPs whose reaction point is active (paced); 0 = the fast path.
    paced: usize,
    /// Pacer releases: (time, QPN), one per QP waiting for its pacer.
    pacer_timers: BTreeSet<(Instant, u32)>,
    /// The notification point: CNP rate limiting and the CNPs to send.
    np: NotificationPoint,
    /// Received PFC / PAUSE state: which priorities may not transmit.
    pause: PauseState,
    /// Some priority may still be paused (cleared once none is): keeps the
    /// unpaused transmit path to one test of a flag.
    pause_armed: bool,
    /// Zero-copy transmit state (`poll_transmit_gather`).
    zc: ZeroCopy,
}

impl Device {
    /// A device with `cfg`.
    pub fn new(cfg: DeviceConfig) -> Device {
        let active_mtu = Mtu::for_netdev(cfg.netdev_mtu).unwrap_or(Mtu::Mtu256);
        let (cfg_np_enabled, cfg_np_max_flows) = (cfg.cc.np_enabled, cfg.cc.np_max_flows);
        let pause_cfg = cfg.flow_control.pause;
        Device {
            cfg,
            active_mtu,
            next_pd: 0,
            pds: Vec::new(),
            mrs: MrTable::default(),
            next_cq: 0,
            cqs: KeyMap::default(),
            next_qpn: 0x10,
            qps: KeyMap::default(),
            active: VecDeque::new(),
            timers: BTreeSet::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            drops: DropCounters::default(),
            ip_ident: 0,
            cc_qps: KeyMap::default(),
            paced: 0,
            pacer_timers: BTreeSet::new(),
            np: NotificationPoint::new(if cfg_np_enabled { cfg_np_max_flows } else { 1 }),
            pause: PauseState::new(pause_cfg),
            pause_armed: false,
            zc: ZeroCopy::default(),
        }
    }

    /// Received pause frames and pause time per priority (mlx5 names:
    /// `rx_prioN_pause`, `rx_prioN_pause_duration`, `rx_pause_ctrl_phy`, ...).
    pub fn pause_counters(&self) -> &RxPauseCounters {
        self.pause.counters()
    }

    /// Priorities the port may not transmit at `now` (bit n = priority n).
    pub fn paused_priorities(&self, now: Instant) -> u8 {
        if self.pause_armed {
            self.pause.paused_mask(now)
        } else {
            0
        }
    }

    /// A frame that is not RoCE: PFC and PAUSE frames update the pause state
    /// (and are counted there); anything else is counted by what it is.
    #[cold]
    #[inline(never)]
    fn handle_mac_control(&mut self, now: Instant, frame: &[u8]) {
        match self.pause.handle_frame(now, frame) {
            Disposition::Applied { .. } => {
                self.pause_armed = self.pause.paused_mask(now) != 0;
            }
            Disposition::Ignored | Disposition::Dropped(_) => {}
            Disposition::NotMacControl => self.count_other(frame),
        }
    }

    /// Count a frame that is neither RoCE nor MAC control (the parser said
    /// `NotRoce`): by EtherType, IP protocol, or UDP port.
    fn count_other(&mut self, frame: &[u8]) {
        let c = &mut self.counters;
        let Ok(l2) = L2Info::parse(frame) else {
            c.rx_other_ethertype += 1;
            return;
        };
        let l3 = frame.get(l2.header_len()..).unwrap_or(&[]);
        let proto = match l2.ethertype {
            ETHERTYPE_IPV4 => l3.get(9),
            ETHERTYPE_IPV6 => l3.get(6),
            _ => {
                c.rx_other_ethertype += 1;
                return;
            }
        };
        if proto == Some(&17) {
            c.rx_other_udp_port += 1;
        } else {
            c.rx_other_ip_protocol += 1;
        }
    }

    /// The mask of paused priorities at `now`, clearing `pause_armed` once
    /// no priority is paused any more.
    #[cold]
    #[inline(never)]
    fn refresh_pause(&mut self, now: Instant) -> u8 {
        self.pause.handle_timeout(now);
        let m = self.pause.paused_mask(now);
        if m == 0 {
            self.pause_armed = false;
        }
        m
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }
    /// Change the responder's ACK coalescing interval (packets; 0 = ACK only
    /// on AckReq) while traffic flows: the per-QP packet counters carry on,
    /// and a QP whose counter already reached the new interval ACKs on its
    /// next packet (CASES R14).
    pub fn set_ack_coalesce(&mut self, packets: u32) {
        self.cfg.ack_coalesce = packets;
    }
    /// The active path MTU of the port (from the netdev MTU).
    pub fn active_mtu(&self) -> Mtu {
        self.active_mtu
    }
    /// GID at `index`.
    pub fn gid(&self, index: usize) -> Option<Gid> {
        self.cfg.gids.get(index).copied()
    }
    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Frames dropped by the wire parser, per reason.
    pub fn drop_counters(&self) -> &DropCounters {
        &self.drops
    }

    /// Allocate a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> u32 {
        self.next_pd += 1;
        self.pds.push(self.next_pd);
        self.next_pd
    }

    /// Free a protection domain (`ibv_dealloc_pd`); `Busy` while MRs or QPs use it.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<(), VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        if self.mrs.pd_has_mrs(pd) || self.qps.values().any(|q| q.pd == pd) {
            return Err(VerbsError::Busy);
        }
        self.pds.retain(|p| *p != pd);
        Ok(())
    }

    /// Register `buf` as an MR at I/O virtual address `iova` (`ibv_reg_mr_iova`).
    /// lkey and rkey are chosen by the device.
    pub fn reg_mr(
        &mut self,
        pd: u32,
        buf: Vec<u8>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        let key = self.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Owned(buf), iova, access, key, key)
    }

    /// Register memory the caller shares with the device (`ibv_reg_mr_iova`
    /// of read-only memory) at I/O virtual address `iova`: the MR keeps a
    /// clone of `mem` until [`Device::dereg_mr`], and transmit paths may pin
    /// more clones while a driver reads the bytes
    /// ([`Device::poll_transmit_gather`]).
    ///
    /// The stack never writes a shared MR, so `access` may not contain
    /// LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC (IBTA 1.7 §10.6.3.1 access
    /// rights; the MR can only be a source: SEND and RDMA WRITE payloads,
    /// RDMA READ responses). [`Mr::as_mut_slice`] of it is empty.
    ///
    /// # Errors
    /// `InvalidAttribute("access")` for a write or atomic right, `NotFound`
    /// for an unknown PD, `InvalidAttribute("iova")` when `iova + len`
    /// overflows.
    pub fn reg_mr_shared(
        &mut self,
        pd: u32,
        mem: Arc<[u8]>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        if access.intersects(
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        ) {
            return Err(VerbsError::InvalidAttribute("access"));
        }
        let key = self.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Shared(mem), iova, access, key, key)
    }

    /// Register `buf` with a chosen rkey (replay and test tools that must match
    /// a capture's R_Keys). `KeyInUse` if the rkey is taken.
    pub fn reg_mr_with_rkey(
        &mut self,
        pd: u32,
        buf: Vec<u8>,
        iova: u64,
        access: AccessFlags,
        rkey: u32,
    ) -> Result<MrKeys, VerbsError> {
        if self.mrs.rkey_in_use(rkey) {
            return Err(VerbsError::KeyInUse);
        }
        let lkey = self.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Owned(buf), iova, access, lkey, rkey)
    }

    fn reg_mr_keys(
        &mut self,
        pd: u32,
        buf: MrMem,
        iova: u64,
        access: AccessFlags,
        lkey: u32,
        rkey: u32,
    ) -> Result<MrKeys, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        // IBTA C10-?: remote write/atomic require local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute("access"));
        }
        if iova.checked_add(buf.bytes().len() as u64).is_none() {
            return Err(VerbsError::InvalidAttribute("iova"));
        }
        self.mrs.insert(Mr {
            pd,
            buf,
            iova,
            lkey,
            rkey,
            access,
        });
        Ok(MrKeys { lkey, rkey })
    }

    /// Deregister an MR and return its memory (`ibv_dereg_mr`). A shared MR
    /// ([`Device::reg_mr_shared`]) returns an empty `Vec`: its memory stays
    /// with the caller's `Arc` (the device drops its clone; frames still
    /// held by a driver keep theirs until freed).
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Vec<u8>, VerbsError> {
        self.mrs
            .remove(lkey)
            .map(|m| match m.buf {
                MrMem::Owned(v) => v,
                MrMem::Shared(_) => Vec::new(),
            })
            .ok_or(VerbsError::NotFound)
    }

    /// The MR with `lkey`.
    pub fn mr(&self, lkey: u32) -> Option<&Mr> {
        self.mrs.get(lkey)
    }
    /// The MR with `lkey`, writable.
    pub fn mr_mut(&mut self, lkey: u32) -> Option<&mut Mr> {
        self.mrs.get_mut(lkey)
    }

    /// Create a CQ holding `cqe` completions (`ibv_create_cq`).
    pub fn create_cq(&mut self, cqe: usize) -> u32 {
        self.next_cq += 1;
        self.cqs.insert(self.next_cq, Cq::new(cqe.max(1)));
        self.next_cq
    }
    /// The CQ.
    pub fn cq(&self, cq: u32) -> Option<&Cq> {
        self.cqs.get(&cq)
    }
    /// Take up to `out.len()` completions (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: u32, out: &mut [Wc]) -> usize {
        self.cqs.get_mut(&cq).map_or(0, |c| c.poll(out))
    }

    /// Create a QP (`ibv_create_qp`) in RESET.
    pub fn create_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32, VerbsError> {
        loop {
            self.next_qpn = (self.next_qpn + 1) & 0x00FF_FFFF;
            if self.next_qpn < 0x11 {
                self.next_qpn = 0x11;
            }
            if !self.qps.contains_key(&self.next_qpn) {
                break;
            }
        }
        self.create_qp_with_qpn(pd, init, self.next_qpn)
    }

    /// Create a QP with a chosen QPN (replaying captures). `KeyInUse` if taken.
    pub fn create_qp_with_qpn(
        &mut self,
        pd: u32,
        init: &QpInitAttr,
        qpn: u32,
    ) -> Result<u32, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        if !self.cqs.contains_key(&init.send_cq) || !self.cqs.contains_key(&init.recv_cq) {
            return Err(VerbsError::NotFound);
        }
        let qpn = qpn & 0x00FF_FFFF;
        if qpn < 2 || qpn == 0x00FF_FFFF || self.qps.contains_key(&qpn) {
            return Err(VerbsError::KeyInUse);
        }
        if init.cap.max_send_sge as usize > super::wr::MAX_SGE
            || init.cap.max_recv_sge as usize > super::wr::MAX_SGE
            || init.cap.max_inline_data as usize > super::wr::MAX_INLINE
            || init.cap.max_send_wr == 0
            || init.cap.max_recv_wr == 0
        {
            return Err(VerbsError::TooLarge);
        }
        self.qps.insert(qpn, Qp::new(qpn, pd, init));
        self.cc_qps.insert(qpn, QpCc::new(&self.cfg.cc));
        Ok(qpn)
    }

    /// Destroy a QP (`ibv_destroy_qp`). Its QPN may be reused; nothing of its
    /// state survives (CASES R22).
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let mut qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound)?;
        self.cancel_timers(&mut qp);
        self.reset_cc(qpn);
        self.cc_qps.remove(&qpn);
        if qp.active {
            self.active.retain(|q| *q != qpn);
        }
        Ok(())
    }

    /// Remove every timer entry of `qp` (RESET, destroy).
    fn cancel_timers(&mut self, qp: &mut Qp) {
        let mut ctx = ctx!(self);
        ctx.set_timer(qp, TimerKind::Ack, None);
        ctx.set_timer(qp, TimerKind::Rnr, None);
    }

    /// Congestion-control state of `qpn` back to idle: reaction point idle,
    /// pacer and CC timers cleared, NP flows and queued CNPs forgotten
    /// (RESET, destroy; CASES R22).
    fn reset_cc(&mut self, qpn: u32) {
        self.np.purge_qp(qpn);
        let Some(cc) = self.cc_qps.get_mut(&qpn) else {
            return;
        };
        set_rp_timer(&mut self.timers, qpn, cc, None);
        set_pacer_timer(&mut self.pacer_timers, qpn, cc, None);
        if cc.paced {
            self.paced -= 1;
        }
        *cc = QpCc::new(&self.cfg.cc);
    }

    /// After a reaction-point call on `qpn`: keep the paced count, the pacer
    /// and the RP timer in step with the RP. A QP whose RP went idle is woken
    /// (it may have been waiting for its pacer).
    fn sync_cc(&mut self, qpn: u32, now: Instant) {
        let Some(cc) = self.cc_qps.get_mut(&qpn) else {
            return;
        };
        let active = cc.rp.is_active();
        let mut wake = false;
        if active != cc.paced {
            cc.paced = active;
            if active {
                self.paced += 1;
                cc.pacer.reset(now);
            } else {
                self.paced -= 1;
                set_pacer_timer(&mut self.pacer_timers, qpn, cc, None);
                wake = true;
            }
        }
        // The rate changed: a QP waiting for its pacer waits for the gap in
        // progress at the new rate (shorter after an increase).
        if cc.paced && cc.pacer_deadline.is_some() {
            let at = cc.pacer.release_time(cc.rp.rate());
            set_pacer_timer(&mut self.pacer_timers, qpn, cc, Some(at));
        }
        let at = cc.rp.poll_timeout();
        set_rp_timer(&mut self.timers, qpn, cc, at);
        if wake {
            self.activate(qpn);
        }
    }

    /// The QP.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn)
    }

    /// The transport state of QP `qpn` now (`ibv_query_qp`'s live PSNs as
    /// rxe reports them, and what `rdma res show qp` prints: `sq-psn`,
    /// `rq-psn`; plus the MSNs and the last acknowledged PSN); `None` if the
    /// QP does not exist. See [`QpInfo`].
    pub fn query_qp(&self, qpn: u32) -> Option<QpInfo> {
        self.qps.get(&qpn).map(Qp::info)
    }

    /// Change QP attributes and state (`ibv_modify_qp`), following the IBTA
    /// state machine (IBTA 1.7 §10.3.1; ROCEV2-DIGEST §5 table of required
    /// attributes; RESET→ERR is illegal). Errors are typed: an illegal move,
    /// a missing required or a disallowed extra attribute, or a value out of
    /// range; the QP is unchanged then. Path MTU is clamped to the port's
    /// active MTU (rxe does the same; CASES R24 a). RESET discards every queue,
    /// timer and PSN (CASES R22). RTS→SQD lets the WQEs already started finish
    /// and raises [`AsyncEvent::SqDrained`] once they have completed.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let active_mtu = self.active_mtu;
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound)?;
        let from = qp.state;
        let to = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            from
        };
        let (req, opt) = transition_masks(qp.qp_type, from, to)
            .ok_or(VerbsError::IllegalTransition { from, to })?;
        let given = mask - QpAttrMask::STATE;
        if !given.contains(req) {
            return Err(VerbsError::MissingAttributes(req - given));
        }
        let extra = given - req - opt;
        if !extra.is_empty() {
            return Err(VerbsError::ExtraAttributes(extra));
        }
        if mask.contains(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(VerbsError::InvalidAttribute("timeout"));
        }
        if mask.contains(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return Err(VerbsError::InvalidAttribute("retry_cnt"));
        }
        if mask.contains(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return Err(VerbsError::InvalidAttribute("rnr_retry"));
        }
        if mask.contains(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(VerbsError::InvalidAttribute("min_rnr_timer"));
        }
        if mask.contains(QpAttrMask::AV)
            && self
                .cfg
                .gids
                .get(attr.ah_attr.sgid_index as usize)
                .is_none()
        {
            return Err(VerbsError::InvalidAttribute("sgid_index"));
        }

        if to == QpState::Reset {
            let Some(mut qp) = self.qps.remove(&qpn) else {
                return Err(VerbsError::NotFound);
            };
            self.cancel_timers(&mut qp);
            qp.reset();
            qp.state = QpState::Reset;
            self.qps.insert(qpn, qp);
            self.reset_cc(qpn);
            return Ok(());
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound)?;
        let a = &mut qp.attr;
        if mask.contains(QpAttrMask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(QpAttrMask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if mask.contains(QpAttrMask::PORT) {
            a.port_num = attr.port_num;
        }
        if mask.contains(QpAttrMask::QKEY) {
            a.qkey = attr.qkey;
        }
        if mask.contains(QpAttrMask::AV) {
            a.ah_attr = attr.ah_attr;
        }
        if mask.intersects(QpAttrMask::AV | QpAttrMask::DEST_QPN) {
            qp.hdr_cache = None;
        }
        if mask.contains(QpAttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu.min(active_mtu);
        }
        if mask.contains(QpAttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            qp.comp.retry_cnt = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            qp.comp.rnr_retry = attr.rnr_retry;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn & 0x00FF_FFFF;
            qp.resp.epsn = Psn::new(attr.rq_psn);
            qp.resp.ack_psn = qp.resp.epsn;
            qp.resp.ack_msn = qp.resp.msn;
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn & 0x00FF_FFFF;
            qp.req.psn = Psn::new(attr.sq_psn);
            qp.comp.psn = Psn::new(attr.sq_psn);
        }
        if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
            qp.resp.set_resources(attr.max_dest_rd_atomic as usize);
        }
        if mask.contains(QpAttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(QpAttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num & 0x00FF_FFFF;
        }
        // UD has no path MTU attribute: its datagrams are limited by the
        // port's active MTU (rxe uses the port MTU the same way).
        qp.pmtu = if qp.qp_type == QpType::Ud {
            active_mtu.bytes() as u32
        } else {
            qp.attr.path_mtu.bytes() as u32
        };
        if mask.intersects(QpAttrMask::AV | QpAttrMask::DEST_QPN) {
            qp.udp_sport = udp_sport(&qp.attr.ah_attr, qp.qpn, qp.attr.dest_qp_num);
        }
        qp.attr.qp_state = to;
        qp.state = to;
        if to == QpState::Sqd && from == QpState::Rts {
            // Drain: WQEs already started (the message in progress included)
            // finish; the event follows their completion.
            qp.drain_until = qp.req.wqe + u64::from(qp.req.offset > 0);
            qp.sqd_event_pending = true;
            let mut ctx = ctx!(self);
            crate::transport::check_drained(qp, &mut ctx);
        }
        let wake = to == QpState::Rts;
        if wake {
            qp.sqd_event_pending = false;
        }
        if to == QpState::Err && from != QpState::Err {
            self.error_qp(qpn);
        }
        if wake {
            self.activate(qpn);
        }
        Ok(())
    }

    /// Move a QP to ERR and flush its queues (IBTA 1.7 §10.3.1: every
    /// outstanding WR completes with `WR_FLUSH_ERR`).
    fn error_qp(&mut self, qpn: u32) {
        let mut ctx = ctx!(self);
        if let Some(qp) = self.qps.get_mut(&qpn) {
            crate::transport::enter_error(qp, &mut ctx);
        }
    }

    /// Post a send work request (`ibv_post_send`). In RESET, INIT or RTR the
    /// call fails; in ERR the WR is accepted and completes at once with
    /// `WR_FLUSH_ERR` (CASES R18: never hangs).
    pub fn post_send(&mut self, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound)?;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(VerbsError::BadState(s)),
        }
        qp.push_send(wr)?;
        if qp.state == QpState::Err {
            self.error_qp(qpn);
        } else if !qp.active {
            qp.active = true;
            self.active.push_back(qpn);
        }
        Ok(())
    }

    /// Post a receive work request (`ibv_post_recv`). Not in RESET; in ERR it
    /// completes at once with `WR_FLUSH_ERR`.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound)?;
        if qp.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        qp.push_recv(wr)?;
        if qp.state == QpState::Err {
            self.error_qp(qpn);
        }
        Ok(())
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    fn activate(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.active {
                qp.active = true;
                self.active.push_back(qpn);
            }
        }
    }

    /// Handle one received Ethernet frame at time `now`.
    ///
    /// Every frame is either taken or dropped with a named counter
    /// ([`Counters`], [`Device::drop_counters`], [`Device::pause_counters`]):
    /// malformed frames (`rx_parse_drops`, per reason in the drop counters),
    /// PFC and PAUSE frames (the pause counters), other traffic
    /// (`rx_other_ethertype`, `rx_other_ip_protocol`, `rx_other_udp_port`),
    /// and RoCE packets, checked in this order: destination MAC
    /// (`rx_dmac_mismatch`), destination GID (`rx_addr_mismatch`), CNP, QP
    /// (`rx_qp_not_found`), P_Key (`rx_pkey_mismatch`), opcode against the
    /// QP's transport (`rx_opcode_qp_mismatch`), QP state
    /// (`rx_qp_bad_state`), VLAN (`rx_vlan_mismatch`), source GID for RC/UC
    /// (`rx_addr_mismatch`); then the transport's own checks.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.counters.rx_frames += 1;
        let pkt = match RocePacket::parse(frame) {
            Ok(p) => p,
            Err(WireError::NotRoce) => {
                self.handle_mac_control(now, frame);
                return;
            }
            Err(e) => {
                self.counters.rx_parse_drops += 1;
                self.drops.record(&e);
                return;
            }
        };
        // The frame must be addressed to our MAC (a parsed frame holds at
        // least the Ethernet header).
        if !self.cfg.promiscuous && frame.get(..6) != Some(&self.cfg.mac[..]) {
            self.counters.rx_dmac_mismatch += 1;
            return;
        }
        // The packet must be addressed to one of our GIDs.
        let net = pkt.net();
        let dst = Gid::from_ip(net.dst());
        if !self.cfg.gids.contains(&dst) {
            self.counters.rx_addr_mismatch += 1;
            return;
        }
        let info = pkt.bth().opcode.info();
        if info.transport == Transport::Cnp {
            self.counters.rx_cnp += 1;
            self.handle_cnp(now, pkt.bth().dest_qp, frame_vid(frame));
            return;
        }
        let qpn = pkt.bth().dest_qp;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.rx_qp_not_found += 1;
            return;
        };
        // P_Key: low 15 bits equal and one of the two a full member (IBTA §10.9.3;
        // our P_Key table holds the default key 0xFFFF).
        if pkt.bth().pkey & 0x7FFF != 0x7FFF {
            self.counters.rx_pkey_mismatch += 1;
            return;
        }
        let type_ok = matches!(
            (qp.qp_type, info.transport),
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
        );
        if !type_ok {
            self.counters.rx_opcode_qp_mismatch += 1;
            return;
        }
        if !matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.counters.rx_qp_bad_state += 1;
            return;
        }
        if frame_vid(frame) != qp_vid(&self.cfg, qp) {
            self.counters.rx_vlan_mismatch += 1;
            return;
        }
        if qp.qp_type != QpType::Ud && Gid::from_ip(net.src()) != qp.attr.ah_attr.dgid {
            self.counters.rx_addr_mismatch += 1;
            return;
        }
        self.counters.rcvd_pkts += 1;
        if net.ecn() == cc::ECN_CE && !matches!(net, NetInfo::Grh(_)) {
            notify_ce(
                &self.cfg,
                &mut self.np,
                &mut self.counters,
                qp,
                &pkt,
                &net,
                now,
            );
        }
        let mut ctx = ctx!(self);
        let wake = match qp.qp_type {
            QpType::Rc if info.is_request => rc::responder::handle_request(qp, &mut ctx, now, &pkt),
            QpType::Rc => rc::completer::handle_response(qp, &mut ctx, now, &pkt),
            QpType::Uc => uc::handle_request(qp, &mut ctx, &pkt),
            QpType::Ud => ud::handle_request(qp, &mut ctx, &pkt),
        };
        crate::transport::check_drained(qp, &mut ctx);
        if wake {
            self.activate(qpn);
        }
    }

    /// A CNP arrived for local QP `qpn` (its BTH DestQP): hand it to the QP's
    /// reaction point. Unknown QPs count `rx_cnp_qp_not_found`; with the RP
    /// disabled, or a QP that does not send (not RTS or SQD), the CNP counts
    /// `rp_cnp_ignored` and changes nothing. The CNP's source address and
    /// BECN bit are not checked (any CNP to the QPN counts, as on ConnectX).
    #[cold]
    #[inline(never)]
    fn handle_cnp(&mut self, now: Instant, qpn: u32, vid: u16) {
        let Some(qp) = self.qps.get(&qpn) else {
            self.counters.rx_cnp_qp_not_found += 1;
            return;
        };
        if vid != qp_vid(&self.cfg, qp) {
            self.counters.rx_vlan_mismatch += 1;
            return;
        }
        let sending = matches!(qp.state, QpState::Rts | QpState::Sqd);
        let Some(cc) = self.cc_qps.get_mut(&qpn) else {
            self.counters.rx_cnp_qp_not_found += 1;
            return;
        };
        if !self.cfg.cc.rp_enabled || !sending {
            self.counters.rp_cnp_ignored += 1;
            return;
        }
        self.counters.rp_cnp_handled += 1;
        cc.rp.on_cnp(now);
        self.sync_cc(qpn, now);
    }

    /// Write the next frame to send into `buf` and return its length, or `None`
    /// when nothing is ready. `buf` must hold a whole frame (PMTU + 90 bytes).
    ///
    /// Queued CNPs go first. A QP whose DCQCN reaction point is active sends
    /// only when its pacer allows (ACK-class responses excepted); otherwise
    /// it is skipped and a timer is armed at its release time. Releases due
    /// by `now` take effect here as well as in [`Device::handle_timeout`].
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let paused = if self.pause_armed {
            self.refresh_pause(now)
        } else {
            0
        };
        if self.np.has_pending() && paused & (1 << cnp_priority(&self.cfg)) == 0 {
            if let Some(n) = self.emit_cnp(buf) {
                return Some(n);
            }
        }
        if !self.pacer_timers.is_empty() {
            self.release_pacers(now);
        }
        let mut budget = self.active.len();
        while budget > 0 {
            budget -= 1;
            let qpn = self.active.pop_front()?;
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if paused != 0 && paused & (1 << qp_priority(&self.cfg, qp)) != 0 {
                // Its priority is paused: it keeps its place on the active
                // list and sends once the pause ends (`poll_timeout`).
                self.active.push_back(qpn);
                continue;
            }
            let paced = if self.paced > 0 {
                self.cc_qps.get_mut(&qpn).filter(|c| c.paced)
            } else {
                None
            };
            let mut ctx = ctx!(self);
            let (sent, was_paced) = match paced {
                None => (crate::transport::produce(qp, &mut ctx, now, buf), false),
                Some(cc) => match produce_paced(qp, cc, &mut self.pacer_timers, &mut ctx, now, buf)
                {
                    Ok(sent) => (sent, true),
                    Err(()) => {
                        // Not released yet: off the active list until the
                        // pacer timer fires.
                        qp.active = false;
                        continue;
                    }
                },
            };
            crate::transport::check_drained(qp, &mut ctx);
            match sent {
                Some(n) => {
                    self.counters.sent_pkts += 1;
                    self.active.push_back(qpn);
                    if was_paced {
                        self.sync_cc(qpn, now);
                    }
                    return Some(n);
                }
                None => {
                    qp.active = false;
                    if was_paced {
                        self.sync_cc(qpn, now);
                    }
                }
            }
        }
        None
    }

    /// As [`Device::poll_transmit`], but a packet whose payload is one
    /// contiguous range of a shared MR ([`Device::reg_mr_shared`]) of at
    /// least [`DeviceConfig::zero_copy_min_bytes`] bytes comes back as
    /// [`TxFrame::Gather`]: only the headers are written into `hdr_buf`, the
    /// payload is named by reference (an `Arc` clone that pins the memory
    /// until the caller drops it, e.g. when the driver frees the frame), and
    /// the pad bytes and ICRC are in the returned tail. Everything else is
    /// [`TxFrame::Whole`], written whole into `hdr_buf` as `poll_transmit`
    /// does, so `hdr_buf` must still hold a whole frame (PMTU + 90 bytes).
    /// `headers | payload | tail` is byte for byte the frame `poll_transmit`
    /// would have produced.
    pub fn poll_transmit_gather(&mut self, now: Instant, hdr_buf: &mut [u8]) -> Option<TxFrame> {
        self.zc.min = self.cfg.zero_copy_min_bytes;
        self.zc.frame = None;
        let n = self.poll_transmit(now, hdr_buf);
        self.zc.min = 0;
        let gather = self.zc.frame.take();
        let n = n?;
        match gather {
            Some(g) => {
                debug_assert_eq!(g.len(), n);
                self.zc.frames += 1;
                Some(g)
            }
            None => Some(TxFrame::Whole(n)),
        }
    }

    /// Frames [`Device::poll_transmit_gather`] returned as
    /// [`TxFrame::Gather`] (payload sent by reference).
    pub fn tx_zero_copy_frames(&self) -> u64 {
        self.zc.frames
    }

    /// Send the next queued CNP into `buf`.
    #[cold]
    #[inline(never)]
    fn emit_cnp(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(c) = self.np.pop() {
            let mut repr = c.repr;
            if let NetRepr::Ipv4(ip) = &mut repr.net {
                self.ip_ident = self.ip_ident.wrapping_add(1);
                ip.ident = self.ip_ident;
            }
            if let Ok(n) = repr.emit(buf, &[]) {
                self.counters.np_cnp_sent += 1;
                self.counters.sent_pkts += 1;
                return Some(n);
            }
        }
        None
    }

    /// The earliest deadline at which [`Device::handle_timeout`] has work, or
    /// `None` when no timer is armed (an idle device has none). Includes the
    /// pacer release of every QP waiting for its pacer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.timers.first().map(|(t, _, _)| *t);
        let t = match self.pacer_timers.first() {
            None => t,
            Some((p, _)) => Some(t.map_or(*p, |t| t.min(*p))),
        };
        if !self.pause_armed {
            return t;
        }
        match self.pause.poll_timeout() {
            None => t,
            Some(p) => Some(t.map_or(p, |t| t.min(p))),
        }
    }

    /// Put every QP whose pacer release is due by `now` back on the active
    /// list.
    #[inline(never)]
    fn release_pacers(&mut self, now: Instant) {
        while let Some(&(t, qpn)) = self.pacer_timers.first() {
            if t > now {
                break;
            }
            self.pacer_timers.pop_first();
            if let Some(cc) = self.cc_qps.get_mut(&qpn) {
                if cc.pacer_deadline == Some(t) {
                    cc.pacer_deadline = None;
                }
            }
            self.activate(qpn);
        }
    }

    /// Run the timers due at `now` (ACK timeouts, RNR waits, DCQCN rate
    /// increases and deferred cuts, pacer releases).
    pub fn handle_timeout(&mut self, now: Instant) {
        if !self.pacer_timers.is_empty() {
            self.release_pacers(now);
        }
        if self.pause_armed {
            self.refresh_pause(now);
        }
        while let Some((t, qpn, kind)) = self.timers.first().copied() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            if kind == TimerKind::Dcqcn {
                self.rp_timer(now, t, qpn);
                continue;
            }
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            // The entry is gone; clear the QP's matching deadline (the handler
            // may arm the timer again).
            let slot = match kind {
                TimerKind::Ack => &mut qp.comp.ack_deadline,
                TimerKind::Rnr => &mut qp.comp.rnr_deadline,
                TimerKind::Dcqcn => continue,
            };
            if *slot != Some(t) {
                continue;
            }
            *slot = None;
            let mut ctx = ctx!(self);
            let wake = rc::completer::on_timer(qp, &mut ctx, kind);
            crate::transport::check_drained(qp, &mut ctx);
            if wake {
                self.activate(qpn);
            }
        }
    }

    /// The reaction-point timer entry `(t, qpn)` was due at `now` (and is
    /// already out of the set).
    fn rp_timer(&mut self, now: Instant, t: Instant, qpn: u32) {
        let Some(cc) = self.cc_qps.get_mut(&qpn) else {
            return;
        };
        if cc.rp_deadline != Some(t) {
            return;
        }
        cc.rp_deadline = None;
        cc.rp.handle_timeout(now);
        self.sync_cc(qpn, now);
    }

    /// QPNs currently on the active list (for tests of idle cost).
    pub fn active_qps(&self) -> usize {
        self.active.len()
    }

    /// The congestion-control configuration (`DeviceConfig::cc`).
    pub fn cc_config(&self) -> &CcConfig {
        &self.cfg.cc
    }

    /// The current DCQCN rate of QP `qpn`, Mbit/s, while its reaction point
    /// limits it; `None` when the QP is unlimited (line rate: no CNP yet, or
    /// recovered) or does not exist.
    pub fn qp_rate_mbps(&self, qpn: u32) -> Option<f64> {
        self.cc_qps.get(&qpn).and_then(|c| c.rp.limit())
    }

    /// The DCQCN reaction point of QP `qpn` (rate, target rate, α, stages),
    /// idle or active; `None` if the QP does not exist. Its α is as of the
    /// RP's last event: use [`ReactionPoint::alpha_at`] for the value now.
    pub fn reaction_point(&self, qpn: u32) -> Option<&ReactionPoint> {
        self.cc_qps.get(&qpn).map(|c| &c.rp)
    }

    /// When the pacer of QP `qpn` next lets a frame leave: `None` unless the
    /// QP is paced and waiting for its pacer.
    pub fn qp_pacer_release(&self, qpn: u32) -> Option<Instant> {
        self.cc_qps.get(&qpn).and_then(|c| c.pacer_deadline)
    }
}
