//! The capture model that `roce replay` ([`crate::replay`]) and the
//! interop tests (`tests/interop_captures.rs`, `tests/replay_cli.rs`)
//! share: a capture's RoCE frames strictly parsed ([`Pkt`], [`Capture`]),
//! the requests grouped into messages ([`Msg`], [`messages`]), the path MTU
//! their segmentation shows ([`Segmentation`]), the memory regions they
//! name and what the captured responses say those hold ([`regions`],
//! [`preload`]), and a QP set up as the capture's host had it
//! ([`QpSetup::bring_up`]).
//!
//! Every value comes from the captured frames: the capture is the oracle a
//! replay is compared with. The frames are read by the project's capture
//! reader (`roce_io::pcap`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use roce_io::pcap::{self, PcapIoError, TimedFrame};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpAttr, QpAttrMask, QpState, QpType, SendFlags, SendWr,
    Sge, VerbsError, WrOpcode,
};
use roce_stack::wire::ext::{AtomicEthRepr, DethRepr, RethRepr};
use roce_stack::wire::opcode::OpKind;
use roce_stack::wire::{
    AethSyndrome, BthRepr, ExtHeaders, NakCode, NetInfo, Opcode, Position, RocePacket, Transport,
    VlanTag,
};

/// One strictly parsed RoCE frame of a capture (or one a replay sent).
#[derive(Debug, Clone)]
pub struct Pkt {
    /// Index of the frame in the capture, 0-based (or in our output).
    pub idx: usize,
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// UDP source port (RoCEv2; `None` for RoCEv1).
    pub sport: Option<u16>,
    /// UDP destination port (RoCEv2; `None` for RoCEv1).
    pub dport: Option<u16>,
    /// The BTH.
    pub bth: BthRepr,
    /// The extension headers.
    pub ext: ExtHeaders,
    /// The payload (without pad and ICRC).
    pub payload: Vec<u8>,
    /// The BTH pad count.
    pub pad: u8,
    /// The IPv4 header bytes (what a UD receive's GRH area holds), empty
    /// over IPv6 and RoCEv1.
    pub ipv4_header: Vec<u8>,
}

impl Pkt {
    /// Strict parse (the ICRC must verify), `None` for anything else.
    pub fn parse(idx: usize, raw: &[u8]) -> Option<Pkt> {
        let p = RocePacket::parse(raw).ok()?;
        let l2 = p.l2();
        let ipv4_header = match (p.net(), p.udp()) {
            (NetInfo::Ipv4(_), Some(_)) => p.icrc_region().get(..20).unwrap_or(&[]).to_vec(),
            _ => Vec::new(),
        };
        Some(Pkt {
            idx,
            src_mac: l2.src,
            dst_mac: l2.dst,
            vlan: l2.vlan,
            src: p.net().src(),
            dst: p.net().dst(),
            sport: p.udp().map(|u| u.src_port),
            dport: p.udp().map(|u| u.dst_port),
            bth: p.bth(),
            ext: p.ext().to_headers(),
            payload: p.payload().to_vec(),
            pad: p.pad(),
            ipv4_header,
        })
    }
    /// The frame number, 1-based (as Wireshark counts).
    pub fn number(&self) -> usize {
        self.idx + 1
    }
    /// Whether the opcode is a request (IBTA 1.7 §9.2.1 Table 36).
    pub fn is_request(&self) -> bool {
        self.bth.opcode.info().is_request
    }
    /// The opcode's operation.
    pub fn kind(&self) -> OpKind {
        self.bth.opcode.info().kind
    }
    /// The opcode's place in its message.
    pub fn position(&self) -> Position {
        self.bth.opcode.info().position
    }
    /// The opcode's transport.
    pub fn transport(&self) -> Transport {
        self.bth.opcode.info().transport
    }
    /// The QP type of the opcode's transport (`None`: CNP, reserved...).
    pub fn qp_type(&self) -> Option<QpType> {
        qp_type_of(self.transport())
    }
    /// The opcode's name (`RC_SEND_ONLY`...).
    pub fn name(&self) -> &'static str {
        self.bth.opcode.name()
    }
}

