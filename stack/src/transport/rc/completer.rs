//! RC completer (IBTA 1.7 §9.7.5.1 and §9.9; rxe `rxe_comp.c`): handles ACKs,
//! NAKs, READ responses and ATOMIC ACKNOWLEDGEs, and the ACK and RNR timers.
//!
//! - Only responses for PSNs in `[comp.psn, req.psn)` count: anything older
//!   is a duplicate or a ghost from before a retry or a QP re-creation
//!   (`resp_duplicate`, CASES R22), anything newer was never sent
//!   (`resp_unexpected`).
//! - ACKs are cumulative: an ACK (or any response or NAK) for PSN P
//!   acknowledges every earlier PSN. SEND/WRITE WQEs whose last PSN is covered
//!   complete in posting order (CASES R14); an ACK that covers an unanswered
//!   READ/ATOMIC is an implied NAK and causes a retry (`implied_nak_seq_err`).
//! - Any progress resets `retry_cnt` and `rnr_retry` and re-arms the ACK timer
//!   from now; with nothing outstanding the timer stops, so an idle QP has no
//!   timer (CASES R16).
//! - ACK timeout or sequence NAK: if `retry_cnt` is left, decrement it and go
//!   back N; else complete the head WQE with `RETRY_EXC_ERR` and enter ERR
//!   (after `retry_cnt` + 1 timeouts when the peer is gone). The IBTA's
//!   "7 = infinite" applies only to `rnr_retry` (rxe also treats `retry_cnt`
//!   7 as infinite; we follow the IBTA and ConnectX).
//! - A go-back-N started by a response (sequence NAK, implied NAK) is not
//!   started again for the same oldest PSN: the stale packets of the first
//!   attempt (e.g. the rest of a READ response stream with a hole) would each
//!   start one and burn `retry_cnt` (rxe: "don't start another retry sequence,
//!   unless this is a timeout"). The ACK timer still retries.
//! - RNR NAK (CASES R15): wait the coded RNR time, never the ACK timer: the
//!   ACK timer is off during the wait, a sequence NAK or duplicate RNR NAK
//!   received meanwhile does not start a resend, and the go-back to the
//!   oldest unacknowledged PSN happens when the RNR timer fires. An ACK during
//!   the wait completes what it covers; if it covers the NAKed PSN itself the
//!   wait ends at once. `rnr_retry` 7 is infinite, 0 fails at the first RNR
//!   NAK with `RNR_RETRY_EXC_ERR`; n fails at the (n + 1)th RNR NAK in a row.
//!   An RNR NAK does not use up `retry_cnt` (our choice: it restores it, as
//!   any response from a live peer does).
//! - NAK invalid request / remote access / remote operational error (or any
//!   other code): the head WQE completes with `REM_INV_REQ_ERR` /
//!   `REM_ACCESS_ERR` / `REM_OP_ERR` (rxe's mapping, ROCEV2-DIGEST §5), and
//!   the QP enters ERR, flushing the rest in posting order (CASES R18).
//! - A READ response must have the opcode its PSN calls for, exactly the
//!   expected payload (PMTU bytes for FIRST/MIDDLE) and a pad that makes
//!   payload + pad whole 4-byte words (BTH PadCnt, IBTA 1.7 §9.2), else it
//!   is dropped (`resp_unexpected`).
//! - AETH MSN: completion goes by PSN (as in rxe, whose completer never reads
//!   the MSN); the MSN is only checked and counted (`check_msn`): backwards
//!   against an earlier response (`resp_msn_backwards`), or beyond the
//!   messages sent (`resp_msn_skipped`). The requester numbers its messages
//!   as it starts them (`req.ssn`; the first WQE is SSN 1, the responder's
//!   MSN starts at 0: MindShare, *InfiniBand Network Architecture* ch. 17).
//! - `rdma_sends` counts SEND WQEs as they complete successfully (rxe's
//!   completer counts every SEND WQE it completes, errors included).

