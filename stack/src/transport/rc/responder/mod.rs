//! RC (and UC) responder (IBTA 1.7 §9.7.4, §9.7.5.2; rxe `rxe_resp.c`).
//!
//! # Check order
//!
//! Each inbound request goes through rxe's states in rxe's order (CHK_PSN,
//! CHK_OP_SEQ, CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY, EXECUTE);
//! the first check that fails decides the answer:
//!
//! 1. PSN: PSN == ePSN is processed. PSN after
//!    ePSN: one sequence-error NAK carrying ePSN per gap (`out_of_sequence`,
//!    `seq_nak_sent`), further packets dropped silently. PSN before ePSN is
//!    a duplicate (`duplicate_request`, below).
//! 2. Opcode sequence: after FIRST/MIDDLE only MIDDLE/LAST of
//!    the same kind; MIDDLE/LAST without FIRST is an error.
//! 3. QP access: the QP's access flags must allow the
//!    operation (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
//! 4. Resources: a SEND (FIRST/ONLY takes the head receive
//!    WQE, MIDDLE/LAST keep using it) or a WRITE with immediate needs a
//!    receive WQE, else an RNR NAK with `min_rnr_timer` and no state change
//!    (a class B error). The packets the requester sent behind the NAKed one
//!    are then dropped silently, as after a sequence NAK, until the NAKed PSN
//!    comes again (a sequence NAK for them would make the requester resend
//!    before its RNR wait is over, CASES R15). A READ or ATOMIC needs
//!    responder resources (`max_dest_rd_atomic` > 0). So a SEND that is both
//!    too long and without a receive WQE gets the RNR NAK, as from rxe.
//! 5. Length (BTH PadCnt, IBTA 1.7 §9.2): the payload and its pad bytes
//!    fill whole 4-byte words; FIRST and MIDDLE carry exactly PMTU bytes and
//!    PadCnt 0; LAST 1..=PMTU; ONLY 0..=PMTU; a RETH DMA length is at most
//!    2^31 (CASES R10, R24 c). rxe checks the pad against the WRITE's
//!    remaining length in CHK_RKEY; the pad rule is the same for every
//!    opcode, so it is checked here, once.
//! 6. R_Key (IBTA 1.7 §9.7.4.1.5): the RETH's R_Key, range and rights (zero-length
//!    READ/WRITE need none, C9-88); a WRITE's packets must add up to its
//!    RETH length; an ATOMIC's R_Key and 8-byte range, then its alignment
//!    (rxe finds a misaligned atomic when executing it: NAK invalid
//!    request).
//! 7. Execute: a SEND must fit its receive WQE (LOC_LEN_ERR, CASES R10,
//!    R24 c); a receive WQE with a bad lkey, range or rights is a malformed
//!    WQE (NAK remote operational error, LOC_QP_OP_ERR, as rxe).
//!
//! Errors of class A/C send a NAK with the failing PSN (invalid request 0x61,
//! remote access 0x62, remote operational 0x63), complete the receive WQE in
//! use with the error (as rxe's `do_complete` of `resp.wqe`: the WQE a SEND
//! or a WRITE with immediate took at step 4, or the one of the SEND in
//! progress), and move the QP to ERR, which flushes the other receive WQEs
//! and drops every later packet (CASES R10). UC never NAKs: a broken message
//! is dropped (`uc_dropped`) and the receiver resynchronises on the next
//! FIRST/ONLY.
//!
//! # Duplicates
//!
//! - SEND/WRITE (C9-105): not re-executed; ACKed again with rxe's
//!   `ack_psn - 1`: the PSN of the last SEND/WRITE packet or ATOMIC
//!   executed, not ePSN − 1, which after a READ is that READ's last response
//!   PSN: an ACK covering the READ would let a requester complete it without
//!   its data (Linux 4e4c53df5677 "IB/rxe: fix for duplicate request
//!   processing and ack psns"). ATOMICs move `ack_psn` as in rxe's
//!   `atomic_reply`; a requester treats an ACK past its unanswered atomic as
//!   an implied NAK and retries it, which the replay below answers.
//! - READ: re-executed from the stored responder resource (same R_Key,
//!   inside the original range), re-reading memory. A replay from the READ's
//!   first PSN starts with READ_RESPONSE_FIRST (or ONLY); one from a later
//!   PSN continues the original sequence with MIDDLE ... LAST, as rxe does
//!   (`duplicate_request`: `rdatm_res_state_replay`), which is what rxe's
//!   completer accepts after the FIRST or MIDDLE it already has
//!   (`rxe_comp.c` `check_ack` takes a FIRST mid-stream only at the WQE's
//!   first PSN). rdmavt/hfi1 restart with FIRST; our completer accepts
//!   either. A stream of the same READ still being sent restarts from the
//!   duplicate's PSN instead of a second stream queuing behind it.
//! - ATOMIC: the saved original value is replayed, never re-executed.
//! - Not found (no resource, R_Key or range mismatch): dropped
//!   (`dup_no_resource`).
//!
//! # MSN
//!
//! The MSN counts completed inbound messages (ROCEV2-DIGEST §5 "MSN"; rxe
//! `resp.msn`, 0 when the QP is created or reset): the last packet of a
//! SEND/WRITE, each READ request when it arrives (C9-148), each ATOMIC.
//! Every AETH carries the MSN as of the request it answers, duplicates'
//! answers included: a replayed READ response or ATOMIC ACKNOWLEDGE carries
//! the MSN of the original, a duplicate's ACK the MSN of the ACK for
//! `ack_psn - 1`. rxe (`prepare_ack_packet`) and rdmavt (`rvt_compute_aeth`)
//! write their current MSN into replays instead. Both are valid to a
//! requester that completes by PSN (rxe's completer ignores the MSN); ours
//! keeps the count through a PSN a function of that PSN, so a requester
//! can tell a stale response from a replay whatever the network reorders
//! (our completer's `resp_msn_backwards` relies on it).
//!
//! # ACKs
//!
//! ACKs go out for packets with AckReq, for duplicates, and every
//! `ack_coalesce` packets if configured (CASES R14); an ACK still waiting to
//! be sent is replaced by a newer one and makes an older one unnecessary.
//! AETH credits are sent as 0x1F ("invalid"), as rxe does (ConnectX sends
//! real counts).
//!
//! # Structure
//!
//! As rxe's `rxe_receiver`: `handle_request` runs the steps of `checks`
//! (one function per check) and `execute`, each returning the next step
//! (`Next`); every class A/C error is a `RespError`, mapped to its NAK
//! code and completion status in one place (`RespError::nak`).
//! Duplicates are answered in `execute`, responses built in `reply`.

