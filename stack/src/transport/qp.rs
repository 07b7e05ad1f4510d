//! Queue pairs: attributes, the IBTA state machine (IBTA 1.7 §10.3, Figure 124;
//! the kernel's `qp_state_table`), send and receive queues. The transport
//! engines that drive a QP live in `crate::transport`.

use super::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType, WcStatus};
use super::wr::{RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode, MAX_SGE};
use crate::time::Instant;
use crate::transport::av::AddressVector;
use crate::transport::psn::Psn;
use crate::transport::rc::responder::RespState;

/// A snapshot of a QP's transport state (`ibv_query_qp` plus what `rdma res
/// show qp` prints for rxe), from [`Qp::info`] or
/// [`crate::verbs::Device::query_qp`]. PSNs and MSNs are 24-bit values.
///
/// As rxe's `rxe_qp_to_attr`, the PSNs are the live ones, not the
/// attributes last given to `modify_qp`: `sq_psn` is the next PSN the
/// requester sends (rxe `qp->req.psn`, `rdma res show qp` `sq-psn`),
/// `rq_psn` the responder's expected PSN (rxe `qp->resp.psn`, `rq-psn`).
/// Its [`Display`](core::fmt::Display) prints them in `rdma res show qp`
/// style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInfo {
    /// Local QPN (`lqpn`).
    pub qpn: u32,
    /// Remote QPN (`rqpn`; 0 for UD).
    pub dest_qp_num: u32,
    /// Transport service.
    pub qp_type: QpType,
    /// State.
    pub state: QpState,
    /// Path MTU in effect, bytes.
    pub pmtu: u32,
    /// Requester: next PSN to send (`sq-psn`).
    pub sq_psn: u32,
    /// Responder: expected PSN, ePSN (`rq-psn`).
    pub rq_psn: u32,
    /// Responder: messages completed, the MSN its AETHs carry (starts at 0;
    /// ROCEV2-DIGEST §5 "MSN").
    pub msn: u32,
    /// Requester: the last PSN acknowledged (the oldest unacknowledged PSN
    /// minus one; `sq_psn - 1` when nothing is outstanding).
    pub last_acked_psn: u32,
    /// Requester: PSNs sent and not yet acknowledged.
    pub unacked_psns: u32,
    /// Requester: the MSN of the last response that carried an AETH (0
    /// before any).
    pub peer_msn: u32,
    /// Requester: messages started (the SSN of the last one).
    pub ssn: u32,
    /// Send WQEs posted and not completed.
    pub sq_outstanding: u64,
    /// Receive WQEs posted and not consumed.
    pub rq_outstanding: u64,
    /// Retries left after ACK timeouts and sequence NAKs.
    pub retry_cnt_left: u8,
    /// RNR retries left (7: infinite).
    pub rnr_retry_left: u8,
}

impl core::fmt::Display for QpInfo {
    /// `lqpn 17 rqpn 18 type RC state RTS rq-psn 256 sq-psn 512 msn 0
    /// last-acked-psn 511 path-mtu 1024`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let t = match self.qp_type {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        };
        let st = match self.state {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        };
        write!(
            f,
            "lqpn {} rqpn {} type {t} state {st} rq-psn {} sq-psn {} msn {} \
             last-acked-psn {} path-mtu {}",
            self.qpn,
            self.dest_qp_num,
            self.rq_psn,
            self.sq_psn,
            self.msn,
            self.last_acked_psn,
            self.pmtu
        )
    }
}

/// Queue capacities requested at creation (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR (at most [`MAX_SGE`]).
    pub max_send_sge: u32,
    /// SGEs per receive WR (at most [`MAX_SGE`]).
    pub max_recv_sge: u32,
    /// Inline bytes per send WR (at most [`super::wr::MAX_INLINE`]).
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// `struct ibv_qp_init_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInitAttr {
    /// Transport service.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: u32,
    /// CQ for receive completions.
    pub recv_cq: u32,
    /// Capacities.
    pub cap: QpCap,
    /// Every send WR is signaled.
    pub sq_sig_all: bool,
}