/// The QP type of a transport (`None` for those no verbs QP plays).
pub fn qp_type_of(t: Transport) -> Option<QpType> {
    match t {
        Transport::Rc => Some(QpType::Rc),
        Transport::Uc => Some(QpType::Uc),
        Transport::Ud => Some(QpType::Ud),
        _ => None,
    }
}

/// Position of `psn` after `base` in the 24-bit PSN space (IBTA 1.7
/// §9.7.1).
pub fn rel(psn: u32, base: u32) -> u32 {
    psn.wrapping_sub(base) & 0x00FF_FFFF
}

/// An AETH syndrome's class (IBTA 1.7 §9.7.5.2, Table 44): what a replay
/// compares, leaving out the ACK credit count and the RNR timer (rxe sends
/// credits "invalid", ConnectX real counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethClass {
    /// An ACK, any credit count.
    Ack,
    /// An RNR NAK, any timer.
    RnrNak,
    /// A NAK with its code.
    Nak(NakCode),
    /// A reserved syndrome.
    Reserved(u8),
}

impl AethClass {
    /// The class of syndrome byte `s`.
    pub fn of(s: u8) -> AethClass {
        match AethSyndrome::from_byte(s) {
            AethSyndrome::Ack { .. } => AethClass::Ack,
            AethSyndrome::RnrNak { .. } => AethClass::RnrNak,
            AethSyndrome::Nak(c) => AethClass::Nak(c),
            AethSyndrome::Reserved(b) => AethClass::Reserved(b),
        }
    }
}

impl fmt::Display for AethClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AethClass::Ack => f.write_str("ACK"),
            AethClass::RnrNak => f.write_str("RNR NAK"),
            AethClass::Nak(c) => write!(f, "NAK {c:?}"),
            AethClass::Reserved(b) => write!(f, "reserved {b:#x}"),
        }
    }
}

/// A capture: every frame with its capture time, and its RoCE frames
/// strictly parsed.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Every frame, in file order.
    pub frames: Vec<TimedFrame>,
    /// The frames that parse strictly (ICRC verified), in file order.
    pub pkts: Vec<Pkt>,
    /// RoCE-looking frames that do not parse strictly (not in `pkts`).
    pub bad: usize,
}

impl Capture {
    /// Read the capture at `path` ([`pcap::read_timed`]: pcap or pcapng,
    /// bounded).
    ///
    /// # Errors
    /// The file cannot be read, or is damaged or not Ethernet.
    pub fn load(path: &Path) -> Result<Capture, PcapIoError> {
        Ok(Capture::from_frames(pcap::read_timed(path)?))
    }

    /// Parse `frames`.
    pub fn from_frames(frames: Vec<TimedFrame>) -> Capture {
        let mut pkts = Vec::new();
        let mut bad = 0;
        for (i, f) in frames.iter().enumerate() {
            match Pkt::parse(i, &f.data) {
                Some(p) => pkts.push(p),
                None => {
                    if matches!(
                        roce_stack::wire::classify(&f.data),
                        roce_stack::wire::Frame::Roce(_) | roce_stack::wire::Frame::BadRoce(..)
                    ) {
                        bad += 1;
                    }
                }
            }
        }
        Capture { frames, pkts, bad }
    }

    /// The capture time of frame `idx` on a clock that starts at the first
    /// frame (what a replay passes as `now`); zero past the end.
    pub fn at(&self, idx: usize) -> Instant {
        let t0 = self.frames.first().map_or(Default::default(), |f| f.time);
        self.frames.get(idx).map_or(Instant::ZERO, |f| {
            Instant::from_nanos(
                u64::try_from(f.time.saturating_sub(t0).as_nanos()).unwrap_or(u64::MAX),
            )
        })
    }
}