mod checks;
mod execute;
mod reply;

use std::collections::VecDeque;

use crate::resources::inner::DeviceInner;
use crate::resources::types::{QpType, WcStatus};
use crate::transport::psn::Psn;
use crate::transport::qp::Qp;
use crate::transport::{enter_error, recv_wc};
use crate::wire::ext::{AethSyndrome, NakCode, RethRepr};
use crate::wire::opcode::{OpKind, OpcodeInfo, Position};
use crate::wire::RocePacket;

pub(crate) use reply::{next_is_ack, produce};

/// A READ or ATOMIC kept for duplicate handling (responder resources,
/// `max_dest_rd_atomic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Resource {
    #[default]
    Free,
    Read {
        first: Psn,
        last: Psn,
        va: u64,
        rkey: u32,
        len: u32,
        /// The MSN its responses carried.
        msn: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        /// The MSN its ATOMIC ACKNOWLEDGE carried.
        msn: u32,
    },
}

/// A response waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RespItem {
    Ack {
        psn: Psn,
        syndrome: u8,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    Read {
        psn: Psn,
        last: Psn,
        va: u64,
        rkey: u32,
        remaining: u32,
        msn: u32,
        first: bool,
    },
}

/// The kind of message in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MsgKind {
    Send,
    Write,
}