/// `struct ibv_qp_attr`: the attributes `modify_qp` sets according to its mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// Target state (`STATE`).
    pub qp_state: QpState,
    /// Remote access rights (`ACCESS_FLAGS`).
    pub qp_access_flags: AccessFlags,
    /// P_Key index (`PKEY_INDEX`).
    pub pkey_index: u16,
    /// Port (`PORT`).
    pub port_num: u8,
    /// Q_Key (`QKEY`, UD).
    pub qkey: u32,
    /// Primary path (`AV`).
    pub ah_attr: AddressVector,
    /// Path MTU (`PATH_MTU`); clamped to the device's active MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout code (`TIMEOUT`): 4.096 µs × 2^timeout, 0 = no timer.
    pub timeout: u8,
    /// Retries on timeout or sequence NAK (`RETRY_CNT`), 0..=7.
    pub retry_cnt: u8,
    /// Retries on RNR NAK (`RNR_RETRY`), 0..=7; 7 = infinite.
    pub rnr_retry: u8,
    /// Expected PSN of the first inbound request (`RQ_PSN`).
    pub rq_psn: u32,
    /// PSN of the first outbound request (`SQ_PSN`).
    pub sq_psn: u32,
    /// Outstanding READ/ATOMIC as initiator (`MAX_QP_RD_ATOMIC`).
    pub max_rd_atomic: u8,
    /// Responder resources (`MAX_DEST_RD_ATOMIC`).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this QP sends (`MIN_RNR_TIMER`).
    pub min_rnr_timer: u8,
    /// Remote QPN (`DEST_QPN`).
    pub dest_qp_num: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            qp_access_flags: AccessFlags::empty(),
            pkey_index: 0,
            port_num: 1,
            qkey: 0,
            ah_attr: AddressVector::default(),
            path_mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            dest_qp_num: 0,
        }
    }
}

/// Why a verbs call failed (the errno an ibverbs provider would return).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerbsError {
    /// No such object (`ENOENT`/`EINVAL`).
    NotFound,
    /// The transition is not in the state table (`EINVAL`).
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute is missing from the mask (`EINVAL`).
    MissingAttributes(QpAttrMask),
    /// An attribute not allowed in this transition is in the mask (`EINVAL`).
    ExtraAttributes(QpAttrMask),
    /// An attribute value is out of range (`EINVAL`).
    InvalidAttribute(&'static str),
    /// A queue is full (`ENOMEM`).
    QueueFull,
    /// The QP is in a state that does not accept this call (`EINVAL`).
    BadState(QpState),
    /// Too many SGEs or too much inline data (`EINVAL`).
    TooLarge,
    /// The operation is not valid on this QP type (`EINVAL`).
    BadOpcode,
    /// An object is still in use (`EBUSY`).
    Busy,
    /// The rkey asked for is already registered (`EEXIST`).
    KeyInUse,
}

impl core::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for VerbsError {}