use crate::resources::inner::DeviceInner;
use crate::resources::timers::TimerKind;
use crate::resources::types::{QpState, WcStatus};
use crate::resources::wr::WrOpcode;
use crate::time::Instant;
use crate::transport::psn::Psn;
use crate::transport::qp::Qp;
use crate::transport::rc::requester::go_back;
use crate::transport::{ack_timeout, fail_head, scatter, send_wc};
use crate::wire::ext::{rnr_timer, AethSyndrome, NakCode};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::RocePacket;

/// Completer progress (rxe `qp->comp`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CompState {
    /// Oldest PSN not yet acknowledged.
    pub psn: Psn,
    /// Retries left after timeouts and sequence NAKs.
    pub retry_cnt: u8,
    /// RNR retries left (7 = infinite).
    pub rnr_retry: u8,
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

/// Outcome of applying a cumulative acknowledgement.
enum AckResult {
    /// Acknowledged as far as it went.
    Done,
    /// The acknowledgement skipped an unanswered READ/ATOMIC.
    ImpliedNak,
}

/// Complete every WQE whose PSNs are all at or before `p`; `comp.psn` moves past
/// what was acknowledged.
fn ack_up_to(qp: &mut Qp, ctx: &mut DeviceInner, p: Psn) -> AckResult {
    let mut result = AckResult::Done;
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
        //= IBTA 1.7 §9.7.5.1
        //# an acknowledgement that covers an unanswered RDMA READ or ATOMIC
        //# is an implied NAK: the requester retries the READ or ATOMIC.
        if w.opcode.is_rd_atomic() {
            result = AckResult::ImpliedNak;
            break;
        }
        let last = w.last_psn();
        if p.at_or_after(last) && w.sent {
            if w.opcode.is_send() {
                ctx.counters.rdma_sends += 1;
            }
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
    // Never leave the requester pointing at a completed WQE.
    if qp.req.wqe < qp.sq.head() {
        qp.req.wqe = qp.sq.head();
        qp.req.offset = 0;
    }
    result
}

/// After progress: reset the retry counters and re-arm or stop the ACK timer.
fn progress(qp: &mut Qp, ctx: &mut DeviceInner, now: Instant) {
    qp.comp.retry_cnt = qp.attr.retry_cnt;
    qp.comp.rnr_retry = qp.attr.rnr_retry;
    rearm(qp, ctx, now);
}

/// Restart the ACK timer from `now` while PSNs are outstanding; stop it when
/// none are (CASES R16: a timer is never left running over nothing) and
/// during an RNR wait (CASES R15: only the RNR timer may trigger the resend).
fn rearm(qp: &mut Qp, ctx: &mut DeviceInner, now: Instant) {
    let outstanding = qp.req.psn != qp.comp.psn;
    let at = match ack_timeout(qp.attr.timeout) {
        Some(t) if outstanding && !qp.timers.is_armed(TimerKind::Rnr) => Some(now + t),
        _ => None,
    };
    qp.set_timer(&mut ctx.timers, TimerKind::Ack, at);
}

/// A go-back-N triggered by a response (sequence NAK, implied NAK) rather
/// than by the ACK timer: skipped when one from the same oldest PSN is
/// already under way (rxe: "if we've started a retry, don't start another
/// retry sequence, unless this is a timeout").
///
/// `implied`: the trigger is an implied NAK (a response that skipped an
/// unanswered READ/ATOMIC or a lost READ response); `implied_nak_seq_err`
/// counts the retries it starts, not every stale response behind one.
fn fast_retry(qp: &mut Qp, ctx: &mut DeviceInner, implied: bool) -> bool {
    if qp.comp.retry_from == Some(qp.comp.psn) {
        ctx.counters.resp_duplicate += 1;
        return false;
    }
    if implied {
        ctx.counters.implied_nak_seq_err += 1;
    }
    retry(qp, ctx)
}

/// Retry after a timeout, a sequence NAK or an implied NAK.
fn retry(qp: &mut Qp, ctx: &mut DeviceInner) -> bool {
    //= IBTA 1.7 §9.7.6.1.3
    //# retry_cnt bounds the retries after timeouts and sequence NAKs;
    //# exhausted, the WQE completes with a retry-exceeded error.
    // 7 is a count here, not "infinite" (stack/COMPLIANCE.md).
    if qp.comp.retry_cnt == 0 {
        ctx.counters.retry_exceeded_err += 1;
        fail_head(qp, ctx, WcStatus::RetryExcErr);
        return true;
    }
    qp.comp.retry_cnt -= 1;
    qp.comp.retry_from = Some(qp.comp.psn);
    go_back(qp);
    // The requester re-arms the timer when it resends.
    qp.set_timer(&mut ctx.timers, TimerKind::Ack, None);
    true
}

/// Check the AETH MSN of a response (in the window) that counts the
/// messages completed through PSN `p` against the previous one and the
/// messages sent; count, never drop: the MSN is advisory for a requester
/// that completes by PSN (rxe's completer does not read it either).
///
/// - `resp_msn_backwards`: `msn` is before the MSN of a response that
///   counted through the same or an earlier PSN. The count through a PSN
///   never shrinks, so a responder whose every answer (duplicates' included)
///   carries the count as of the request it answers, as ours does, never
///   causes this, whatever the network reorders; a response through an
///   earlier PSN than the last one (the answer to a retry) is not compared.
///   A responder that puts its current MSN into replays (rxe, rdmavt) can
///   cause it when an older response arrives after a replay.
/// - `resp_msn_skipped`: `msn` counts more messages than were started
///   (`req.ssn`): the responder's MSN starts at 0 when its QP is created or
///   reset (rxe `rxe_qp_init_resp`; MindShare, *InfiniBand Network
///   Architecture*, ch. 17 "Initial State of MSN and SSN") and grows by one
///   per completed message, so it can never pass the SSN of the last message
///   sent.
fn check_msn(qp: &mut Qp, ctx: &mut DeviceInner, p: Psn, msn: u32) {
    let m = Psn::new(msn);
    let later = qp.comp.msn_psn.map_or(true, |lp| p.at_or_after(lp));
    if later && m.before(Psn::new(qp.comp.msn)) {
        ctx.counters.resp_msn_backwards += 1;
    } else if m.diff(Psn::new(qp.req.ssn)) > 0 {
        ctx.counters.resp_msn_skipped += 1;
    }
    qp.comp.msn = m.value();
    qp.comp.msn_psn = Some(p);
}

/// Handle a response packet (ACK/NAK, READ response, ATOMIC ACKNOWLEDGE).
/// Returns whether the QP has something new to send.
pub(crate) fn handle_response(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    now: Instant,
    pkt: &RocePacket<'_>,
) -> bool {
    if qp.state == QpState::Err || qp.state == QpState::Rtr {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let p = Psn::new(pkt.bth().psn);
    //= IBTA 1.7 §9.7.5.1
    //# a response is valid only for a PSN outstanding at the requester:
    //# sent and not yet acknowledged.
    // A response must be for a PSN we sent ...
    if p.at_or_after(qp.req.psn) {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    // ... and not yet acknowledged: anything older is a duplicate or a ghost
    // from before a retry or a QP re-creation (CASES R22), and changes nothing.
    if p.before(qp.comp.psn) {
        ctx.counters.resp_duplicate += 1;
        return false;
    }
    if let Some(aeth) = pkt.ext().aeth() {
        // A NAK (RNR, sequence or error) for PSN p reports the messages
        // completed before p; an ACK or a READ/ATOMIC response those
        // through p.
        let through = match aeth.kind() {
            AethSyndrome::Ack { .. } => p,
            _ => p.sub(1),
        };
        check_msn(qp, ctx, through, aeth.msn);
    }
    let info = pkt.bth().opcode.info();
    match info.kind {
        OpKind::Ack => {
            let Some(aeth) = pkt.ext().aeth() else {
                return false;
            };
            match aeth.kind() {
                //= IBTA 1.7 §9.7.5.1
                //# ACKs are cumulative: an ACK for PSN P acknowledges every
                //# request up to and including P.
                AethSyndrome::Ack { .. } => {
                    let before = qp.comp.psn;
                    match ack_up_to(qp, ctx, p) {
                        AckResult::Done => {
                            if qp.comp.psn != before {
                                if qp.timers.is_armed(TimerKind::Rnr) {
                                    // The NAKed PSN was accepted after all (a
                                    // duplicate copy got through): the wait is
                                    // moot; resend what follows it now.
                                    qp.set_timer(&mut ctx.timers, TimerKind::Rnr, None);
                                    go_back(qp);
                                }
                                progress(qp, ctx, now);
                            }
                            true
                        }
                        AckResult::ImpliedNak => fast_retry(qp, ctx, true),
                    }
                }
                //= IBTA 1.7 §9.7.5.2.8
                //# RNR NAK: wait the coded time, then resend from the NAKed
                //# PSN; rnr_retry 7 retries without limit.
                AethSyndrome::RnrNak { timer } => {
                    ctx.counters.rcvd_rnr_err += 1;
                    if qp.timers.is_armed(TimerKind::Rnr) {
                        // Already waiting (a duplicated NAK): one wait per RNR.
                        ctx.counters.resp_duplicate += 1;
                        return false;
                    }
                    // The NAK acknowledges every earlier PSN.
                    if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                        return fast_retry(qp, ctx, true);
                    }
                    // A response from a live peer: the transport retry count
                    // starts afresh; RNR retries have their own count.
                    qp.comp.retry_cnt = qp.attr.retry_cnt;
                    if qp.comp.rnr_retry == 0 {
                        ctx.counters.rnr_nak_retry_err += 1;
                        fail_head(qp, ctx, WcStatus::RnrRetryExcErr);
                        return true;
                    }
                    if qp.comp.rnr_retry != 7 {
                        qp.comp.rnr_retry -= 1;
                    }
                    // Wait the coded time; the ACK timer stays off meanwhile and
                    // the go-back happens when the RNR timer fires.
                    qp.set_timer(&mut ctx.timers, TimerKind::Ack, None);
                    qp.set_timer(
                        &mut ctx.timers,
                        TimerKind::Rnr,
                        Some(now + rnr_timer(timer)),
                    );
                    true
                }
                //= IBTA 1.7 §9.7.5.2.2
                //# sequence error NAK: the responder expects the NAK's PSN;
                //# resend from it (go back N).
                AethSyndrome::Nak(NakCode::PsnSeqErr) => {
                    ctx.counters.packet_seq_err += 1;
                    let before = qp.comp.psn;
                    let implied = ack_up_to(qp, ctx, p.sub(1));
                    if qp.timers.is_armed(TimerKind::Rnr) {
                        // The RNR wait already goes back to the oldest
                        // unacknowledged PSN when it ends; resending now would
                        // cut the wait short (CASES R15 a).
                        if qp.comp.psn != before {
                            qp.comp.retry_cnt = qp.attr.retry_cnt;
                        }
                        return true;
                    }
                    let was_implied = matches!(implied, AckResult::ImpliedNak);
                    if !was_implied && qp.comp.psn != before {
                        qp.comp.retry_cnt = qp.attr.retry_cnt;
                        qp.comp.rnr_retry = qp.attr.rnr_retry;
                    }
                    fast_retry(qp, ctx, was_implied)
                }
                AethSyndrome::Nak(code) => {
                    if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                        // An earlier READ/ATOMIC is unanswered: it is the head
                        // and must be resolved first (rxe retries it too).
                        return fast_retry(qp, ctx, true);
                    }
                    //= IBTA 1.7 §9.7.5.2.2
                    //# NAK codes invalid request, remote access error and
                    //# remote operational error are fatal: the WQE completes
                    //# in error and the QP enters the error state.
                    // rxe's mapping (ROCEV2-DIGEST §5): 0x61 → REM_INV_REQ_ERR,
                    // 0x62 → REM_ACCESS_ERR, 0x63 and anything else → REM_OP_ERR.
                    let status = match code {
                        NakCode::InvalidRequest => {
                            ctx.counters.req_remote_invalid_request += 1;
                            WcStatus::RemInvReqErr
                        }
                        NakCode::RemoteAccessErr => {
                            ctx.counters.req_remote_access_errors += 1;
                            WcStatus::RemAccessErr
                        }
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
            if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
                // Only the atomic itself may be unanswered here.
                let head_is_it = qp
                    .sq
                    .get(qp.sq.head())
                    .is_some_and(|w| w.started && w.first_psn == p);
                if !head_is_it {
                    return fast_retry(qp, ctx, true);
                }
            }
            let head = qp.sq.head();
            let ok = qp
                .sq
                .get(head)
                .is_some_and(|w| w.opcode.is_atomic() && w.started && w.first_psn == p);
            let Some(orig) = pkt.ext().atomic_ack_eth().map(|a| a.orig) else {
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
            if qp.req.wqe < qp.sq.head() {
                qp.req.wqe = qp.sq.head();
                qp.req.offset = 0;
            }
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
    ctx: &mut DeviceInner,
    now: Instant,
    pkt: &RocePacket<'_>,
    p: Psn,
) -> bool {
    // Everything before this PSN is implicitly acknowledged.
    if p != qp.comp.psn {
        if let AckResult::ImpliedNak = ack_up_to(qp, ctx, p.sub(1)) {
            // Responses for a READ went missing (or an earlier READ/ATOMIC is
            // unanswered): resend from the oldest unacknowledged PSN.
            return fast_retry(qp, ctx, true);
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
    let pos = pkt.bth().opcode.info().position;
    let at_last = p == last_psn;
    let pos_ok = match pos {
        Position::Only | Position::Last => at_last,
        Position::First | Position::Middle => !at_last,
    };
    //= IBTA 1.7 §9.2
    //# PadCnt: the pad bytes that make the payload a whole number of 4-byte
    //# words; FIRST and MIDDLE packets carry exactly PMTU bytes.
    // So FIRST/MIDDLE have PadCnt 0.
    let words = (pkt.payload().len() + usize::from(pkt.pad())) % 4 == 0;
    if !pos_ok || pkt.payload().len() != expect as usize || !words {
        ctx.counters.resp_unexpected += 1;
        return false;
    }
    let sges = w.sges;
    let n = w.num_sge;
    if scatter(ctx, qp.pd, &sges[..n], offset as u64, pkt.payload()).is_err() {
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

/// Timer `kind` of `qp` has expired at `now` (the device has already removed
/// it). Returns whether the QP should be polled for transmission.
pub(crate) fn on_timer(qp: &mut Qp, ctx: &mut DeviceInner, kind: TimerKind) -> bool {
    if qp.state == QpState::Err {
        return false;
    }
    match kind {
        TimerKind::Ack => {
            if qp.timers.is_armed(TimerKind::Rnr) || qp.req.psn == qp.comp.psn {
                return false;
            }
            ctx.counters.local_ack_timeout_err += 1;
            retry(qp, ctx)
        }
        TimerKind::Rnr => {
            // The RNR wait is over: resend from the oldest unacknowledged PSN.
            go_back(qp);
            true
        }
        // The reaction point's and the pacer's timers are the device's.
        TimerKind::Rp | TimerKind::Pacer => false,
    }
}