/// Responder state (rxe `qp->resp`).
#[derive(Debug)]
pub(crate) struct RespState {
    pub epsn: Psn,
    /// One past the last SEND/WRITE packet or ATOMIC executed (rxe
    /// `resp.ack_psn`): a duplicate SEND/WRITE is acknowledged with
    /// `ack_psn - 1`, which never covers a READ executed after it.
    pub ack_psn: Psn,
    /// The MSN when `ack_psn` last moved: what the ACK for `ack_psn - 1`
    /// carried (or would have).
    pub ack_msn: u32,
    pub msn: u32,
    pub nak_sent: bool,
    pub in_msg: Option<MsgKind>,
    /// Bytes of the current SEND placed in the head receive WQE.
    pub recv_offset: u64,
    pub write_va: u64,
    pub write_rkey: u32,
    pub write_remaining: u32,
    pub write_len: u32,
    /// The responder resources: `res_count` of them, allocated at the
    /// first READ or ATOMIC executed (a QP that only takes SENDs and
    /// WRITEs never holds them).
    pub resources: Vec<Resource>,
    pub res_count: u32,
    pub res_next: u32,
    pub queue: VecDeque<RespItem>,
    pub pkts_since_ack: u32,
    /// UC: drop packets until the next FIRST/ONLY.
    pub uc_dropping: bool,
}

impl RespState {
    pub(crate) fn new(max_dest_rd_atomic: usize) -> RespState {
        let n = max_dest_rd_atomic.max(1).next_power_of_two();
        RespState {
            epsn: Psn::default(),
            ack_psn: Psn::default(),
            ack_msn: 0,
            msn: 0,
            nak_sent: false,
            in_msg: None,
            recv_offset: 0,
            write_va: 0,
            write_rkey: 0,
            write_remaining: 0,
            write_len: 0,
            resources: Vec::new(),
            res_count: n as u32,
            res_next: 0,
            // Grown at the first response (ACKs only: a few entries), and
            // reserved for the READ/ATOMIC depth with the resources.
            queue: VecDeque::new(),
            pkts_since_ack: 0,
            uc_dropping: false,
        }
    }

    /// Resize the responder resources (`max_dest_rd_atomic`, rounded up to a
    /// power of two as rxe does); the saved READ/ATOMIC state is discarded.
    pub(crate) fn set_resources(&mut self, max_dest_rd_atomic: usize) {
        let n = max_dest_rd_atomic.max(1).next_power_of_two();
        self.resources = Vec::new();
        self.res_count = n as u32;
        self.res_next = 0;
    }

    pub(crate) fn drop_read_streams(&mut self) {
        self.queue.retain(|i| !matches!(i, RespItem::Read { .. }));
    }

    fn push_resource(&mut self, r: Resource) {
        let n = self.res_count.max(1);
        if self.resources.is_empty() {
            // Allocated once, with room for the responses they queue.
            self.resources = vec![Resource::Free; n as usize];
            self.queue.reserve(2 * n as usize + 4);
        }
        if let Some(slot) = self.resources.get_mut((self.res_next % n) as usize) {
            *slot = r;
        }
        self.res_next = (self.res_next + 1) % n;
    }

    /// Queue an ACK with the current MSN, replacing one that has not left
    /// yet.
    fn queue_ack(&mut self, psn: Psn, syndrome: u8) {
        self.queue_ack_msn(psn, syndrome, self.msn);
    }

    /// Queue an ACK carrying `msn`. An ACK that has not left yet is
    /// replaced by a newer one, and makes an older one (a duplicate's)
    /// unnecessary: ACKs are cumulative.
    fn queue_ack_msn(&mut self, psn: Psn, syndrome: u8, msn: u32) {
        let item = RespItem::Ack { psn, syndrome, msn };
        if let Some(RespItem::Ack {
            syndrome: s,
            psn: waiting,
            ..
        }) = self.queue.back()
        {
            if *s == AethSyndrome::ACK_NO_CREDIT.to_byte() && syndrome == *s {
                if psn.at_or_after(*waiting) {
                    if let Some(b) = self.queue.back_mut() {
                        *b = item;
                    }
                }
                return;
            }
        }
        self.queue.push_back(item);
    }
}