/// Legal state moves (kernel `qp_state_table`): returns (required, optional)
/// attribute masks for `qp_type`, or `None` if the move is illegal.
pub fn transition_masks(
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    let conn = qp_type != QpType::Ud;
    let rc = qp_type == QpType::Rc;
    let qkey_ud = if conn { none } else { M::QKEY };
    match (from, to) {
        // Every state may go to RESET; every state but RESET may go to ERR.
        (_, Reset) => Some((none, none)),
        (Reset, Err) => None,
        (_, Err) => Some((none, none)),
        (Reset, Init) => Some((
            M::PKEY_INDEX | M::PORT | if conn { M::ACCESS_FLAGS } else { M::QKEY },
            none,
        )),
        (Init, Init) => Some((
            none,
            M::PKEY_INDEX | M::PORT | if conn { M::ACCESS_FLAGS } else { M::QKEY },
        )),
        (Init, Rtr) => {
            let req = if rc {
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER
            } else if conn {
                M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
            } else {
                none
            };
            let opt = if conn {
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX
            } else {
                M::PKEY_INDEX | M::QKEY
            };
            Some((req, opt))
        }
        (Rtr, Rts) => {
            let req = if rc {
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
            } else {
                M::SQ_PSN
            };
            let opt = M::CUR_STATE
                | M::RATE_LIMIT
                | if conn {
                    M::ALT_PATH
                        | M::ACCESS_FLAGS
                        | M::PATH_MIG_STATE
                        | if rc { M::MIN_RNR_TIMER } else { none }
                } else {
                    M::QKEY
                };
            Some((req, opt))
        }
        (Rts, Rts) | (Sqd, Rts) => Some((
            none,
            M::CUR_STATE
                | M::RATE_LIMIT
                | qkey_ud
                | if conn {
                    M::ACCESS_FLAGS
                        | M::ALT_PATH
                        | M::PATH_MIG_STATE
                        | if rc { M::MIN_RNR_TIMER } else { none }
                } else {
                    none
                },
        )),
        (Rts, Sqd) => Some((none, M::EN_SQD_ASYNC_NOTIFY)),
        (Sqd, Sqd) => Some((
            none,
            M::PKEY_INDEX
                | qkey_ud
                | if conn {
                    M::AV | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE
                } else {
                    none
                }
                | if rc {
                    M::PORT
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::MAX_QP_RD_ATOMIC
                        | M::MAX_DEST_RD_ATOMIC
                        | M::MIN_RNR_TIMER
                } else {
                    none
                },
        )),
        (Sqe, Rts) => Some((
            none,
            M::CUR_STATE | if conn { M::ACCESS_FLAGS } else { M::QKEY },
        )),
        _ => None,
    }
}

/// A send queue entry: the work request plus the requester's bookkeeping.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub(crate) struct SendWqe {
    // The fields every packet of a SEND/WRITE reads come first, in one
    // 64-byte line (`repr(C, align(64))` keeps them there): the requester
    // reads a slot some hundreds of WQEs after `post_send` wrote it, mostly
    // from L2, and with the compiler's field order its reads touched four
    // of the slot's seven lines.
    pub wr_id: u64,
    pub remote_addr: u64,
    pub num_sge: usize,
    pub total_len: u32,
    pub rkey: u32,
    pub imm: u32,
    pub inv_rkey: u32,
    /// PSN of the first packet, once the WQE has been sent.
    pub first_psn: Psn,
    /// PSNs the WQE occupies (READ: response packets).
    pub npkts: u32,
    pub flags: SendFlags,
    pub opcode: WrOpcode,
    /// Whether `first_psn`/`npkts` are assigned.
    pub started: bool,
    /// Whether the whole WQE has been handed to the wire at least once.
    pub sent: bool,
    /// A local error found while building its packets (e.g. `LOC_PROT_ERR`
    /// for a bad lkey): the WQE is not sent further and completes with this
    /// status once everything before it is acknowledged.
    pub local_err: Option<WcStatus>,
    pub compare_add: u64,
    pub sges: [Sge; MAX_SGE],
    pub swap: u64,
    pub inline: Vec<u8>,
    pub ud: Option<UdDest>,
}

impl Default for SendWqe {
    fn default() -> Self {
        SendWqe {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::empty(),
            sges: [Sge::default(); MAX_SGE],
            num_sge: 0,
            inline: Vec::new(),
            total_len: 0,
            imm: 0,
            inv_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            first_psn: Psn::default(),
            npkts: 0,
            started: false,
            sent: false,
            local_err: None,
        }
    }
}

impl SendWqe {
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge]
    }
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    pub fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }
}

/// A receive queue entry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: [Sge; MAX_SGE],
    pub num_sge: usize,
    pub total_len: u64,
}

impl RecvWqe {
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge]
    }
}

/// A fixed-capacity ring addressed by absolute 64-bit indices: slots are
/// allocated once at QP creation, so posting allocates nothing. The slot
/// array is a power of two long (index by mask, not division); at most
/// `cap` entries are in use.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    slots: Vec<T>,
    mask: u64,
    cap: u64,
    head: u64,
    tail: u64,
}

