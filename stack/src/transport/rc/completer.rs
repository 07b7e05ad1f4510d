//! RC completer (IBTA 1.7 §9.7.5.1 and §9.9; rxe `rxe_comp.c`): handles ACKs,
//! NAKs, READ responses and ATOMIC ACKNOWLEDGEs, and the ACK and RNR timers.
//!
//! - ACKs are cumulative: an ACK (or any response) for PSN P acknowledges every
//!   earlier PSN. SEND/WRITE WQEs whose last PSN is covered complete in posting
//!   order; an ACK that covers an unanswered READ/ATOMIC is an implied NAK and
//!   causes a retry (`implied_nak_seq_err`).
//! - Any progress resets `retry_cnt` and `rnr_retry` and re-arms the ACK timer;
//!   with nothing outstanding the timer stops (CASES R16).
//! - ACK timeout or sequence NAK: if `retry_cnt` is left, decrement it and go
//!   back N; else complete the head WQE with `RETRY_EXC_ERR` and enter ERR. The
//!   IBTA's "7 = infinite" applies only to `rnr_retry` (rxe also treats
//!   `retry_cnt` 7 as infinite; we follow the IBTA and ConnectX).
//! - RNR NAK: wait the coded RNR time (never the ACK timer), then go back N;
//!   `rnr_retry` 7 is infinite, 0 fails at once with `RNR_RETRY_EXC_ERR`
//!   (CASES R15).
//! - NAK invalid request / remote access / remote operational error: the head
//!   WQE completes with `REM_INV_REQ_ERR` / `REM_ACCESS_ERR` / `REM_OP_ERR`, and
//!   the QP enters ERR, flushing the rest (CASES R18).

use crate::time::Instant;
use crate::transport::psn::Psn;
use crate::transport::rc::requester::go_back;
use crate::transport::{ack_timeout, fail_head, scatter, send_wc};
use crate::verbs::device::{Ctx, TimerKind};
use crate::verbs::qp::Qp;
use crate::verbs::types::{QpState, WcStatus};
use crate::verbs::wr::WrOpcode;
use crate::wire::ext::{rnr_timer, AethSyndrome, NakCode};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::RocePacket;

/// Outcome of applying a cumulative acknowledgement.
enum AckResult {
    /// Acknowledged as far as it went.
    Done,
    /// The acknowledgement skipped an unanswered READ/ATOMIC.
    ImpliedNak,
}

/// Complete every WQE whose PSNs are all at or before `p`; `comp.psn` moves past
/// what was acknowledged.
fn ack_up_to(qp: &mut Qp, ctx: &mut Ctx<'_>, p: Psn) -> AckResult {
    loop {
        let head = qp.sq.head();
        if head >= qp.req.wqe && qp.req.offset == 0 {
            // Nothing sent beyond this point.
            break;
        }
        let Some(w) = qp.sq.get(head) else { break };
        if !w.started || p.before(w.first_psn) {
            break;
        }
        if w.opcode.is_rd_atomic() {
            return AckResult::ImpliedNak;
        }
        let last = w.last_psn();
        if p.at_or_after(last) && w.sent {
            if w.signaled() {
                let wc = send_wc(qp.qpn, w, WcStatus::Success);
                ctx.complete(qp.send_cq, wc);
            }
            qp.comp.psn = last.next();
            qp.sq.pop();
        } else {
            if p.next().diff(qp.comp.psn) > 0 {
                qp.comp.psn = p.next();
            }
            break;
        }
    }
    AckResult::Done
}

/// After progress: reset the retry counters and re-arm or stop the ACK timer.
fn progress(qp: &mut Qp, ctx: &mut Ctx<'_>, now: Instant) {
    qp.comp.retry_cnt = qp.attr.retry_cnt;
    qp.comp.rnr_retry = qp.attr.rnr_retry;
    rearm(qp, ctx, now);
}

fn rearm(qp: &mut Qp, ctx: &mut Ctx<'_>, now: Instant) {
    let outstanding = qp.req.psn != qp.comp.psn;
    qp.comp.ack_deadline = match (outstanding, ack_timeout(qp.attr.timeout)) {
        (true, Some(t)) => {
            let at = now + t;
            // The queued heap entry (if earlier) re-queues itself when it fires.
            if qp.comp.ack_deadline.is_none() {
                ctx.arm(at, qp.qpn, TimerKind::Ack);
            }
            Some(at)
        }
        _ => None,
    };
}