/// AETH syndrome of an ACK: credit count 0x1F, "invalid" (see the module
/// docs, # ACKs).
const ACK: u8 = 0x1F;

fn nak(code: NakCode) -> u8 {
    AethSyndrome::Nak(code).to_byte()
}

/// One inbound request and what the checks learned about it so far.
struct Req<'a, 'p> {
    pkt: &'a RocePacket<'p>,
    psn: Psn,
    info: &'static OpcodeInfo,
    /// The message kind of a SEND or RDMA WRITE packet.
    kind: Option<MsgKind>,
    pos: Position,
    /// RC (acknowledged) rather than UC.
    reliable: bool,
    /// The packet carries immediate data (CHK_RESOURCE on).
    with_imm: bool,
    /// The packet takes or uses the head receive WQE: a SEND, or a WRITE
    /// with immediate, that passed the resource check. An error from then
    /// on completes that WQE (rxe completes `resp.wqe`).
    wqe_taken: bool,
    /// Payload bytes (CHK_LENGTH on).
    plen: u32,
    /// The RETH, if the packet has one (CHK_LENGTH on).
    reth: Option<RethRepr>,
}

/// What the responder does after a step (rxe `enum resp_states`): the next
/// step, or how the packet ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// On to the next step.
    Continue,
    /// A duplicate (rxe `RESPST_DUPLICATE_REQUEST`): answered from the
    /// saved state, never executed again.
    Duplicate,
    /// No receive WQE (rxe `RESPST_ERR_RNR`): RNR NAK, class B, no state
    /// change.
    Rnr,
    /// A class A/C error (rxe `RESPST_ERR_*`): NAK, error completion, QP to
    /// ERR; UC drops the message.
    Error(RespError),
    /// Finished: whether a response is queued.
    Done(bool),
}

/// Why a request fails (rxe's `RESPST_ERR_*` states).
/// [`RespError::nak`] gives each its NAK code and completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RespError {
    /// MIDDLE/LAST without FIRST, or a new message before the last one
    /// ended (rxe `ERR_MISSING_OPCODE_FIRST`, `_LAST_C`, `_LAST_D1E`).
    OpSequence,
    /// The QP's access flags do not allow the operation, or the responder
    /// does not execute it (rxe `ERR_UNSUPPORTED_OPCODE`).
    OpNotAllowed,
    /// A READ or ATOMIC with no responder resources (`max_dest_rd_atomic`
    /// 0).
    NoResources,
    /// Payload or pad against the opcode and PMTU, a missing RETH, or a
    /// RETH DMA length over 2^31 (rxe `ERR_LENGTH`).
    Length,
    /// A WRITE's packets do not add up to its RETH length (rxe
    /// `ERR_LENGTH` in `check_rkey`).
    WriteLength,
    /// An ATOMIC without its AtomicETH.
    MissingAtomicEth,
    /// R_Key, range or rights (rxe `ERR_RKEY_VIOLATION`).
    RKey,
    /// An ATOMIC address not 8-byte aligned (rxe `ERR_MISALIGNED_ATOMIC`).
    Misaligned,
    /// A SEND longer than its receive WQE (rxe `send_data_in`: `-ENOSPC`,
    /// `ERR_LENGTH`).
    RecvTooLong,
    /// The receive WQE's lkey, range or rights fail (rxe
    /// `ERR_MALFORMED_WQE`).
    MalformedWqe,
}