impl<T: Default + Clone> Ring<T> {
    pub fn new(cap: usize) -> Ring<T> {
        let cap = cap.max(1);
        let n = cap.next_power_of_two();
        Ring {
            slots: vec![T::default(); n],
            mask: n as u64 - 1,
            cap: cap as u64,
            head: 0,
            tail: 0,
        }
    }
    pub fn cap(&self) -> u64 {
        self.cap
    }
    pub fn len(&self) -> u64 {
        self.tail - self.head
    }
    pub fn is_full(&self) -> bool {
        self.len() >= self.cap()
    }
    pub fn head(&self) -> u64 {
        self.head
    }
    /// The slot at absolute index `i`, if it is in `[head, tail)`.
    pub fn get(&self, i: u64) -> Option<&T> {
        if i >= self.head && i < self.tail {
            self.slots.get((i & self.mask) as usize)
        } else {
            None
        }
    }
    pub fn get_mut(&mut self, i: u64) -> Option<&mut T> {
        if i >= self.head && i < self.tail {
            self.slots.get_mut((i & self.mask) as usize)
        } else {
            None
        }
    }
    /// The slot the next push fills (to be filled in place, then committed).
    pub fn next_slot(&mut self) -> Option<&mut T> {
        if self.is_full() {
            return None;
        }
        self.slots.get_mut((self.tail & self.mask) as usize)
    }
    pub fn commit_push(&mut self) {
        self.tail += 1;
    }
    pub fn pop(&mut self) {
        if self.head < self.tail {
            self.head += 1;
        }
    }
    pub fn clear(&mut self) {
        self.head = self.tail;
    }
}

/// Requester progress (rxe `qp->req`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReqState {
    /// Next PSN to send.
    pub psn: Psn,
    /// Absolute index of the WQE being sent.
    pub wqe: u64,
    /// Bytes of that WQE already sent.
    pub offset: u32,
    /// Packets sent since the last AckReq.
    pub noack_pkts: u32,
    /// Messages (WQEs) started so far, modulo 2^24: the send sequence
    /// number of the last WQE whose first packet left (the first WQE has
    /// SSN 1; the responder's MSN, which starts at 0, can never be larger).
    pub ssn: u32,
}

/// Completer progress (rxe `qp->comp`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CompState {
    /// Oldest PSN not yet acknowledged.
    pub psn: Psn,
    /// Retries left after timeouts and sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries left (7 = infinite).
    pub rnr_retry: u8,
    /// Local ACK timer deadline.
    pub ack_deadline: Option<Instant>,
    /// End of the RNR wait.
    pub rnr_deadline: Option<Instant>,
    /// `psn` when the last go-back-N started: a sequence NAK or implied NAK
    /// for the same oldest PSN starts no second go-back (the stale packets of
    /// the first attempt would otherwise each start one); the ACK timer
    /// still retries.
    pub retry_from: Option<Psn>,
    /// The AETH MSN of the last response that carried one, and that
    /// response's PSN (`None` before the first).
    pub msn: u32,
    pub msn_psn: Option<Psn>,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: u32,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    /// Path MTU in effect (the attribute clamped to the device MTU).
    pub(crate) pmtu: u32,
    pub(crate) udp_sport: u16,
    pub(crate) sq: Ring<SendWqe>,
    pub(crate) rq: Ring<RecvWqe>,
    pub(crate) req: ReqState,
    pub(crate) comp: CompState,
    pub(crate) resp: RespState,
    /// Whether the QP is on the device's active list.
    pub(crate) active: bool,
    /// In SQD: the absolute index of the first send WQE that must wait for
    /// RTS (WQEs before it, the message in progress included, still finish).
    pub(crate) drain_until: u64,
    /// In SQD: the `SqDrained` event is still to be raised.
    pub(crate) sqd_event_pending: bool,
    /// The Ethernet/IP/UDP headers last built for this QP's packets and the
    /// address vector and UDP source port they were built from
    /// ([`crate::verbs::device::Ctx::headers_cached`]).
    pub(crate) hdr_cache: Option<HeaderCache>,
    /// Header bytes of the requester's last packet, and of the responder's
    /// ([`crate::wire::PacketRepr::emit_headers_cached`]).
    pub(crate) req_tmpl: crate::wire::HeaderTemplate,
    pub(crate) resp_tmpl: crate::wire::HeaderTemplate,
}