/// Retry after a timeout, a sequence NAK or an implied NAK.
fn retry(qp: &mut Qp, ctx: &mut Ctx<'_>, now: Instant) -> bool {
    if qp.comp.retry_cnt == 0 {
        ctx.counters.retry_exceeded_err += 1;
        fail_head(qp, ctx, WcStatus::RetryExcErr);
        return true;
    }
    qp.comp.retry_cnt -= 1;
    go_back(qp);
    qp.comp.ack_deadline = None;
    rearm(qp, ctx, now);
    true
}

/// Handle a response packet (ACK/NAK, READ response, ATOMIC ACKNOWLEDGE).
/// Returns whether the QP has something new to send.
pub(crate) fn handle_response(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    now: Instant,
    pkt: &RocePacket<'_>,
) -> bool {
    if qp.state == QpState::Err || qp.state == QpState::Rtr {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let p = Psn::new(pkt.bth.psn);
    // A response must be for a PSN we sent.
    if p.at_or_after(qp.req.psn) {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let info = pkt.bth.opcode.info();
    match info.kind {
        OpKind::Ack => {
            let Some(aeth) = pkt.ext.aeth else {
                return false;
            };
            match aeth.kind() {
                AethSyndrome::Ack { .. } => {
                    if p.before(qp.comp.psn.sub(1)) && qp.comp.psn != qp.req.psn {
                        // An old ACK: nothing new.
                        ctx.counters.resp_duplicate += 1;
                        return false;
                    }
                    let before = qp.comp.psn;
                    match ack_up_to(qp, ctx, p) {
                        AckResult::Done => {
                            if qp.comp.psn != before {
                                progress(qp, ctx, now);
                            }
                            true
                        }
                        AckResult::ImpliedNak => {
                            ctx.counters.implied_nak_seq_err += 1;
                            retry(qp, ctx, now)
                        }
                    }
                }
                AethSyndrome::RnrNak { timer } => {
                    ctx.counters.rcvd_rnr_err += 1;
                    if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                        ctx.counters.implied_nak_seq_err += 1;
                        return retry(qp, ctx, now);
                    }
                    if qp.comp.rnr_retry == 0 {
                        ctx.counters.rnr_nak_retry_err += 1;
                        fail_head(qp, ctx, WcStatus::RnrRetryExcErr);
                        return true;
                    }
                    if qp.comp.rnr_retry != 7 {
                        qp.comp.rnr_retry -= 1;
                    }
                    qp.comp.retry_cnt = qp.attr.retry_cnt;
                    qp.comp.ack_deadline = None;
                    let at = now + rnr_timer(timer);
                    qp.comp.rnr_deadline = Some(at);
                    ctx.arm(at, qp.qpn, TimerKind::Rnr);
                    go_back(qp);
                    false
                }
                AethSyndrome::Nak(NakCode::PsnSeqErr) => {
                    ctx.counters.packet_seq_err += 1;
                    if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                        ctx.counters.implied_nak_seq_err += 1;
                    }
                    retry(qp, ctx, now)
                }
                AethSyndrome::Nak(code) => {
                    let _ = ack_up_to(qp, ctx, p.sub(1));
                    let status = match code {
                        NakCode::InvalidRequest => {
                            ctx.counters.req_remote_invalid_request += 1;
                            WcStatus::RemInvReqErr
                        }
                        NakCode::RemoteAccessErr => {
                            ctx.counters.req_remote_access_errors += 1;
                            WcStatus::RemAccessErr
                        }
                        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                        _ => {
                            ctx.counters.req_remote_operational_error += 1;
                            WcStatus::RemOpErr
                        }
                    };
                    fail_head(qp, ctx, status);
                    true
                }
                AethSyndrome::Reserved(_) => {
                    ctx.counters.resp_unexpected += 1;
                    false
                }
            }
        }
        OpKind::ReadResponse => read_response(qp, ctx, now, pkt, p),
        OpKind::AtomicAck => {
            if p.before(qp.comp.psn) {
                ctx.counters.resp_duplicate += 1;
                return false;
            }
            if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                // Only the atomic itself may be unanswered here.
                let head_is_it = qp
                    .sq
                    .get(qp.sq.head())
                    .is_some_and(|w| w.started && w.first_psn == p);
                if !head_is_it {
                    ctx.counters.implied_nak_seq_err += 1;
                    return retry(qp, ctx, now);
                }
            }
            let head = qp.sq.head();
            let ok = qp
                .sq
                .get(head)
                .is_some_and(|w| w.opcode.is_atomic() && w.started && w.first_psn == p);
            let Some(orig) = pkt.ext.atomic_ack_eth.map(|a| a.orig) else {
                return false;
            };
            if !ok {
                ctx.counters.resp_unexpected += 1;
                return false;
            }
            // The original value is stored in host byte order (ROCEV2-DIGEST §5).
            let (sges, n) = {
                let w = qp.sq.get(head).map(|w| (w.sges, w.num_sge));
                match w {
                    Some(x) => x,
                    None => return false,
                }
            };
            if scatter(ctx, qp.pd, &sges[..n], 0, &orig.to_ne_bytes()).is_err() {
                fail_head(qp, ctx, WcStatus::LocProtErr);
                return true;
            }
            if let Some(w) = qp.sq.get(head) {
                if w.signaled() {
                    let wc = send_wc(qp.qpn, w, WcStatus::Success);
                    ctx.complete(qp.send_cq, wc);
                }
            }
            qp.sq.pop();
            qp.comp.psn = p.next();
            progress(qp, ctx, now);
            true
        }
        _ => {
            ctx.counters.resp_unexpected += 1;
            false
        }
    }
}

