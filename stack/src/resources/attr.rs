//! QP attributes and results of the verbs calls (`struct ibv_qp_attr`,
//! `struct ibv_qp_init_attr`, `struct ibv_qp_cap`; the errno-like
//! [`VerbsError`]) and the QP snapshot [`QpInfo`].

use super::av::AddressVector;
use super::types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType};

/// A snapshot of a QP's transport state (`ibv_query_qp` plus what `rdma res
/// show qp` prints for rxe), from [`crate::verbs::Qp::info`] or
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
    /// SGEs per send WR (at most [`super::wr::MAX_SGE`]).
    pub max_send_sge: u32,
    /// SGEs per receive WR (at most [`super::wr::MAX_SGE`]).
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