/// One message of requests (a SEND/WRITE of FIRST..LAST or ONLY packets,
/// one READ request, one atomic).
#[derive(Debug, Clone)]
pub struct Msg {
    /// The operation.
    pub kind: OpKind,
    /// Opcode of the last packet (tells SEND from SEND_WITH_IMM etc.).
    pub last_opcode: Opcode,
    /// PSN of the first packet.
    pub first_psn: u32,
    /// Capture index of the first packet ([`Pkt::idx`]).
    pub first_idx: usize,
    /// Positions in the sequence given to [`messages`] of the packets that
    /// make it.
    pub pkts: Vec<usize>,
    /// SEND/WRITE payload, concatenated.
    pub data: Vec<u8>,
    /// The RETH of the first packet.
    pub reth: Option<RethRepr>,
    /// The AtomicETH.
    pub atomic: Option<AtomicEthRepr>,
    /// The immediate data, if a packet carried it.
    pub imm: Option<u32>,
    /// The invalidated R_Key, if a packet carried it.
    pub inv: Option<u32>,
    /// The DETH (UD).
    pub deth: Option<DethRepr>,
    /// Whether a packet had SE set.
    pub solicited: bool,
}

impl Msg {
    /// Length in bytes (READ: the RETH DMA length; atomic: 8).
    pub fn len(&self) -> u32 {
        match self.kind {
            OpKind::ReadRequest => self.reth.map_or(0, |r| r.dma_len),
            OpKind::Atomic => 8,
            _ => self.data.len() as u32,
        }
    }
    /// Whether it carries no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// PSNs the message occupies (READ: one per response packet, IBTA 1.7
    /// §9.7.3.1).
    pub fn npsn(&self, pmtu: u32) -> u32 {
        match self.kind {
            OpKind::ReadRequest => self.len().div_ceil(pmtu).max(1),
            OpKind::Atomic => 1,
            _ => self.pkts.len() as u32,
        }
    }
    /// The work request opcode that sends it.
    pub fn wr_opcode(&self) -> Option<WrOpcode> {
        Some(match self.kind {
            OpKind::Send if self.imm.is_some() => WrOpcode::SendWithImm,
            OpKind::Send if self.inv.is_some() => WrOpcode::SendWithInv,
            OpKind::Send => WrOpcode::Send,
            OpKind::Write if self.imm.is_some() => WrOpcode::RdmaWriteWithImm,
            OpKind::Write => WrOpcode::RdmaWrite,
            OpKind::ReadRequest => WrOpcode::RdmaRead,
            OpKind::Atomic if self.last_opcode.0 & 0x1F == Opcode::RC_COMPARE_SWAP.0 => {
                WrOpcode::AtomicCmpAndSwp
            }
            OpKind::Atomic => WrOpcode::AtomicFetchAndAdd,
            _ => return None,
        })
    }
    /// Whether it consumes a receive WQE at the responder.
    pub fn needs_recv(&self) -> bool {
        self.kind == OpKind::Send || (self.kind == OpKind::Write && self.imm.is_some())
    }
    /// The work request that sends it again, `wr_id`, its bytes at `sge`
    /// (not used for an empty message); the caller adds the UD
    /// destination. `None` for a message no work request sends.
    pub fn work_request<'a>(&self, wr_id: u64, sge: &'a [Sge]) -> Option<SendWr<'a>> {
        let op = self.wr_opcode()?;
        let list: &[Sge] = if self.is_empty() { &[] } else { sge };
        let mut wr = SendWr::new(wr_id, op, list);
        if self.solicited {
            wr.send_flags |= SendFlags::SOLICITED;
        }
        wr.imm_data = self.imm.unwrap_or(0);
        wr.invalidate_rkey = self.inv.unwrap_or(0);
        if let Some(r) = self.reth {
            wr.remote_addr = r.va;
            wr.rkey = r.rkey;
        }
        if let Some(a) = self.atomic {
            wr.remote_addr = a.va;
            wr.rkey = a.rkey;
            if op == WrOpcode::AtomicCmpAndSwp {
                wr.compare_add = a.compare;
                wr.swap = a.swap_add;
            } else {
                wr.compare_add = a.swap_add;
            }
        }
        Some(wr)
    }
}

