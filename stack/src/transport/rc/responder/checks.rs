//! The responder's checks, in rxe's order (`rxe_resp.c`: `check_psn`,
//! `check_op_seq`, `check_op_valid`, `check_resource`, `check_length`,
//! `check_rkey`), each returning the next step (see the module docs of
//! [`super`] for what each decides).

use super::{nak, MsgKind, Next, Req, RespError};
use crate::resources::inner::DeviceInner;
use crate::resources::mr::AccessError;
use crate::resources::types::AccessFlags;
use crate::transport::qp::Qp;
use crate::wire::ext::{NakCode, RethRepr};
use crate::wire::opcode::{OpKind, Position};

/// Step 1: PSN (rxe `check_psn`).
#[inline(always)]
pub(super) fn check_psn(qp: &mut Qp, ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    let d = r.psn.diff(qp.resp.epsn);
    if r.reliable {
        //= IBTA 1.7 §9.7.4
        //# PSN after ePSN: one sequence-error NAK (carrying ePSN) per gap;
        //# later out-of-sequence packets are dropped silently.
        if d > 0 {
            ctx.counters.out_of_sequence += 1;
            if !qp.resp.nak_sent {
                qp.resp.nak_sent = true;
                ctx.counters.seq_nak_sent += 1;
                let e = qp.resp.epsn;
                qp.resp.queue_ack(e, nak(NakCode::PsnSeqErr));
                return Next::Done(true);
            }
            return Next::Done(false);
        }
        //= IBTA 1.7 §9.7.4
        //# PSN before ePSN: a duplicate; answered, never executed again
        //# (C9-105).
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            return Next::Duplicate;
        }
        qp.resp.nak_sent = false;
    } else {
        //= IBTA 1.7 §9.8.4
        //# UC: a PSN gap breaks the message in progress; the responder
        //# resynchronises on the next FIRST or ONLY.
        if d != 0 {
            ctx.counters.out_of_sequence += 1;
            if qp.resp.in_msg.is_some() {
                super::drop_uc_message(qp, ctx);
            }
            qp.resp.uc_dropping = true;
        }
        qp.resp.epsn = r.psn.next();
        if qp.resp.uc_dropping {
            if matches!(r.pos, Position::First | Position::Only) {
                qp.resp.uc_dropping = false;
                qp.resp.in_msg = None;
                qp.resp.recv_offset = 0;
            } else {
                ctx.counters.uc_dropped += 1;
                return Next::Done(false);
            }
        }
    }
    Next::Continue
}

/// Step 2: Opcode sequence (rxe `check_op_seq`): after FIRST/MIDDLE only
/// MIDDLE/LAST of the same kind; MIDDLE/LAST need a FIRST.
#[inline(always)]
pub(super) fn check_op_seq(qp: &mut Qp, _ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    //= IBTA 1.7 §9.7.4
    //# the opcode sequence of a multi-packet message is FIRST, MIDDLE...,
    //# LAST, of one operation; anything else is an invalid request.
    let seq_ok = match (qp.resp.in_msg, r.pos) {
        (None, Position::First | Position::Only) => true,
        (None, _) => false,
        (Some(k), Position::Middle | Position::Last) => Some(k) == r.kind,
        (Some(_), _) => false,
    };
    if seq_ok {
        Next::Continue
    } else {
        Next::Error(RespError::OpSequence)
    }
}

/// Step 3: QP access rights (rxe `check_op_valid`).
#[inline(always)]
pub(super) fn check_op_valid(qp: &mut Qp, _ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    let need = match r.info.kind {
        OpKind::Write => AccessFlags::REMOTE_WRITE,
        OpKind::ReadRequest => AccessFlags::REMOTE_READ,
        OpKind::Atomic => AccessFlags::REMOTE_ATOMIC,
        OpKind::Send => AccessFlags::empty(),
        _ => return Next::Error(RespError::OpNotAllowed),
    };
    //= IBTA 1.7 §10.6.3.1
    //# remote access rights: a QP accepts RDMA WRITE, READ and ATOMIC
    //# requests only when its access flags enable them.
    if !qp.attr.qp_access_flags.contains(need) {
        return Next::Error(RespError::OpNotAllowed);
    }
    Next::Continue
}

/// Step 4: Resources (rxe `check_resource`): a SEND (FIRST/ONLY takes the head
/// receive WQE, MIDDLE/LAST keep using it) or a WRITE with immediate needs a
/// receive WQE, else an RNR NAK and no state change; a READ or ATOMIC needs
/// responder resources (`max_dest_rd_atomic` > 0), else NAK invalid
/// request.
#[inline(always)]
pub(super) fn check_resource(qp: &mut Qp, _ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    r.with_imm = r.pkt.ext().immdt().is_some();
    let uses_wqe = r.kind == Some(MsgKind::Send) || (r.kind == Some(MsgKind::Write) && r.with_imm);
    if uses_wqe && qp.rq.len() == 0 {
        return Next::Rnr;
    }
    if matches!(r.info.kind, OpKind::ReadRequest | OpKind::Atomic)
        && qp.attr.max_dest_rd_atomic == 0
    {
        return Next::Error(RespError::NoResources);
    }
    r.wqe_taken = uses_wqe;
    Next::Continue
}

