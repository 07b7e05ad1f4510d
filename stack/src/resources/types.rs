//! Verbs vocabulary mirroring ibverbs (`rdma-core` `verbs.h`): access flags, QP
//! types and states, attribute masks, path MTU, work requests and completions.

use bitflags::bitflags;

bitflags! {
    /// Memory-region and QP access rights (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`.
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`.
        const REMOTE_WRITE = 2;
        /// `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 4;
        /// `IBV_ACCESS_REMOTE_ATOMIC`.
        const REMOTE_ATOMIC = 8;
        /// `IBV_ACCESS_MW_BIND`.
        const MW_BIND = 16;
        /// `IBV_ACCESS_ZERO_BASED`.
        const ZERO_BASED = 32;
        /// `IBV_ACCESS_ON_DEMAND`.
        const ON_DEMAND = 64;
        /// `IBV_ACCESS_HUGETLB`.
        const HUGETLB = 128;
        /// `IBV_ACCESS_FLUSH_GLOBAL`.
        const FLUSH_GLOBAL = 256;
        /// `IBV_ACCESS_FLUSH_PERSISTENT`.
        const FLUSH_PERSISTENT = 512;
        /// `IBV_ACCESS_RELAXED_ORDERING`.
        const RELAXED_ORDERING = 1 << 20;
    }
}

bitflags! {
    /// `enum ibv_qp_attr_mask`: which attributes a `modify_qp` call sets.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`.
        const STATE = 1 << 0;
        /// `IBV_QP_CUR_STATE`.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`.
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`.
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`.
        const DEST_QPN = 1 << 20;
        /// `IBV_QP_RATE_LIMIT`.
        const RATE_LIMIT = 1 << 25;
    }
}

/// QP transport service (`enum ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
}

/// QP state (`enum ibv_qp_state`), IBTA 1.7 §10.3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset,
    /// `IBV_QPS_INIT`.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error.
    Sqe,
    /// `IBV_QPS_ERR`.
    Err,
}

/// Path MTU (`enum ibv_mtu`): the payload bytes per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// `IBV_MTU_256`.
    Mtu256 = 1,
    /// `IBV_MTU_512`.
    Mtu512 = 2,
    /// `IBV_MTU_1024`.
    Mtu1024 = 3,
    /// `IBV_MTU_2048`.
    Mtu2048 = 4,
    /// `IBV_MTU_4096`.
    Mtu4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> usize {
        256 << (self as u32 - 1)
    }
    /// The `Mtu` of exactly `bytes` (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: usize) -> Option<Mtu> {
        Some(match bytes {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// The largest IB MTU whose worst-case RoCEv2 packet fits an Ethernet MTU of
    /// `netdev_mtu` bytes (rxe: netdev MTU − 80; 1500 → 1024, 9000 → 4096).
    pub fn for_netdev(netdev_mtu: usize) -> Option<Mtu> {
        [
            Mtu::Mtu4096,
            Mtu::Mtu2048,
            Mtu::Mtu1024,
            Mtu::Mtu512,
            Mtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() + 80 <= netdev_mtu)
    }
}

/// Completion status (`enum ibv_wc_status`), IBTA 1.7 §11.4.2.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    /// 0 `IBV_WC_SUCCESS`.
    Success = 0,
    /// 1 `IBV_WC_LOC_LEN_ERR`.
    LocLenErr = 1,
    /// 2 `IBV_WC_LOC_QP_OP_ERR`.
    LocQpOpErr = 2,
    /// 3 `IBV_WC_LOC_EEC_OP_ERR`.
    LocEecOpErr = 3,
    /// 4 `IBV_WC_LOC_PROT_ERR`.
    LocProtErr = 4,
    /// 5 `IBV_WC_WR_FLUSH_ERR`.
    WrFlushErr = 5,
    /// 6 `IBV_WC_MW_BIND_ERR`.
    MwBindErr = 6,
    /// 7 `IBV_WC_BAD_RESP_ERR`.
    BadRespErr = 7,
    /// 8 `IBV_WC_LOC_ACCESS_ERR`.
    LocAccessErr = 8,
    /// 9 `IBV_WC_REM_INV_REQ_ERR`.
    RemInvReqErr = 9,
    /// 10 `IBV_WC_REM_ACCESS_ERR`.
    RemAccessErr = 10,
    /// 11 `IBV_WC_REM_OP_ERR`.
    RemOpErr = 11,
    /// 12 `IBV_WC_RETRY_EXC_ERR`.
    RetryExcErr = 12,
    /// 13 `IBV_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr = 13,
    /// 14 `IBV_WC_LOC_RDD_VIOL_ERR`.
    LocRddViolErr = 14,
    /// 15 `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemInvRdReqErr = 15,
    /// 16 `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr = 16,
    /// 17 `IBV_WC_INV_EECN_ERR`.
    InvEecnErr = 17,
    /// 18 `IBV_WC_INV_EEC_STATE_ERR`.
    InvEecStateErr = 18,
    /// 19 `IBV_WC_FATAL_ERR`.
    FatalErr = 19,
    /// 20 `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr = 20,
    /// 21 `IBV_WC_GENERAL_ERR`.
    GeneralErr = 21,
}