/// Group request packets into messages: a FIRST or ONLY packet, or one of
/// another operation than the message before, starts one; only the first
/// copy of each PSN counts (a retransmission adds nothing).
pub fn messages<'a>(reqs: impl IntoIterator<Item = &'a Pkt>) -> Vec<Msg> {
    let mut out: Vec<Msg> = Vec::new();
    let mut seen = BTreeSet::new();
    for (k, p) in reqs.into_iter().enumerate() {
        if !seen.insert(p.bth.psn) {
            continue;
        }
        let starts = matches!(p.position(), Position::First | Position::Only);
        if starts || out.last().map_or(true, |m| m.kind != p.kind()) {
            out.push(Msg {
                kind: p.kind(),
                last_opcode: p.bth.opcode,
                first_psn: p.bth.psn,
                first_idx: p.idx,
                pkts: Vec::new(),
                data: Vec::new(),
                reth: p.ext.reth,
                atomic: p.ext.atomic_eth,
                imm: None,
                inv: None,
                deth: p.ext.deth,
                solicited: false,
            });
        }
        if let Some(m) = out.last_mut() {
            m.pkts.push(k);
            m.data.extend_from_slice(&p.payload);
            m.last_opcode = p.bth.opcode;
            m.imm = m.imm.or(p.ext.immdt);
            m.inv = m.inv.or(p.ext.ieth);
            m.solicited |= p.bth.solicited;
        }
    }
    out
}

/// The captured responses of a READ or atomic message: the non-ACK
/// responses within its PSNs, the first copy of each PSN.
pub fn responses_of<'a>(
    m: &Msg,
    responses: impl IntoIterator<Item = &'a Pkt>,
    pmtu: u32,
) -> Vec<&'a Pkt> {
    let n = m.npsn(pmtu);
    let mut seen = BTreeSet::new();
    responses
        .into_iter()
        .filter(|p| p.kind() != OpKind::Ack && rel(p.bth.psn, m.first_psn) < n)
        .filter(|p| seen.insert(p.bth.psn))
        .collect()
}

/// The payload sizes of segmented packets (FIRST and MIDDLE, which carry
/// exactly one PMTU, IBTA 1.7 §9.7.3.1) and the largest payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segmentation {
    /// Payload size of FIRST/MIDDLE packets → packets.
    pub sizes: BTreeMap<usize, usize>,
    /// The largest payload of any packet.
    pub max_payload: usize,
}

impl Segmentation {
    /// The segmentation of `pkts`.
    pub fn of<'a>(pkts: impl IntoIterator<Item = &'a Pkt>) -> Segmentation {
        let mut s = Segmentation::default();
        for p in pkts {
            s.max_payload = s.max_payload.max(p.payload.len());
            if matches!(p.position(), Position::First | Position::Middle) {
                *s.sizes.entry(p.payload.len()).or_insert(0) += 1;
            }
        }
        s
    }

    /// The path MTU, bytes, and how it was found: the most common segment
    /// size if it is an IB MTU; otherwise (nothing segmented: the capture
    /// only bounds it from below) the smallest of 1024 (the active MTU of a
    /// 1500-byte Ethernet, rxe: netdev MTU − 80 rounded down), 2048 and
    /// 4096 that holds the largest payload.
    pub fn pmtu(&self) -> (u32, String) {
        if let Some((&n, _)) = self.sizes.iter().max_by_key(|(_, c)| **c) {
            if Mtu::from_bytes(n).is_some() {
                return (n as u32, "the payload of FIRST/MIDDLE packets".into());
            }
        }
        let m = [1024usize, 2048, 4096]
            .into_iter()
            .find(|m| *m >= self.max_payload)
            .unwrap_or(4096);
        (
            m as u32,
            format!(
                "no segmented message; the smallest of 1024/2048/4096 that holds {} bytes",
                self.max_payload
            ),
        )
    }
}