/// Step 5: Length (rxe `check_length`; BTH PadCnt, IBTA 1.7 §9.2): the payload
/// and its pad bytes fill whole 4-byte words; FIRST/MIDDLE carry exactly
/// PMTU bytes and no pad, LAST 1..=PMTU, ONLY 0..=PMTU; a RETH DMA length
/// is at most 2^31.
#[inline(always)]
pub(super) fn check_length(qp: &mut Qp, _ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    let plen = r.pkt.payload().len() as u32;
    let pad = u32::from(r.pkt.pad());
    let pmtu = qp.pmtu;
    r.plen = plen;
    //= IBTA 1.7 §9.2
    //# PadCnt: the pad bytes that make the payload a whole number of 4-byte
    //# words; FIRST and MIDDLE packets carry exactly PMTU bytes.
    let len_ok = (plen + pad) % 4 == 0
        && match (r.kind, r.pos) {
            (None, _) => true,
            (Some(_), Position::First | Position::Middle) => plen == pmtu && pad == 0,
            (Some(_), Position::Last) => plen >= 1 && plen <= pmtu,
            (Some(_), Position::Only) => plen <= pmtu,
        };
    r.reth = r.pkt.ext().reth();
    let reth_needed = matches!(r.info.kind, OpKind::ReadRequest)
        || (r.kind == Some(MsgKind::Write) && matches!(r.pos, Position::First | Position::Only));
    // A message is at most 2^31 bytes (CASES R10, R24 c).
    let reth_ok = match (reth_needed, &r.reth) {
        (false, _) => true,
        (true, Some(h)) => h.dma_len <= 1 << 31,
        (true, None) => false,
    };
    if !len_ok || !reth_ok {
        return Next::Error(RespError::Length);
    }
    Next::Continue
}

/// R_Key, range and rights of a RETH (IBTA 1.7 §9.7.4.1.5); a zero-length
/// READ/WRITE needs none (C9-88).
fn check_reth(
    ctx: &mut DeviceInner,
    pd: u32,
    reth: &RethRepr,
    need: AccessFlags,
) -> Result<(), AccessError> {
    //= IBTA 1.7 §9.7.4.1.5
    //# C9-88: an RDMA READ or WRITE of length zero checks no R_Key.
    if reth.dma_len == 0 {
        return Ok(());
    }
    //= IBTA 1.7 §9.7.4.1.5
    //# C9-86, C9-87: the R_Key names a region of the QP's protection
    //# domain that holds the whole range and grants the access.
    ctx.mrs
        .remote(pd, reth.rkey, reth.va, reth.dma_len as u64, need)
        .map(|_| ())
}

/// Step 6: R_Key, range and rights (rxe `check_rkey`; IBTA 1.7 §9.7.4.1.5;
/// zero-length READ/WRITE need none, C9-88); a WRITE's packets must add up
/// to its RETH length (rxe checks this here too). The atomic's alignment is
/// checked once its R_Key passed (rxe `atomic_reply`: misaligned → NAK
/// invalid request).
#[inline(always)]
pub(super) fn check_rkey(qp: &mut Qp, ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    match r.info.kind {
        OpKind::Write => {
            if let (Some(h), Position::First | Position::Only) = (&r.reth, r.pos) {
                if check_reth(ctx, qp.pd, h, AccessFlags::REMOTE_WRITE).is_err() {
                    return Next::Error(RespError::RKey);
                }
                qp.resp.write_va = h.va;
                qp.resp.write_rkey = h.rkey;
                qp.resp.write_remaining = h.dma_len;
                qp.resp.write_len = h.dma_len;
            }
            let ends = matches!(r.pos, Position::Last | Position::Only);
            if r.plen > qp.resp.write_remaining || (ends && r.plen != qp.resp.write_remaining) {
                return Next::Error(RespError::WriteLength);
            }
        }
        OpKind::ReadRequest => {
            if let Some(h) = &r.reth {
                if check_reth(ctx, qp.pd, h, AccessFlags::REMOTE_READ).is_err() {
                    return Next::Error(RespError::RKey);
                }
            }
        }
        OpKind::Atomic => {
            let Some(a) = r.pkt.ext().atomic_eth() else {
                return Next::Error(RespError::MissingAtomicEth);
            };
            if ctx
                .mrs
                .remote(qp.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
                .is_err()
            {
                return Next::Error(RespError::RKey);
            }
            // An ATOMIC's address is 8-byte aligned (rxe `atomic_reply`).
            if a.va % 8 != 0 {
                return Next::Error(RespError::Misaligned);
            }
        }
        _ => {}
    }
    Next::Continue
}