/// Headers of a QP's packets, reused while the address vector and UDP
/// source port stay the same (the device's GIDs and DSCP/ECN/PCP settings
/// are fixed at creation). The IPv4 identification is filled per packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderCache {
    pub av: crate::transport::av::AddressVector,
    pub sport: u16,
    pub eth: crate::wire::EthRepr,
    pub net: crate::wire::NetRepr,
    pub udp: crate::wire::UdpRepr,
    /// The requester's last full header built from these (see
    /// [`RequestHeader`]); it goes with the cache.
    pub req: Option<RequestHeader>,
}

/// The whole header (Ethernet through RETH) of a request packet that the
/// full builder wrote, kept so that the next packets of the same shape (same
/// opcode, payload length and SE bit; RoCEv2 over IPv4 with a zero UDP
/// checksum; no extension header but a RETH) are written by copying it and
/// patching the fields that change per packet: the IPv4 identification and
/// header checksum, AckReq, the PSN and the RETH (`rc::requester`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestHeader {
    pub opcode: u8,
    pub len: u32,
    pub solicited: bool,
    /// Offset of the IPv4 header (14, or 18 with an 802.1Q tag).
    pub l3: u8,
    /// Header bytes in use: where the payload starts.
    pub hdr_len: u8,
    /// Up to 18 + 20 + 8 + 12 + 16 bytes.
    pub bytes: [u8; 74],
}

