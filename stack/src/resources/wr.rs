//! Work requests and work completions (`struct ibv_send_wr`, `ibv_recv_wr`,
//! `ibv_sge`, `ibv_wc`), IBTA 1.7 §11.4.1 and §11.4.2.

use bitflags::bitflags;

use super::av::AddressVector;
use super::types::WcStatus;

/// Largest scatter/gather list a work request may carry (`max_send_sge`,
/// `max_recv_sge`).
pub const MAX_SGE: usize = 16;

/// Largest inline payload of a send work request, bytes (`max_inline_data`).
pub const MAX_INLINE: usize = 256;

/// One scatter/gather element: `length` bytes at I/O virtual address `addr` of
/// the memory region whose lkey is `lkey` (`struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// I/O virtual address in the MR.
    pub addr: u64,
    /// Length, bytes.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// Send work request opcode (`enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm,
    /// `IBV_WR_SEND_WITH_INV` (RC only): invalidates `invalidate_rkey` at the
    /// responder.
    SendWithInv,
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm,
    /// `IBV_WR_RDMA_READ` (RC only).
    RdmaRead,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (RC only).
    AtomicCmpAndSwp,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (RC only).
    AtomicFetchAndAdd,
}

impl WrOpcode {
    /// READ or atomic: needs a responder resource (`max_rd_atomic`).
    pub fn is_rd_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// SEND (with or without immediate or invalidate).
    pub fn is_send(self) -> bool {
        matches!(
            self,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
        )
    }
    /// Atomic.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// The completion opcode.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }
}

bitflags! {
    /// `enum ibv_send_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// `IBV_SEND_FENCE`: wait for earlier READ/ATOMIC to complete.
        const FENCE = 1;
        /// `IBV_SEND_SIGNALED`: generate a completion on success.
        const SIGNALED = 2;
        /// `IBV_SEND_SOLICITED`: set the BTH SE bit on the last packet.
        const SOLICITED = 4;
        /// `IBV_SEND_INLINE`: take the payload from `inline_data`.
        const INLINE = 8;
    }
}

/// Destination of a UD send (`wr.ud`): address vector, remote QPN and Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// Where to send.
    pub av: AddressVector,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Q_Key; if bit 31 is set the QP's own Q_Key is sent instead
    /// (IBTA 1.7 §10.2.5, C10-15).
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`); the lists borrow the caller's
/// data, which `post_send` copies into the send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub send_flags: SendFlags,
    /// Local data (gather list for sends and writes, scatter list for READ and
    /// the 8-byte atomic result).
    pub sg_list: &'a [Sge],
    /// Payload when `send_flags` has `INLINE` (at most [`MAX_INLINE`] bytes).
    pub inline_data: &'a [u8],
    /// Immediate data (`*_WITH_IMM`), sent big-endian as given.
    pub imm_data: u32,
    /// R_Key to invalidate (`SEND_WITH_INV`).
    pub invalidate_rkey: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (CMP_AND_SWP) or add value (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// UD destination (UD QPs only).
    pub ud: Option<UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled work request of `opcode` over `sg_list`, every other field 0.
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::SIGNALED,
            sg_list,
            inline_data: &[],
            imm_data: 0,
            invalidate_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where incoming data is scattered.
    pub sg_list: &'a [Sge],
}

/// Completion opcode (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`.
    Send,
    /// `IBV_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_COMP_SWAP`.
    CompSwap,
    /// `IBV_WC_FETCH_ADD`.
    FetchAdd,
    /// `IBV_WC_RECV`.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
}

bitflags! {
    /// `enum ibv_wc_flags`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// `IBV_WC_GRH`: the first 40 bytes of the buffer hold the GRH area (UD).
        const GRH = 1;
        /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
        const WITH_IMM = 2;
        /// `IBV_WC_WITH_INV`: `invalidated_rkey` is valid.
        const WITH_INV = 8;
    }
}

/// Network header type of a UD receive's GRH area (`ibv_wc_read_..._hdr_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NetworkHdrType {
    /// Not a UD receive.
    #[default]
    None,
    /// RoCEv2 over IPv4: bytes 20..40 of the GRH area hold the IPv4 header.
    Ipv4,
    /// RoCEv2 over IPv6: bytes 0..40 hold the IPv6 header.
    Ipv6,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wc {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (valid for receives and successful sends).
    pub opcode: WcOpcode,
    /// Bytes transferred (receives: including the 40-byte GRH area on UD).
    pub byte_len: u32,
    /// Immediate data, if `wc_flags` has `WITH_IMM`.
    pub imm_data: u32,
    /// Invalidated R_Key, if `wc_flags` has `WITH_INV`.
    pub invalidated_rkey: u32,
    /// Local QPN.
    pub qp_num: u32,
    /// Source QPN (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// GRH-area layout (UD receives).
    pub network_hdr_type: NetworkHdrType,
}

impl Wc {
    /// A placeholder completion (status `GENERAL_ERR`, everything else zero) to
    /// fill a `poll_cq` output array before polling.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::GeneralErr,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_data: 0,
        invalidated_rkey: 0,
        qp_num: 0,
        src_qp: 0,
        wc_flags: WcFlags::empty(),
        network_hdr_type: NetworkHdrType::None,
    };
}
