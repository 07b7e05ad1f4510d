//! The receive path: every frame is either taken or dropped with one named
//! counter.
//!
//! A RoCE packet goes through the steps of rxe's receive path, each a
//! function that either passes the packet on or names the counter it is
//! dropped with ([`RxDrop`]):
//!
//! 1. [`check_port`] (rxe `rxe_rcv`, `rxe_chk_dgid`): the frame is for this
//!    port: our destination MAC, one of our GIDs;
//! 2. CNPs leave here for the reaction point of their QP;
//! 3. [`hdr_check`] (rxe `hdr_check`): the destination QP exists, then
//!    [`check_keys`] (the P_Key), [`check_type_state`] (the opcode's
//!    transport is the QP's, the QP receives), [`check_addr`] (the VLAN and,
//!    for RC/UC, the source GID of the QP's path);
//! 4. the CE mark (the notification point), then the transport: the RC
//!    responder or completer, UC, UD.
//!
//! rxe checks type and state, then addresses, then keys; we check the P_Key
//! first (a packet that fails several checks counts under the first; see
//! `stack/COMPLIANCE.md`).

use super::Device;
use crate::cc::{self, Admit, CnpPath, NotificationPoint};
use crate::counters::Counters;
use crate::pfc::pause::{Disposition, RxPauseCounters};
use crate::resources::config::DeviceConfig;
use crate::resources::keymap::KeyMap;
use crate::resources::types::{QpState, QpType};
use crate::time::Instant;
use crate::transport::av::Gid;
use crate::transport::qp::Qp;
use crate::transport::{rc, uc, ud};
use crate::wire::{
    Error as WireError, L2Info, NetInfo, OpcodeInfo, RocePacket, Transport, ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
};

/// Why a RoCE packet is not delivered: one variant per counter (the
/// [`Counters`] field of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RxDrop {
    /// `rx_dmac_mismatch`.
    DmacMismatch,
    /// `rx_addr_mismatch`.
    AddrMismatch,
    /// `rx_qp_not_found`.
    QpNotFound,
    /// `rx_pkey_mismatch`.
    PkeyMismatch,
    /// `rx_opcode_qp_mismatch`.
    OpcodeQpMismatch,
    /// `rx_qp_bad_state`.
    QpBadState,
    /// `rx_vlan_mismatch`.
    VlanMismatch,
}

impl RxDrop {
    /// Count the drop.
    fn count(self, c: &mut Counters) {
        let n = match self {
            RxDrop::DmacMismatch => &mut c.rx_dmac_mismatch,
            RxDrop::AddrMismatch => &mut c.rx_addr_mismatch,
            RxDrop::QpNotFound => &mut c.rx_qp_not_found,
            RxDrop::PkeyMismatch => &mut c.rx_pkey_mismatch,
            RxDrop::OpcodeQpMismatch => &mut c.rx_opcode_qp_mismatch,
            RxDrop::QpBadState => &mut c.rx_qp_bad_state,
            RxDrop::VlanMismatch => &mut c.rx_vlan_mismatch,
        };
        *n += 1;
    }
}

/// The frame is for this port (rxe `rxe_rcv`): addressed to our MAC (a
/// parsed frame holds at least the Ethernet header; any MAC when
/// promiscuous), and to one of our GIDs (rxe `rxe_chk_dgid`).
#[inline]
fn check_port(cfg: &DeviceConfig, frame: &[u8], net: &NetInfo) -> Result<(), RxDrop> {
    // As a host's IP layer drops frames for another host (RFC 1122 §3.3.6,
    // Linux `PACKET_OTHERHOST`; `DeviceConfig::promiscuous`).
    if !cfg.promiscuous && frame.get(..6) != Some(&cfg.mac[..]) {
        return Err(RxDrop::DmacMismatch);
    }
    if !cfg.gids.contains(&Gid::from_ip(net.dst())) {
        return Err(RxDrop::AddrMismatch);
    }
    Ok(())
}

/// The destination QP and the checks against it (rxe `hdr_check`).
#[inline]
fn hdr_check<'q>(
    cfg: &DeviceConfig,
    qps: &'q mut KeyMap<u32, Qp>,
    frame: &[u8],
    pkt: &RocePacket<'_>,
    net: &NetInfo,
    info: &OpcodeInfo,
) -> Result<&'q mut Qp, RxDrop> {
    let qp = qps.get_mut(&pkt.bth().dest_qp).ok_or(RxDrop::QpNotFound)?;
    check_keys(pkt)?;
    check_type_state(qp, info)?;
    check_addr(cfg, qp, frame, net)?;
    Ok(qp)
}

/// The P_Key (rxe `check_keys`; the Q_Key of UD is the UD transport's check).
#[inline]
fn check_keys(pkt: &RocePacket<'_>) -> Result<(), RxDrop> {
    //= IBTA 1.7 §10.9.3
    //# P_Key match: the low 15 bits are equal and at least one of the two
    //# keys is a full member.
    // Our P_Key table holds the default key 0xFFFF (full member).
    if pkt.bth().pkey & 0x7FFF != 0x7FFF {
        return Err(RxDrop::PkeyMismatch);
    }
    Ok(())
}