impl Qp {
    pub(crate) fn new(qpn: u32, pd: u32, init: &QpInitAttr) -> Qp {
        let mut sq = Ring::<SendWqe>::new(init.cap.max_send_wr as usize);
        // Inline buffers are allocated once here, never on post.
        for s in sq.slots.iter_mut() {
            s.inline = Vec::with_capacity(init.cap.max_inline_data as usize);
        }
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            state: QpState::Reset,
            attr: QpAttr::default(),
            pmtu: 1024,
            udp_sport: 0xC000,
            sq,
            rq: Ring::new(init.cap.max_recv_wr as usize),
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::new(1),
            active: false,
            drain_until: 0,
            sqd_event_pending: false,
            hdr_cache: None,
            req_tmpl: Default::default(),
            resp_tmpl: Default::default(),
        }
    }

    /// QPN.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// Transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// Attributes as last set.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }
    /// Path MTU in effect, bytes.
    pub fn pmtu(&self) -> u32 {
        self.pmtu
    }
    /// Send WQEs posted and not completed.
    pub fn sq_outstanding(&self) -> u64 {
        self.sq.len()
    }
    /// Receive WQEs posted and not consumed.
    pub fn rq_outstanding(&self) -> u64 {
        self.rq.len()
    }
    /// The transport state now: PSNs, MSNs, queue fill ([`QpInfo`]).
    pub fn info(&self) -> QpInfo {
        QpInfo {
            qpn: self.qpn,
            dest_qp_num: self.attr.dest_qp_num,
            qp_type: self.qp_type,
            state: self.state,
            pmtu: self.pmtu,
            sq_psn: self.req.psn.value(),
            rq_psn: self.resp.epsn.value(),
            msn: self.resp.msn,
            last_acked_psn: self.comp.psn.sub(1).value(),
            unacked_psns: self.req.psn.diff(self.comp.psn).max(0) as u32,
            peer_msn: self.comp.msn,
            ssn: self.req.ssn,
            sq_outstanding: self.sq.len(),
            rq_outstanding: self.rq.len(),
            retry_cnt_left: self.comp.retry_cnt,
            rnr_retry_left: self.comp.rnr_retry,
        }
    }

    /// Reset every queue and transport state (modify to RESET; CASES R22).
    pub(crate) fn reset(&mut self) {
        self.sq.clear();
        self.rq.clear();
        self.req = ReqState::default();
        self.comp = CompState::default();
        self.resp = RespState::new(1);
        self.attr = QpAttr::default();
        self.hdr_cache = None;
        self.sqd_event_pending = false;
    }

    /// Validate and copy a send WR into the send queue.
    pub(crate) fn push_send(&mut self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        if wr.sg_list.len() > self.cap.max_send_sge as usize || wr.sg_list.len() > MAX_SGE {
            return Err(VerbsError::TooLarge);
        }
        let inline = wr.send_flags.contains(SendFlags::INLINE);
        if inline && wr.inline_data.len() > self.cap.max_inline_data as usize {
            return Err(VerbsError::TooLarge);
        }
        match (self.qp_type, wr.opcode) {
            (QpType::Ud, WrOpcode::Send | WrOpcode::SendWithImm) if wr.ud.is_none() => {
                return Err(VerbsError::InvalidAttribute("ud"));
            }
            (QpType::Ud, WrOpcode::Send | WrOpcode::SendWithImm) => {}
            (QpType::Ud, _) => return Err(VerbsError::BadOpcode),
            (QpType::Uc, op) if op.is_rd_atomic() || op == WrOpcode::SendWithInv => {
                return Err(VerbsError::BadOpcode)
            }
            _ => {}
        }
        let total_len: u64 = if inline {
            wr.inline_data.len() as u64
        } else {
            wr.sg_list.iter().map(|s| s.length as u64).sum()
        };
        if total_len > (1u64 << 31) {
            return Err(VerbsError::TooLarge);
        }
        let sig_all = self.sq_sig_all;
        let slot = self.sq.next_slot().ok_or(VerbsError::QueueFull)?;
        slot.wr_id = wr.wr_id;
        slot.opcode = wr.opcode;
        slot.flags = wr.send_flags;
        if sig_all {
            slot.flags |= SendFlags::SIGNALED;
        }
        slot.num_sge = wr.sg_list.len();
        if let ([d, ..], [sge]) = (&mut slot.sges, wr.sg_list) {
            // The common single-SGE WR: a 16-byte store, not a memcpy call.
            *d = *sge;
        } else {
            slot.sges[..wr.sg_list.len()].copy_from_slice(wr.sg_list);
        }
        slot.inline.clear();
        if inline {
            slot.inline.extend_from_slice(wr.inline_data);
        }
        slot.total_len = if wr.opcode.is_atomic() {
            8
        } else {
            total_len as u32
        };
        slot.imm = wr.imm_data;
        slot.inv_rkey = wr.invalidate_rkey;
        slot.remote_addr = wr.remote_addr;
        slot.rkey = wr.rkey;
        slot.compare_add = wr.compare_add;
        slot.swap = wr.swap;
        slot.ud = wr.ud;
        slot.started = false;
        slot.sent = false;
        slot.local_err = None;
        slot.npkts = 0;
        self.sq.commit_push();
        Ok(())
    }

    /// Validate and copy a receive WR into the receive queue.
    pub(crate) fn push_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        if wr.sg_list.len() > self.cap.max_recv_sge as usize || wr.sg_list.len() > MAX_SGE {
            return Err(VerbsError::TooLarge);
        }
        let slot = self.rq.next_slot().ok_or(VerbsError::QueueFull)?;
        slot.wr_id = wr.wr_id;
        slot.num_sge = wr.sg_list.len();
        if let ([d, ..], [sge]) = (&mut slot.sges, wr.sg_list) {
            // The common single-SGE WR: a 16-byte store, not a memcpy call.
            *d = *sge;
        } else {
            slot.sges[..wr.sg_list.len()].copy_from_slice(wr.sg_list);
        }
        slot.total_len = wr.sg_list.iter().map(|s| s.length as u64).sum();
        self.rq.commit_push();
        Ok(())
    }
}

#[cfg(test)]
mod layout_tests {
    use super::SendWqe;
    use core::mem::offset_of;

    /// The per-packet fields share the slot's first line (see `SendWqe`).
    #[test]
    fn send_wqe_hot_fields_fit_the_first_line() {
        assert_eq!(core::mem::align_of::<SendWqe>(), 64);
        assert!(offset_of!(SendWqe, local_err) < 64);
        assert_eq!(offset_of!(SendWqe, sges), 64);
    }
}