impl RespError {
    /// The NAK code sent and the status the receive WQE in use completes
    /// with (rxe's mapping; ROCEV2-DIGEST §5).
    fn nak(self) -> (NakCode, WcStatus) {
        use RespError::*;
        match self {
            //= IBTA 1.7 §9.7.5.2.2
            //# NAK code 1 (0x61), invalid request: the request was not
            //# understood or is not supported.
            OpSequence | OpNotAllowed | NoResources | Length | WriteLength | MissingAtomicEth
            | Misaligned => (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
            //= IBTA 1.7 §9.7.5.2.2
            //# NAK code 2 (0x62), remote access error: R_Key, range or
            //# rights.
            RKey => (NakCode::RemoteAccessErr, WcStatus::RemAccessErr),
            RecvTooLong => (NakCode::InvalidRequest, WcStatus::LocLenErr),
            //= IBTA 1.7 §9.7.5.2.2
            //# NAK code 3 (0x63), remote operational error: the responder
            //# could not complete the request.
            MalformedWqe => (NakCode::RemoteOpErr, WcStatus::LocQpOpErr),
        }
    }
}

/// Handle an inbound request on an RC or UC QP: rxe's steps in rxe's order
/// (CHK_PSN, CHK_OP_SEQ, CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY,
/// EXECUTE; see the module docs), each a function returning the next step.
/// Returns whether a response is queued.
pub(crate) fn handle_request(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    _now: crate::time::Instant,
    pkt: &RocePacket<'_>,
) -> bool {
    if let Some(queued) = write_only_fast(qp, ctx, pkt) {
        return queued;
    }
    let info = pkt.bth().opcode.info();
    let mut r = Req {
        pkt,
        psn: Psn::new(pkt.bth().psn),
        info,
        kind: match info.kind {
            OpKind::Send => Some(MsgKind::Send),
            OpKind::Write => Some(MsgKind::Write),
            _ => None,
        },
        pos: info.position,
        reliable: qp.qp_type == QpType::Rc,
        with_imm: false,
        wqe_taken: false,
        plen: 0,
        reth: None,
    };
    let next = steps(qp, ctx, &mut r);
    match next {
        Next::Continue => false,
        Next::Done(queued) => queued,
        Next::Duplicate => execute::duplicate(qp, ctx, pkt, r.psn),
        Next::Rnr => rnr(qp, ctx, r.psn),
        Next::Error(e) => fatal(qp, ctx, &r, e),
    }
}

/// The common case of an RC RDMA WRITE ONLY, in one pass: the packet is
/// the expected one (PSN = ePSN, no message in progress), the QP allows
/// remote writes, the payload fills whole words, is at most the PMTU and
/// is the RETH's whole non-zero DMA length, and the R_Key grants the range.
/// Then it does exactly what the steps do for such a packet (the same
/// checks in effect, the same state changes, the same ACK); anything else
/// returns `None` having changed nothing, and the steps decide (and count)
/// it. Returns whether an ACK is queued.
#[inline(always)]
fn write_only_fast(qp: &mut Qp, ctx: &mut DeviceInner, pkt: &RocePacket<'_>) -> Option<bool> {
    use crate::resources::types::AccessFlags;
    use crate::wire::Opcode;
    let bth = pkt.bth();
    if bth.opcode != Opcode::RC_RDMA_WRITE_ONLY || qp.qp_type != QpType::Rc {
        return None;
    }
    let psn = Psn::new(bth.psn);
    let res = &qp.resp;
    if psn != res.epsn
        || res.in_msg.is_some()
        || !qp.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE)
    {
        return None;
    }
    let payload = pkt.payload();
    let plen = payload.len() as u32;
    let reth = pkt.ext().reth()?;
    if plen == 0
        || plen > qp.pmtu
        || (plen + u32::from(bth.pad_count)) % 4 != 0
        || reth.dma_len != plen
    {
        return None;
    }
    //= IBTA 1.7 §9.7.4.1.5
    //# C9-86, C9-87: the R_Key names a region of the QP's protection
    //# domain that holds the whole range and grants the access.
    let (mr, range) = ctx
        .mrs
        .remote(
            qp.pd,
            reth.rkey,
            reth.va,
            u64::from(plen),
            AccessFlags::REMOTE_WRITE,
        )
        .ok()?;
    crate::transport::copy_payload(&mut mr.buf.bytes_mut()[range], payload);
    ctx.counters.rx_write_requests += 1;
    let res = &mut qp.resp;
    res.nak_sent = false;
    res.write_va = reth.va.wrapping_add(u64::from(plen));
    res.write_rkey = reth.rkey;
    res.write_remaining = 0;
    res.write_len = plen;
    res.msn = (res.msn + 1) & 0x00FF_FFFF;
    res.epsn = psn.next();
    res.ack_psn = res.epsn;
    res.ack_msn = res.msn;
    res.pkts_since_ack += 1;
    //= IBTA 1.7 §9.7.5.1.1
    //# the responder acknowledges a packet that has AckReq set; it may
    //# acknowledge others (coalescing, CASES R14).
    let coalesce = ctx.cfg.ack_coalesce;
    if bth.ack_req || (coalesce > 0 && res.pkts_since_ack >= coalesce) {
        res.pkts_since_ack = 0;
        res.queue_ack(psn, ACK);
        return Some(true);
    }
    Some(false)
}

