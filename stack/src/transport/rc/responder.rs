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

use std::collections::VecDeque;

use crate::resources::headers::Dir;
use crate::resources::inner::DeviceInner;
use crate::resources::mr::AccessError;
use crate::resources::types::{AccessFlags, QpType, WcStatus};
use crate::resources::wr::{WcFlags, WcOpcode};
use crate::transport::psn::Psn;
use crate::transport::qp::Qp;
use crate::transport::{copy_payload, enter_error, recv_wc, scatter};
use crate::wire::ext::{AethRepr, AethSyndrome, AtomicAckEthRepr, NakCode, RethRepr};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::{BthRepr, ExtHeaders, Opcode, RocePacket};

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
    pub resources: Vec<Resource>,
    pub res_next: usize,
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
            resources: vec![Resource::Free; n],
            res_next: 0,
            queue: VecDeque::with_capacity(2 * n + 4),
            pkts_since_ack: 0,
            uc_dropping: false,
        }
    }

    /// Resize the responder resources (`max_dest_rd_atomic`, rounded up to a
    /// power of two as rxe does); the saved READ/ATOMIC state is discarded.
    pub(crate) fn set_resources(&mut self, max_dest_rd_atomic: usize) {
        let n = max_dest_rd_atomic.max(1).next_power_of_two();
        self.resources.clear();
        self.resources.resize(n, Resource::Free);
        self.res_next = 0;
    }

    pub(crate) fn drop_read_streams(&mut self) {
        self.queue.retain(|i| !matches!(i, RespItem::Read { .. }));
    }

    fn push_resource(&mut self, r: Resource) {
        let n = self.resources.len();
        self.resources[self.res_next % n] = r;
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

const ACK: u8 = 0x1F;

fn nak(code: NakCode) -> u8 {
    AethSyndrome::Nak(code).to_byte()
}

/// A class A/C error: NAK with the failing PSN (RC only), error completion of
/// the receive WQE in use (`wqe_in_use`: the packet is a SEND or a WRITE with
/// immediate that passed the resource check, or a SEND message is in
/// progress; rxe completes `resp.wqe` with the error status), QP to ERR.
fn fatal(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    psn: Psn,
    code: NakCode,
    status: WcStatus,
    wqe_in_use: bool,
) -> bool {
    match code {
        NakCode::RemoteAccessErr => ctx.counters.resp_remote_access_error += 1,
        NakCode::RemoteOpErr => ctx.counters.resp_remote_operational_error += 1,
        _ => ctx.counters.resp_invalid_request += 1,
    }
    if qp.qp_type == QpType::Uc {
        drop_uc_message(qp, ctx);
        return false;
    }
    qp.resp.queue_ack(psn, nak(code));
    if qp.resp.in_msg == Some(MsgKind::Send) || wqe_in_use {
        if let Some(r) = qp.rq.get(qp.rq.head()) {
            let wc = recv_wc(qp.qpn, r.wr_id, status);
            ctx.complete(qp.recv_cq, wc);
            qp.rq.pop();
        }
    }
    enter_error(qp, ctx);
    true
}

fn drop_uc_message(qp: &mut Qp, ctx: &mut DeviceInner) {
    ctx.counters.uc_dropped += 1;
    qp.resp.in_msg = None;
    qp.resp.recv_offset = 0;
    qp.resp.uc_dropping = true;
}

/// R_Key, range and rights of a RETH (IBTA 1.7 §9.7.4.1.5); a zero-length
/// READ/WRITE needs none (C9-88).
fn check_reth(
    ctx: &mut DeviceInner,
    pd: u32,
    reth: &RethRepr,
    need: AccessFlags,
) -> Result<(), AccessError> {
    if reth.dma_len == 0 {
        return Ok(());
    }
    ctx.mrs
        .remote(pd, reth.rkey, reth.va, reth.dma_len as u64, need)
        .map(|_| ())
}

fn access_code(e: AccessError) -> NakCode {
    let _ = e;
    NakCode::RemoteAccessErr
}

/// Handle an inbound request on an RC or UC QP. Returns whether a response is
/// queued.
pub(crate) fn handle_request(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    _now: crate::time::Instant,
    pkt: &RocePacket<'_>,
) -> bool {
    let psn = Psn::new(pkt.bth().psn);
    let info = pkt.bth().opcode.info();
    let reliable = qp.qp_type == QpType::Rc;
    let invalid = NakCode::InvalidRequest;
    let inv_status = WcStatus::RemInvReqErr;

    // 1. PSN (rxe check_psn).
    let d = psn.diff(qp.resp.epsn);
    if reliable {
        if d > 0 {
            ctx.counters.out_of_sequence += 1;
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                ctx.counters.seq_nak_sent += 1;
                let e = qp.resp.epsn;
                qp.resp.queue_ack(e, nak(NakCode::PsnSeqErr));
                return true;
            }
            return false;
        }
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            return duplicate(qp, ctx, pkt, psn);
        }
        qp.resp.nak_sent = false;
    } else {
        // UC: a gap breaks the message in progress; resync on FIRST/ONLY.
        if d != 0 {
            ctx.counters.out_of_sequence += 1;
            if qp.resp.in_msg.is_some() {
                drop_uc_message(qp, ctx);
            }
            qp.resp.uc_dropping = true;
        }
        qp.resp.epsn = psn.next();
        if qp.resp.uc_dropping {
            if matches!(info.position, Position::First | Position::Only) {
                qp.resp.uc_dropping = false;
                qp.resp.in_msg = None;
                qp.resp.recv_offset = 0;
            } else {
                ctx.counters.uc_dropped += 1;
                return false;
            }
        }
    }

    // 2. Opcode sequence (rxe check_op_seq).
    let kind = match info.kind {
        OpKind::Send => Some(MsgKind::Send),
        OpKind::Write => Some(MsgKind::Write),
        _ => None,
    };
    let pos = info.position;
    let seq_ok = match (qp.resp.in_msg, pos) {
        (None, Position::First | Position::Only) => true,
        (None, _) => false,
        (Some(k), Position::Middle | Position::Last) => Some(k) == kind,
        (Some(_), _) => false,
    };
    if !seq_ok {
        return fatal(qp, ctx, psn, invalid, inv_status, false);
    }

    // 3. QP access rights (rxe check_op_valid).
    let need = match info.kind {
        OpKind::Write => AccessFlags::REMOTE_WRITE,
        OpKind::ReadRequest => AccessFlags::REMOTE_READ,
        OpKind::Atomic => AccessFlags::REMOTE_ATOMIC,
        OpKind::Send => AccessFlags::empty(),
        _ => return fatal(qp, ctx, psn, invalid, inv_status, false),
    };
    if !qp.attr.qp_access_flags.contains(need) {
        return fatal(qp, ctx, psn, invalid, inv_status, false);
    }

    // 4. Resources (rxe check_resource): a SEND (FIRST/ONLY takes the head
    //    receive WQE, MIDDLE/LAST keep using it) or a WRITE with immediate
    //    needs a receive WQE, else an RNR NAK and no state change; a READ or
    //    ATOMIC needs responder resources (`max_dest_rd_atomic` > 0), else
    //    NAK invalid request.
    let with_imm = pkt.ext().immdt().is_some();
    let uses_wqe = kind == Some(MsgKind::Send) || (kind == Some(MsgKind::Write) && with_imm);
    if uses_wqe && qp.rq.len() == 0 {
        return rnr(qp, ctx, psn);
    }
    if matches!(info.kind, OpKind::ReadRequest | OpKind::Atomic) && qp.attr.max_dest_rd_atomic == 0
    {
        return fatal(qp, ctx, psn, invalid, inv_status, false);
    }

    // 5. Length (rxe check_length; BTH PadCnt, IBTA 1.7 §9.2): the payload and its pad bytes fill whole 4-byte
    //    words; FIRST/MIDDLE carry exactly PMTU bytes and no pad, LAST
    //    1..=PMTU, ONLY 0..=PMTU; a RETH DMA length is at most 2^31.
    let plen = pkt.payload().len() as u32;
    let pad = u32::from(pkt.pad());
    let pmtu = qp.pmtu;
    let len_ok = (plen + pad) % 4 == 0
        && match (kind, pos) {
            (None, _) => true,
            (Some(_), Position::First | Position::Middle) => plen == pmtu && pad == 0,
            (Some(_), Position::Last) => plen >= 1 && plen <= pmtu,
            (Some(_), Position::Only) => plen <= pmtu,
        };
    let reth = pkt.ext().reth();
    let reth_needed = matches!(info.kind, OpKind::ReadRequest)
        || (kind == Some(MsgKind::Write) && matches!(pos, Position::First | Position::Only));
    let reth_ok = match (reth_needed, &reth) {
        (false, _) => true,
        (true, Some(r)) => r.dma_len <= 1 << 31,
        (true, None) => false,
    };
    if !len_ok || !reth_ok {
        return fatal(qp, ctx, psn, invalid, inv_status, uses_wqe);
    }

    // 6. R_Key, range and rights (rxe check_rkey; IBTA 1.7 §9.7.4.1.5;
    //    zero-length READ/WRITE need none, C9-88); a WRITE's
    //    packets must add up to its RETH length (rxe checks this here too).
    //    The atomic's alignment is checked once its R_Key passed (rxe
    //    atomic_reply: misaligned → NAK invalid request).
    let access_status = WcStatus::RemAccessErr;
    match info.kind {
        OpKind::Write => {
            if let (Some(r), Position::First | Position::Only) = (&reth, pos) {
                if let Err(e) = check_reth(ctx, qp.pd, r, AccessFlags::REMOTE_WRITE) {
                    return fatal(qp, ctx, psn, access_code(e), access_status, uses_wqe);
                }
                qp.resp.write_va = r.va;
                qp.resp.write_rkey = r.rkey;
                qp.resp.write_remaining = r.dma_len;
                qp.resp.write_len = r.dma_len;
            }
            let ends = matches!(pos, Position::Last | Position::Only);
            if plen > qp.resp.write_remaining || (ends && plen != qp.resp.write_remaining) {
                return fatal(qp, ctx, psn, invalid, inv_status, uses_wqe);
            }
        }
        OpKind::ReadRequest => {
            if let Some(r) = &reth {
                if let Err(e) = check_reth(ctx, qp.pd, r, AccessFlags::REMOTE_READ) {
                    return fatal(qp, ctx, psn, access_code(e), access_status, false);
                }
            }
        }
        OpKind::Atomic => {
            let Some(a) = pkt.ext().atomic_eth() else {
                return fatal(qp, ctx, psn, invalid, inv_status, false);
            };
            if let Err(e) = ctx
                .mrs
                .remote(qp.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            {
                return fatal(qp, ctx, psn, access_code(e), access_status, false);
            }
            if a.va % 8 != 0 {
                return fatal(qp, ctx, psn, invalid, inv_status, false);
            }
        }
        _ => {}
    }

    // 7. Execute (rxe execute).
    let mut ack_wanted = pkt.bth().ack_req;
    match info.kind {
        OpKind::Send => {
            if matches!(pos, Position::First | Position::Only) {
                qp.resp.recv_offset = 0;
            }
            let Some(r) = qp.rq.get(qp.rq.head()).copied() else {
                return rnr(qp, ctx, psn);
            };
            if qp.resp.recv_offset + plen as u64 > r.total_len {
                // rxe send_data_in: -ENOSPC → ERR_LENGTH, LOC_LEN_ERR.
                return fatal(qp, ctx, psn, invalid, WcStatus::LocLenErr, true);
            }
            if scatter(ctx, qp.pd, r.sges(), qp.resp.recv_offset, pkt.payload()).is_err() {
                // Malformed receive WQE (bad lkey, range or rights): class A,
                // NAK remote operational error, LOC_QP_OP_ERR (rxe).
                return fatal(
                    qp,
                    ctx,
                    psn,
                    NakCode::RemoteOpErr,
                    WcStatus::LocQpOpErr,
                    true,
                );
            }
            qp.resp.recv_offset += plen as u64;
            if matches!(pos, Position::Last | Position::Only) {
                qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
                let mut wc = recv_wc(qp.qpn, r.wr_id, WcStatus::Success);
                wc.byte_len = qp.resp.recv_offset as u32;
                wc.src_qp = qp.attr.dest_qp_num;
                if let Some(imm) = pkt.ext().immdt() {
                    wc.imm_data = imm;
                    wc.wc_flags |= WcFlags::WITH_IMM;
                }
                if let Some(rkey) = pkt.ext().ieth() {
                    wc.invalidated_rkey = rkey;
                    wc.wc_flags |= WcFlags::WITH_INV;
                }
                ctx.counters.rdma_recvs += 1;
                ctx.complete(qp.recv_cq, wc);
                qp.rq.pop();
                qp.resp.in_msg = None;
            } else {
                qp.resp.in_msg = Some(MsgKind::Send);
            }
        }
        OpKind::Write => {
            if matches!(pos, Position::First | Position::Only) {
                ctx.counters.rx_write_requests += 1;
            }
            if plen > 0 {
                match ctx.mrs.remote(
                    qp.pd,
                    qp.resp.write_rkey,
                    qp.resp.write_va,
                    plen as u64,
                    AccessFlags::REMOTE_WRITE,
                ) {
                    Ok((mr, r)) => copy_payload(&mut mr.buf.bytes_mut()[r], pkt.payload()),
                    Err(e) => return fatal(qp, ctx, psn, access_code(e), access_status, uses_wqe),
                }
            }
            qp.resp.write_va = qp.resp.write_va.wrapping_add(plen as u64);
            qp.resp.write_remaining -= plen;
            if matches!(pos, Position::Last | Position::Only) {
                qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
                qp.resp.in_msg = None;
                if with_imm {
                    if let Some(r) = qp.rq.get(qp.rq.head()).copied() {
                        let mut wc = recv_wc(qp.qpn, r.wr_id, WcStatus::Success);
                        wc.opcode = WcOpcode::RecvRdmaWithImm;
                        wc.byte_len = qp.resp.write_len;
                        wc.src_qp = qp.attr.dest_qp_num;
                        wc.imm_data = pkt.ext().immdt().unwrap_or(0);
                        wc.wc_flags |= WcFlags::WITH_IMM;
                        ctx.counters.rdma_recvs += 1;
                        ctx.complete(qp.recv_cq, wc);
                        qp.rq.pop();
                    }
                }
            } else {
                qp.resp.in_msg = Some(MsgKind::Write);
            }
        }
        OpKind::ReadRequest => {
            let Some(reth) = reth else {
                return fatal(qp, ctx, psn, invalid, inv_status, false);
            };
            let n = reth.dma_len.div_ceil(pmtu).max(1);
            let last = psn.add(n - 1);
            // C9-148: the MSN counts a READ when its request arrives.
            qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
            qp.resp.push_resource(Resource::Read {
                first: psn,
                last,
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
                msn: qp.resp.msn,
            });
            qp.resp.queue.push_back(RespItem::Read {
                psn,
                last,
                va: reth.va,
                rkey: reth.rkey,
                remaining: reth.dma_len,
                msn: qp.resp.msn,
                first: true,
            });
            ctx.counters.rx_read_requests += 1;
            // The READ moves ePSN past its response PSNs but not `ack_psn`:
            // a later duplicate SEND/WRITE is acknowledged below the READ
            // (rxe read_reply updates `resp.psn` only).
            qp.resp.epsn = last.next();
            return true;
        }
        OpKind::Atomic => {
            let Some(a) = pkt.ext().atomic_eth() else {
                return fatal(qp, ctx, psn, invalid, inv_status, false);
            };
            let orig = match ctx
                .mrs
                .remote(qp.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            {
                Ok((mr, r)) => {
                    let cell = &mut mr.buf.bytes_mut()[r];
                    let mut b = [0u8; 8];
                    b.copy_from_slice(cell);
                    // Host byte order, as rxe and mlx5 in host-endian mode.
                    let cur = u64::from_ne_bytes(b);
                    let new = if pkt.bth().opcode.0 & 0x1F == Opcode::RC_COMPARE_SWAP.0 {
                        if cur == a.compare {
                            a.swap_add
                        } else {
                            cur
                        }
                    } else {
                        cur.wrapping_add(a.swap_add)
                    };
                    cell.copy_from_slice(&new.to_ne_bytes());
                    cur
                }
                Err(e) => return fatal(qp, ctx, psn, access_code(e), access_status, false),
            };
            qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
            qp.resp.push_resource(Resource::Atomic {
                psn,
                orig,
                msn: qp.resp.msn,
            });
            qp.resp.queue.push_back(RespItem::AtomicAck {
                psn,
                orig,
                msn: qp.resp.msn,
            });
            ctx.counters.rx_atomic_requests += 1;
            qp.resp.epsn = psn.next();
            // rxe atomic_reply sets `ack_psn` as execute does.
            qp.resp.ack_psn = qp.resp.epsn;
            qp.resp.ack_msn = qp.resp.msn;
            return true;
        }
        _ => return fatal(qp, ctx, psn, invalid, inv_status, false),
    }
    if !reliable {
        return false;
    }
    qp.resp.epsn = psn.next();
    // rxe execute: `ack_psn` follows every executed SEND/WRITE packet.
    qp.resp.ack_psn = qp.resp.epsn;
    qp.resp.ack_msn = qp.resp.msn;
    qp.resp.pkts_since_ack += 1;
    if ctx.cfg.ack_coalesce > 0 && qp.resp.pkts_since_ack >= ctx.cfg.ack_coalesce {
        ack_wanted = true;
    }
    if ack_wanted {
        qp.resp.pkts_since_ack = 0;
        qp.resp.queue_ack(psn, ACK);
        return true;
    }
    false
}

fn rnr(qp: &mut Qp, ctx: &mut DeviceInner, psn: Psn) -> bool {
    if qp.qp_type == QpType::Uc {
        ctx.counters.rx_no_rwqe += 1;
        drop_uc_message(qp, ctx);
        return false;
    }
    ctx.counters.send_rnr_err += 1;
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

fn duplicate(qp: &mut Qp, ctx: &mut DeviceInner, pkt: &RocePacket<'_>, psn: Psn) -> bool {
    let info = pkt.bth().opcode.info();
    match info.kind {
        OpKind::Send | OpKind::Write => {
            // C9-105 / rxe duplicate_request: ACK again, never re-execute,
            // with the PSN of the last SEND/WRITE/ATOMIC executed (`ack_psn
            // - 1`), not ePSN - 1: when a READ came last, ePSN - 1 is its
            // last response PSN, and an ACK covering it would let a
            // requester complete the READ without its data (Linux
            // 4e4c53df5677).
            let e = qp.resp.ack_psn.sub(1);
            let msn = qp.resp.ack_msn;
            qp.resp.queue_ack_msn(e, ACK, msn);
            true
        }
        OpKind::ReadRequest => {
            let Some(reth) = pkt.ext().reth() else {
                return false;
            };
            let found = qp.resp.resources.iter().find_map(|r| match *r {
                Resource::Read {
                    first,
                    last,
                    va,
                    rkey,
                    len,
                    msn,
                } if psn.at_or_after(first)
                    && last.at_or_after(psn)
                    && rkey == reth.rkey
                    && reth.va >= va
                    && reth.va.wrapping_add(reth.dma_len as u64) <= va.wrapping_add(len as u64) =>
                {
                    Some((first, last, msn))
                }
                _ => None,
            });
            let Some((first, last, msn)) = found else {
                ctx.counters.dup_no_resource += 1;
                return false;
            };
            // rxe duplicate_request / read_reply: a replay from the READ's
            // first PSN starts with READ_RESPONSE_FIRST (or ONLY); one from
            // a later PSN continues the original sequence with MIDDLE ...
            // LAST, which is what rxe's completer accepts after the FIRST or
            // MIDDLE it already has (rxe_comp.c check_ack: a FIRST is taken
            // mid-stream only at the WQE's first PSN). rdmavt/hfi1 restart
            // with FIRST instead; our completer accepts either.
            let restart = RespItem::Read {
                psn,
                last,
                va: reth.va,
                rkey: reth.rkey,
                remaining: reth.dma_len,
                msn,
                first: psn == first,
            };
            // A stream of the same READ still being sent restarts from the
            // duplicate's PSN (rxe: the replay takes over the resource's
            // `cur_psn`) instead of a second stream queuing behind it: the
            // requester discards what it had already given up on.
            let in_flight = qp.resp.queue.iter_mut().find(|i| {
                matches!(i, RespItem::Read { last: l, rkey: k, .. } if *l == last && *k == reth.rkey)
            });
            match in_flight {
                Some(item) => *item = restart,
                None => qp.resp.queue.push_back(restart),
            }
            true
        }
        OpKind::Atomic => {
            let found = qp.resp.resources.iter().find_map(|r| match *r {
                Resource::Atomic { psn: p, orig, msn } if p == psn => Some((orig, msn)),
                _ => None,
            });
            let Some((orig, msn)) = found else {
                ctx.counters.dup_no_resource += 1;
                return false;
            };
            qp.resp
                .queue
                .push_back(RespItem::AtomicAck { psn, orig, msn });
            true
        }
        _ => false,
    }
}

/// Build the next queued response of `qp` into `buf`.
/// Whether the next response of `qp` is ACK-class (ACK, NAK, ATOMIC
/// ACKNOWLEDGE): no bulk data, so the congestion-control pacer lets it pass.
pub(crate) fn next_is_ack(qp: &Qp) -> bool {
    matches!(
        qp.resp.queue.front(),
        Some(RespItem::Ack { .. } | RespItem::AtomicAck { .. })
    )
}

pub(crate) fn produce(qp: &mut Qp, ctx: &mut DeviceInner, buf: &mut [u8]) -> Option<usize> {
    let item = *qp.resp.queue.front()?;
    let pmtu = qp.pmtu;
    let mut ext = ExtHeaders::default();
    let (opcode, psn, payload_len, done, src) = match item {
        RespItem::Ack { psn, syndrome, msn } => {
            ext.aeth = Some(AethRepr { syndrome, msn });
            (Opcode::RC_ACKNOWLEDGE, psn, 0, true, None)
        }
        RespItem::AtomicAck { psn, orig, msn } => {
            ext.aeth = Some(AethRepr { syndrome: ACK, msn });
            ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, 0, true, None)
        }
        RespItem::Read {
            psn,
            last,
            va,
            rkey,
            remaining,
            msn,
            first,
        } => {
            let len = remaining.min(pmtu);
            let is_last = psn == last || remaining <= pmtu;
            let op = match (first, is_last) {
                (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            if first || is_last {
                ext.aeth = Some(AethRepr { syndrome: ACK, msn });
            }
            (op, psn, len, is_last, Some((va, rkey)))
        }
    };
    let bth = BthRepr::new(opcode, qp.attr.dest_qp_num, psn.value());
    let sport = qp.udp_sport;
    let av = qp.attr.ah_attr;
    let (off, repr) = qp.hdrs.emit(
        Dir::Resp,
        &ctx.cfg,
        &mut ctx.ident,
        &av,
        sport,
        bth,
        ext,
        payload_len as usize,
        buf,
    )?;
    // Zero-copy (`Device::poll_transmit_gather`): a READ response from a
    // shared MR is sent by reference, not copied.
    let mut zc = None;
    if let Some((va, rkey)) = src {
        let n = payload_len as usize;
        if ctx.zc.min > 0 && n >= ctx.zc.min {
            if let Ok((mr, r)) = ctx.mrs.remote(
                qp.pd,
                rkey,
                va,
                payload_len as u64,
                AccessFlags::REMOTE_READ,
            ) {
                if let Some(mem) = mr.shared().cloned() {
                    zc = crate::transport::finish_gather(&repr, buf, off, mem, r.start, n);
                }
            }
        }
    }
    if let (Some((va, rkey)), None) = (src, &zc) {
        if payload_len > 0 {
            let out = buf.get_mut(off..off + payload_len as usize)?;
            match ctx.mrs.remote(
                qp.pd,
                rkey,
                va,
                payload_len as u64,
                AccessFlags::REMOTE_READ,
            ) {
                Ok((mr, r)) => copy_payload(out, &mr.buf.bytes()[r]),
                Err(_) => {
                    // The MR went away mid-stream: stop the stream.
                    qp.resp.queue.pop_front();
                    return None;
                }
            }
        }
    }
    let n = if zc.is_some() {
        repr.frame_len(payload_len as usize)
    } else {
        repr.finalize(buf, payload_len as usize).ok()?
    };
    if zc.is_some() {
        ctx.zc.frame = zc;
    }
    if done {
        qp.resp.queue.pop_front();
    } else if let Some(RespItem::Read {
        psn,
        va,
        remaining,
        first,
        ..
    }) = qp.resp.queue.front_mut()
    {
        *psn = psn.next();
        *va = va.wrapping_add(payload_len as u64);
        *remaining -= payload_len;
        *first = false;
    }
    Some(n)
}