/// The opcode's transport is the QP's, and the QP receives (rxe
/// `check_type_state`).
#[inline]
fn check_type_state(qp: &Qp, info: &OpcodeInfo) -> Result<(), RxDrop> {
    let type_ok = matches!(
        (qp.qp_type, info.transport),
        (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
    );
    if !type_ok {
        return Err(RxDrop::OpcodeQpMismatch);
    }
    //= IBTA 1.7 §10.3.1
    //# packets are received in RTR, RTS, SQD and SQE; a QP in RESET, INIT
    //# or ERR takes none.
    if !matches!(
        qp.state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    ) {
        return Err(RxDrop::QpBadState);
    }
    Ok(())
}

/// The frame came the way the QP's path says (rxe `check_addr`): the VLAN
/// of its address vector (the port's for UD) and, for RC/UC, the source
/// GID the address vector names.
#[inline]
fn check_addr(cfg: &DeviceConfig, qp: &Qp, frame: &[u8], net: &NetInfo) -> Result<(), RxDrop> {
    if frame_vid(frame) != qp_vid(cfg, qp) {
        return Err(RxDrop::VlanMismatch);
    }
    if qp.qp_type != QpType::Ud && Gid::from_ip(net.src()) != qp.attr.ah_attr.dgid {
        return Err(RxDrop::AddrMismatch);
    }
    Ok(())
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

impl Device {
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
        self.inner.counters.rx_frames += 1;
        let pkt = match RocePacket::parse(frame) {
            Ok(p) => p,
            Err(WireError::NotRoce) => {
                self.handle_mac_control(now, frame);
                return;
            }
            Err(e) => {
                self.inner.counters.rx_parse_drops += 1;
                self.drops.record(&e);
                return;
            }
        };
        let net = pkt.net();
        if let Err(d) = check_port(&self.inner.cfg, frame, &net) {
            d.count(&mut self.inner.counters);
            return;
        }
        let info = pkt.bth().opcode.info();
        if info.transport == Transport::Cnp {
            self.inner.counters.rx_cnp += 1;
            self.handle_cnp(now, pkt.bth().dest_qp, frame_vid(frame));
            return;
        }
        let qp = match hdr_check(&self.inner.cfg, &mut self.qps, frame, &pkt, &net, info) {
            Ok(qp) => qp,
            Err(d) => {
                d.count(&mut self.inner.counters);
                return;
            }
        };
        let ctx = &mut self.inner;
        ctx.counters.rcvd_pkts += 1;
        if net.ecn() == cc::ECN_CE && !matches!(net, NetInfo::Grh(_)) {
            notify_ce(
                &ctx.cfg,
                &mut self.sched.np,
                &mut ctx.counters,
                qp,
                &pkt,
                &net,
                now,
            );
        }
        let wake = match qp.qp_type {
            QpType::Rc if info.is_request => rc::responder::handle_request(qp, ctx, now, &pkt),
            QpType::Rc => rc::completer::handle_response(qp, ctx, now, &pkt),
            QpType::Uc => uc::handle_request(qp, ctx, &pkt),
            QpType::Ud => ud::handle_request(qp, ctx, &pkt),
        };
        crate::transport::check_drained(qp, ctx);
        if wake {
            self.sched.activate(qp);
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
        let counters = &mut self.inner.counters;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            counters.rx_cnp_qp_not_found += 1;
            return;
        };
        if vid != qp_vid(&self.inner.cfg, qp) {
            counters.rx_vlan_mismatch += 1;
            return;
        }
        let sending = matches!(qp.state, QpState::Rts | QpState::Sqd);
        if !self.inner.cfg.cc.rp_enabled || !sending {
            counters.rp_cnp_ignored += 1;
            return;
        }
        counters.rp_cnp_handled += 1;
        qp.cc.rp.on_cnp(now);
        self.sched.sync_cc(&mut self.inner.timers, qp, now);
    }

    /// Received pause frames and pause time per priority (mlx5 names:
    /// `rx_prioN_pause`, `rx_prioN_pause_duration`, `rx_pause_ctrl_phy`, ...).
    pub fn pause_counters(&self) -> &RxPauseCounters {
        self.sched.pause.counters()
    }

    /// A frame that is not RoCE: PFC and PAUSE frames update the pause state
    /// (and are counted there); anything else is counted by what it is.
    #[cold]
    #[inline(never)]
    fn handle_mac_control(&mut self, now: Instant, frame: &[u8]) {
        let s = &mut self.sched;
        match s.pause.handle_frame(now, frame) {
            Disposition::Applied { .. } => {
                s.pause_armed = s.pause.paused_mask(now) != 0;
            }
            Disposition::Ignored | Disposition::Dropped(_) => {}
            Disposition::NotMacControl => count_other(&mut self.inner.counters, frame),
        }
    }
}

/// Count a frame that is neither RoCE nor MAC control (the parser said
/// `NotRoce`): by EtherType, IP protocol, or UDP port.
fn count_other(c: &mut Counters, frame: &[u8]) {
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