/// The steps, until one does not say [`Next::Continue`].
#[inline(always)]
fn steps(qp: &mut Qp, ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    macro_rules! step {
        ($f:path) => {
            match $f(qp, ctx, r) {
                Next::Continue => {}
                n => return n,
            }
        };
    }
    step!(checks::check_psn);
    step!(checks::check_op_seq);
    step!(checks::check_op_valid);
    step!(checks::check_resource);
    step!(checks::check_length);
    step!(checks::check_rkey);
    execute::execute(qp, ctx, r)
}

/// A class A/C error: NAK with the failing PSN (RC only), error completion of
/// the receive WQE in use (the packet is a SEND or a WRITE with immediate
/// that passed the resource check, or a SEND message is in progress; rxe
/// completes `resp.wqe` with the error status), QP to ERR. UC drops the
/// message instead.
fn fatal(qp: &mut Qp, ctx: &mut DeviceInner, r: &Req<'_, '_>, e: RespError) -> bool {
    let (code, status) = e.nak();
    match code {
        NakCode::RemoteAccessErr => ctx.counters.resp_remote_access_error += 1,
        NakCode::RemoteOpErr => ctx.counters.resp_remote_operational_error += 1,
        _ => ctx.counters.resp_invalid_request += 1,
    }
    if qp.qp_type == QpType::Uc {
        drop_uc_message(qp, ctx);
        return false;
    }
    qp.resp.queue_ack(r.psn, nak(code));
    if qp.resp.in_msg == Some(MsgKind::Send) || r.wqe_taken {
        if let Some(w) = qp.rq.get(qp.rq.head()) {
            let wc = recv_wc(qp.qpn, w.wr_id, status);
            ctx.complete(qp.recv_cq, wc);
            qp.rq.pop();
        }
    }
    enter_error(qp, ctx);
    true
}

/// UC: the message in progress is lost; drop until the next FIRST/ONLY.
fn drop_uc_message(qp: &mut Qp, ctx: &mut DeviceInner) {
    ctx.counters.uc_dropped += 1;
    qp.resp.in_msg = None;
    qp.resp.recv_offset = 0;
    qp.resp.uc_dropping = true;
}

/// No receive WQE: an RNR NAK with `min_rnr_timer` (RC), or the message
/// dropped (UC).
fn rnr(qp: &mut Qp, ctx: &mut DeviceInner, psn: Psn) -> bool {
    if qp.qp_type == QpType::Uc {
        ctx.counters.rx_no_rwqe += 1;
        drop_uc_message(qp, ctx);
        return false;
    }
    ctx.counters.send_rnr_err += 1;
    //= IBTA 1.7 §9.7.5.2.8
    //# RNR NAK: the responder has no receive WQE; the AETH carries the
    //# time the requester waits before it retries.
    let code = AethSyndrome::RnrNak {
        timer: qp.attr.min_rnr_timer,
    }
    .to_byte();
    qp.resp.queue_ack(psn, code);
    // The RNR NAK stands for the gap it opens: the packets the requester
    // already sent behind it are dropped silently (no sequence NAK) until the
    // NAKed PSN comes again, so the requester's RNR wait is not cut short.
    qp.resp.nak_sent = true;
    true
}