fn read_response(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    now: Instant,
    pkt: &RocePacket<'_>,
    p: Psn,
) -> bool {
    if p.before(qp.comp.psn) {
        ctx.counters.resp_duplicate += 1;
        return false;
    }
    // Everything before this PSN is implicitly acknowledged.
    if p != qp.comp.psn {
        if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
            // Responses for a READ went missing (or an earlier READ/ATOMIC is
            // unanswered): resend from the oldest unacknowledged PSN.
            ctx.counters.implied_nak_seq_err += 1;
            return retry(qp, ctx, now);
        }
    }
    let head = qp.sq.head();
    let pmtu = qp.pmtu;
    let Some(w) = qp.sq.get(head) else {
        ctx.counters.resp_unexpected += 1;
        return false;
    };
    if w.opcode != WrOpcode::RdmaRead || !w.started || p != qp.comp.psn {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let last_psn = w.last_psn();
    if last_psn.before(p) {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let idx = p.diff(w.first_psn) as u32;
    let offset = idx.saturating_mul(pmtu);
    let expect = w.total_len.saturating_sub(offset).min(pmtu);
    let pos = pkt.bth.opcode.info().position;
    let at_last = p == last_psn;
    let pos_ok = match pos {
        Position::Only | Position::Last => at_last,
        Position::First | Position::Middle => !at_last,
    };
    if !pos_ok || pkt.payload.len() != expect as usize {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let sges = w.sges;
    let n = w.num_sge;
    if scatter(ctx, qp.pd, &sges[..n], offset as u64, pkt.payload).is_err() {
        fail_head(qp, ctx, WcStatus::LocProtErr);
        return true;
    }
    qp.comp.psn = p.next();
    if at_last {
        if let Some(w) = qp.sq.get(head) {
            if w.signaled() {
                let wc = send_wc(qp.qpn, w, WcStatus::Success);
                ctx.complete(qp.send_cq, wc);
            }
        }
        qp.sq.pop();
    }
    progress(qp, ctx, now);
    true
}

/// A timer entry queued for `at` has come due. Returns whether the QP should
/// be polled for transmission.
pub(crate) fn on_timer(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    now: Instant,
    kind: TimerKind,
    at: Instant,
) -> bool {
    let _ = at;
    if qp.state == QpState::Err {
        return false;
    }
    match kind {
        TimerKind::Ack => match qp.comp.ack_deadline {
            Some(d) if d <= now => {
                qp.comp.ack_deadline = None;
                ctx.counters.local_ack_timeout_err += 1;
                retry(qp, ctx, now)
            }
            Some(d) => {
                // Re-armed since this entry was queued: queue the real deadline.
                ctx.arm(d, qp.qpn, TimerKind::Ack);
                false
            }
            None => false,
        },
        TimerKind::Rnr => match qp.comp.rnr_deadline {
            Some(d) if d <= now => {
                qp.comp.rnr_deadline = None;
                go_back(qp);
                true
            }
            _ => false,
        },
    }
}