/// A remote-access memory region a replay registers under a captured
/// R_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// R_Key (as captured).
    pub rkey: u32,
    /// I/O virtual address of its first byte.
    pub va: u64,
    /// Length, bytes (at least 8, an atomic cell).
    pub len: u64,
}

/// One region per R_Key of the RETHs and AtomicETHs of `msgs` and of
/// `extra` (R_Key, VA, length), covering every range they name. A
/// zero-length RETH names no memory (IBTA 1.7 §9.7.4.1.5: its R_Key and
/// VA are not checked).
pub fn regions(msgs: &[Msg], extra: &[(u32, u64, u64)]) -> Vec<Region> {
    let mut spans: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let named = msgs.iter().filter_map(|m| match (m.reth, m.atomic) {
        (Some(r), _) if r.dma_len == 0 => None,
        (Some(r), _) => Some((r.rkey, r.va, u64::from(r.dma_len))),
        (_, Some(a)) => Some((a.rkey, a.va, 8)),
        _ => None,
    });
    for (rkey, va, len) in named.chain(extra.iter().copied()) {
        let e = spans.entry(rkey).or_insert((va, va.saturating_add(len)));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va.saturating_add(len));
    }
    spans
        .into_iter()
        .map(|(rkey, (lo, hi))| Region {
            rkey,
            va: lo,
            len: (hi - lo).max(8),
        })
        .collect()
}

/// What the regions hold before the replay, as far as the capture shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// Per region, its bytes.
    pub images: Vec<Vec<u8>>,
    /// Per region, the bytes the capture gave.
    pub preloaded: Vec<u64>,
}

/// The regions' contents before the replay: READ ranges hold the captured
/// READ response bytes, atomic cells the first captured original value (in
/// host byte order, as the responder keeps them: ROCEV2-DIGEST §5, rxe and
/// mlx5 alike), the rest zero. `responses`: the captured responses to
/// `msgs`.
pub fn preload(regions: &[Region], msgs: &[Msg], responses: &[&Pkt], pmtu: u32) -> Memory {
    let mut mem = Memory {
        images: regions.iter().map(|r| vec![0u8; r.len as usize]).collect(),
        preloaded: vec![0; regions.len()],
    };
    let mut done: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); regions.len()];
    for m in msgs {
        let resp = responses_of(m, responses.iter().copied(), pmtu);
        let (rkey, va, bytes): (u32, u64, Vec<u8>) = match m.kind {
            OpKind::ReadRequest => {
                let Some(r) = m.reth else { continue };
                let data = resp
                    .iter()
                    .filter(|p| p.kind() == OpKind::ReadResponse)
                    .flat_map(|p| p.payload.iter().copied())
                    .collect();
                (r.rkey, r.va, data)
            }
            OpKind::Atomic => {
                let Some(a) = m.atomic else { continue };
                let Some(orig) = resp
                    .iter()
                    .find(|p| p.kind() == OpKind::AtomicAck)
                    .and_then(|p| p.ext.atomic_ack_eth)
                else {
                    continue;
                };
                (a.rkey, a.va, orig.orig.to_ne_bytes().to_vec())
            }
            _ => continue,
        };
        let Some(k) = regions.iter().position(|r| r.rkey == rkey) else {
            continue;
        };
        for (i, b) in bytes.iter().enumerate() {
            let a = va + i as u64;
            let Some(o) = a.checked_sub(regions[k].va) else {
                continue;
            };
            if let Some(slot) = mem.images[k].get_mut(o as usize) {
                if done[k].insert(a) {
                    *slot = *b;
                    mem.preloaded[k] += 1;
                }
            }
        }
    }
    mem
}

