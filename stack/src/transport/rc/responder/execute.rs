//! EXECUTE (rxe `execute`, `read_reply`, `atomic_reply`) and the answers
//! to duplicates (rxe `duplicate_request`).

use super::{MsgKind, Next, Req, Resource, RespError, RespItem, ACK};
use crate::resources::inner::DeviceInner;
use crate::resources::types::{AccessFlags, WcStatus};
use crate::resources::wr::{WcFlags, WcOpcode};
use crate::transport::psn::Psn;
use crate::transport::qp::Qp;
use crate::transport::{copy_payload, recv_wc, scatter};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::{Opcode, RocePacket};

/// Step 7: Execute a request that passed every check.
#[inline(always)]
pub(super) fn execute(qp: &mut Qp, ctx: &mut DeviceInner, r: &mut Req<'_, '_>) -> Next {
    let next = match r.info.kind {
        OpKind::Send => execute_send(qp, ctx, r),
        OpKind::Write => execute_write(qp, ctx, r),
        OpKind::ReadRequest => return read(qp, ctx, r),
        OpKind::Atomic => return atomic(qp, ctx, r),
        _ => return Next::Error(RespError::OpNotAllowed),
    };
    if next != Next::Continue {
        return next;
    }
    if !r.reliable {
        return Next::Done(false);
    }
    qp.resp.epsn = r.psn.next();
    // rxe execute: `ack_psn` follows every executed SEND/WRITE packet.
    qp.resp.ack_psn = qp.resp.epsn;
    qp.resp.ack_msn = qp.resp.msn;
    qp.resp.pkts_since_ack += 1;
    //= IBTA 1.7 §9.7.5.1.1
    //# the responder acknowledges a packet that has AckReq set; it may
    //# acknowledge others (coalescing, CASES R14).
    let ack_wanted = r.pkt.bth().ack_req
        || (ctx.cfg.ack_coalesce > 0 && qp.resp.pkts_since_ack >= ctx.cfg.ack_coalesce);
    if ack_wanted {
        qp.resp.pkts_since_ack = 0;
        qp.resp.queue_ack(r.psn, ACK);
        return Next::Done(true);
    }
    Next::Done(false)
}

/// A SEND packet into the head receive WQE.
#[inline(always)]
fn execute_send(qp: &mut Qp, ctx: &mut DeviceInner, r: &Req<'_, '_>) -> Next {
    let pkt = r.pkt;
    if matches!(r.pos, Position::First | Position::Only) {
        qp.resp.recv_offset = 0;
    }
    let Some(w) = qp.rq.get(qp.rq.head()).copied() else {
        return Next::Rnr;
    };
    //= IBTA 1.7 §9.7.4
    //# a SEND longer than its receive buffer is an invalid request; the
    //# receive WQE completes in error (rxe `send_data_in`: LOC_LEN_ERR).
    if qp.resp.recv_offset + r.plen as u64 > w.total_len {
        return Next::Error(RespError::RecvTooLong);
    }
    let head = qp.rq.head();
    if scatter(
        ctx,
        qp.pd,
        qp.rq_sges(head),
        qp.resp.recv_offset,
        pkt.payload(),
    )
    .is_err()
    {
        // Malformed receive WQE (bad lkey, range or rights): class A,
        // NAK remote operational error, LOC_QP_OP_ERR (rxe).
        return Next::Error(RespError::MalformedWqe);
    }
    qp.resp.recv_offset += r.plen as u64;
    if matches!(r.pos, Position::Last | Position::Only) {
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
        let mut wc = recv_wc(qp.qpn, w.wr_id, WcStatus::Success);
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
    Next::Continue
}

/// An RDMA WRITE packet into the region its RETH named.
#[inline(always)]
fn execute_write(qp: &mut Qp, ctx: &mut DeviceInner, r: &Req<'_, '_>) -> Next {
    let pkt = r.pkt;
    let plen = r.plen;
    if matches!(r.pos, Position::First | Position::Only) {
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
            Ok((mr, range)) => copy_payload(&mut mr.buf.bytes_mut()[range], pkt.payload()),
            Err(_) => return Next::Error(RespError::RKey),
        }
    }
    qp.resp.write_va = qp.resp.write_va.wrapping_add(plen as u64);
    qp.resp.write_remaining -= plen;
    if matches!(r.pos, Position::Last | Position::Only) {
        qp.resp.msn = (qp.resp.msn + 1) & 0x00FF_FFFF;
        qp.resp.in_msg = None;
        if r.with_imm {
            if let Some(w) = qp.rq.get(qp.rq.head()).copied() {
                let mut wc = recv_wc(qp.qpn, w.wr_id, WcStatus::Success);
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
    Next::Continue
}

/// An RDMA READ request: saved as a responder resource and queued as a
/// stream of READ responses (rxe `read_reply`).
fn read(qp: &mut Qp, ctx: &mut DeviceInner, r: &Req<'_, '_>) -> Next {
    let Some(reth) = r.reth else {
        return Next::Error(RespError::Length);
    };
    let psn = r.psn;
    let n = reth.dma_len.div_ceil(qp.pmtu).max(1);
    let last = psn.add(n - 1);
    //= IBTA 1.7 §9.7.5.1
    //# C9-148: the MSN counts an RDMA READ when its request arrives.
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
    Next::Done(true)
}

/// An ATOMIC: executed on the 8-byte cell, its original value saved and
/// answered (rxe `atomic_reply`).
fn atomic(qp: &mut Qp, ctx: &mut DeviceInner, r: &Req<'_, '_>) -> Next {
    let pkt = r.pkt;
    let psn = r.psn;
    let Some(a) = pkt.ext().atomic_eth() else {
        return Next::Error(RespError::MissingAtomicEth);
    };
    let orig = match ctx
        .mrs
        .remote(qp.pd, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)
    {
        Ok((mr, range)) => {
            let cell = &mut mr.buf.bytes_mut()[range];
            let mut b = [0u8; 8];
            b.copy_from_slice(cell);
            // Host byte order, as rxe and mlx5 in host-endian mode
            // (stack/COMPLIANCE.md).
            let cur = u64::from_ne_bytes(b);
            let new = if pkt.bth().opcode == Opcode::RC_COMPARE_SWAP {
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
        Err(_) => return Next::Error(RespError::RKey),
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
    Next::Done(true)
}

/// A duplicate request (rxe `duplicate_request`; see the module docs of
/// [`super`], # Duplicates). Returns whether a response is queued.
pub(super) fn duplicate(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    pkt: &RocePacket<'_>,
    psn: Psn,
) -> bool {
    let info = pkt.bth().opcode.info();
    match info.kind {
        //= IBTA 1.7 C9-105
        //# a duplicate SEND or RDMA WRITE is not executed again; the
        //# responder acknowledges it.
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
        //= IBTA 1.7 §9.7.4
        //# a duplicate RDMA READ is executed again from its responder
        //# resource: the same R_Key, inside the original range.
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
        //= IBTA 1.7 §9.7.4
        //# a duplicate ATOMIC is never executed again: the saved original
        //# value is sent again.
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