/// The local memory a requester replay sends from and receives into: each
/// message's bytes (SEND/WRITE source; READ sink and atomic result left
/// zero) at its own 64-byte aligned offset. Returns the bytes and the
/// offsets.
pub fn local_memory(msgs: &[Msg]) -> (Vec<u8>, Vec<u64>) {
    let mut offs = Vec::new();
    let mut total = 0u64;
    for m in msgs {
        offs.push(total);
        total += u64::from(m.len()).next_multiple_of(64).max(64);
    }
    let mut mem = vec![0u8; total as usize];
    for (m, o) in msgs.iter().zip(&offs) {
        if matches!(m.kind, OpKind::Send | OpKind::Write) {
            mem[*o as usize..][..m.data.len()].copy_from_slice(&m.data);
        }
    }
    (mem, offs)
}

/// Every remote access a replayed responder allows.
pub fn all_remote() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// A device at `ip`/`mac` on an Ethernet whose active IB MTU is `pmtu`
/// (the largest IB MTU with MTU + 80 <= netdev MTU, rxe's rule).
pub fn device(ip: IpAddr, mac: [u8; 6], pmtu: u32) -> Device {
    Device::new(DeviceConfig {
        mac,
        gids: vec![Gid::from_ip(ip)],
        netdev_mtu: pmtu as usize + 80,
        ..DeviceConfig::default()
    })
}

/// How a replay connects its QP, as the capture's host had it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpSetup {
    /// Transport.
    pub qp_type: QpType,
    /// The QP (created beforehand under its captured QPN).
    pub qpn: u32,
    /// The peer's address (RC/UC).
    pub av: AddressVector,
    /// The peer's QPN.
    pub peer_qpn: u32,
    /// Expected PSN of the first request.
    pub rq_psn: u32,
    /// First PSN the QP sends.
    pub sq_psn: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// UD Q_Key.
    pub qkey: u32,
}

impl QpSetup {
    /// Bring the QP from RESET to RTS (IBTA 1.7 §10.3.1) with every remote
    /// access allowed and perftest's defaults: 16 outstanding READ/atomics
    /// each way, RNR timer 12, local ACK timeout 14 (67 ms), 7 retries,
    /// 7 RNR retries.
    ///
    /// # Errors
    /// The step that failed (`"modify_qp INIT"`...) and the verbs error.
    pub fn bring_up(&self, dev: &mut Device) -> Result<(), (&'static str, VerbsError)> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: all_remote(),
            qkey: self.qkey,
            ..QpAttr::default()
        };
        let base = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
        let init_mask = if self.qp_type == QpType::Ud {
            base | QpAttrMask::QKEY
        } else {
            base | QpAttrMask::ACCESS_FLAGS
        };
        dev.modify_qp(self.qpn, &a, init_mask)
            .map_err(|e| ("modify_qp INIT", e))?;
        a.qp_state = QpState::Rtr;
        a.ah_attr = self.av;
        a.path_mtu = self.mtu;
        a.dest_qp_num = self.peer_qpn;
        a.rq_psn = self.rq_psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        let conn = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        let rtr_mask = match self.qp_type {
            QpType::Rc => conn | QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER,
            QpType::Uc => conn,
            QpType::Ud => QpAttrMask::STATE,
        };
        dev.modify_qp(self.qpn, &a, rtr_mask)
            .map_err(|e| ("modify_qp RTR", e))?;
        a.qp_state = QpState::Rts;
        a.sq_psn = self.sq_psn;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        let rts_mask = match self.qp_type {
            QpType::Rc => {
                QpAttrMask::STATE
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::MAX_QP_RD_ATOMIC
            }
            _ => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        };
        dev.modify_qp(self.qpn, &a, rts_mask)
            .map_err(|e| ("modify_qp RTS", e))
    }
}
