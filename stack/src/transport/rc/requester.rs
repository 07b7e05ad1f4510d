//! RC/UC requester (IBTA 1.7 §9.7.3; rxe `rxe_req.c`): segments the WQE at the
//! requester pointer into packets of at most PMTU bytes, one per call.
//!
//! - SEND/WRITE of L bytes use `max(1, ceil(L / PMTU))` PSNs: FIRST/MIDDLE carry
//!   exactly PMTU, LAST 1..=PMTU, ONLY 0..=PMTU; RETH only in WRITE FIRST/ONLY;
//!   ImmDt/IETH only in the last packet (CASES R19, R20).
//! - READ uses one request packet and `max(1, ceil(L / PMTU))` PSNs (its
//!   responses); after a retry it re-requests only the missing tail.
//! - AckReq (IBTA 1.7 §9.2.3: the requester's choice; the responder ACKs
//!   only packets that carry it, §9.7.5.1.1) on the last packet of a message
//!   that needs its ACK soon: a signalled WQE (its completion waits for the
//!   ACK), a READ/ATOMIC, or the last WQE queued (nothing behind it would
//!   ask). The last packet of an unsignalled WQE with more work queued
//!   behind it leaves without it, so a perftest-style stream that signals
//!   one WR in `cq_mod` draws one ACK per signalled WR instead of one per
//!   message (a cumulative ACK completes every WQE before it); rxe sets it
//!   on every message. And at least every `ackreq_interval` packets, which
//!   bounds the unacknowledged run whatever the signalling.
//! - The requester stalls when `max_unacked_psns` PSNs are outstanding, when
//!   `max_rd_atomic` READ/ATOMICs are in flight, on a FENCE behind an
//!   outstanding READ/ATOMIC, and during an RNR wait.
//! - UC WQEs complete as soon as their last packet is handed to the wire.
//! - A gather error (bad lkey, range or rights: `LOC_PROT_ERR`) sends nothing
//!   of the faulty WQE; it completes with that status once every WQE before it
//!   is acknowledged (those still succeed), then the QP enters ERR.
//! - In SQD the requester finishes the WQEs started before the move (the
//!   message in progress and any retransmission) and starts nothing new.

use crate::resources::headers::Dir;
use crate::resources::inner::DeviceInner;
use crate::resources::timers::TimerKind;
use crate::resources::types::{QpState, QpType, WcStatus};
use crate::resources::wr::{SendFlags, WrOpcode};
use crate::time::Instant;
use crate::transport::psn::{Psn, PSN_MASK};
use crate::transport::qp::Qp;
use crate::transport::{ack_timeout, fail_head, gather, send_wc};
use crate::wire::ext::{AtomicEthRepr, RethRepr};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::{BthRepr, ExtHeader, ExtHeaders, HdrMask, Opcode, Transport};

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

/// READ/ATOMIC WQEs sent and not yet completed.
fn rd_atomic_inflight(qp: &Qp) -> u32 {
    (qp.sq.head()..qp.req.wqe)
        .filter_map(|i| qp.sq.get(i))
        .filter(|w| w.opcode.is_rd_atomic())
        .count() as u32
}

/// Packets (PSNs) of a `len`-byte message at path MTU `pmtu` (a power of
/// two, 256..=4096: a shift, not a division, per packet sent).
fn npkts(len: u32, pmtu: u32) -> u32 {
    debug_assert!(pmtu.is_power_of_two());
    let shift = pmtu.trailing_zeros();
    ((u64::from(len) + u64::from(pmtu) - 1) >> shift).max(1) as u32
}

/// The operations segmented into packets, as the opcode table tells them
/// apart: the operation family and the extension header that marks the
/// variant on the last packet (ImmDt: with immediate; IETH: with
/// invalidate). Index into [`SEGMENT_OPCODES`].
const SEGMENTED: [(OpKind, HdrMask); 5] = [
    (OpKind::Send, HdrMask::EMPTY),
    (OpKind::Send, HdrMask::EMPTY.with(ExtHeader::ImmDt)),
    (OpKind::Send, HdrMask::EMPTY.with(ExtHeader::Ieth)),
    (OpKind::Write, HdrMask::EMPTY),
    (OpKind::Write, HdrMask::EMPTY.with(ExtHeader::ImmDt)),
];

/// Positions in a message, in [`position_index`] order.
const POSITIONS: [Position; 4] = [
    Position::First,
    Position::Middle,
    Position::Last,
    Position::Only,
];

/// The opcode of each (transport, operation, position) of a SEND or RDMA
/// WRITE, from the opcode table at compile time (rxe `next_opcode_rc` /
/// `next_opcode_uc`): `[RC, UC][SEGMENTED index][position_index]`. The
/// variant header is on the last packet only (IBTA 1.7 §9.2.1, Table 36:
/// FIRST and MIDDLE are the plain operation's). `None`: no such opcode (UC
/// has no SEND with invalidate; `post_send` refuses it).
const SEGMENT_OPCODES: [[[Option<Opcode>; 4]; 5]; 2] = {
    let transports = [Transport::Rc, Transport::Uc];
    let mut t = [[[None; 4]; 5]; 2];
    let mut ti = 0;
    while ti < 2 {
        let mut oi = 0;
        while oi < SEGMENTED.len() {
            let (kind, extra) = SEGMENTED[oi];
            let mut pi = 0;
            while pi < POSITIONS.len() {
                let pos = POSITIONS[pi];
                let ends = matches!(pos, Position::Last | Position::Only);
                let extra = if ends { extra } else { HdrMask::EMPTY };
                t[ti][oi][pi] = Opcode::find(transports[ti], kind, pos, extra);
                pi += 1;
            }
            oi += 1;
        }
        ti += 1;
    }
    t
};

/// Index of a packet's position in [`POSITIONS`].
#[inline]
fn position_index(first: bool, last: bool) -> usize {
    match (first, last) {
        (true, false) => 0,
        (false, false) => 1,
        (false, true) => 2,
        (true, true) => 3,
    }
}

/// Index of a SEND/WRITE work request opcode in [`SEGMENTED`].
#[inline]
fn segmented_index(op: WrOpcode) -> usize {
    match op {
        WrOpcode::SendWithImm => 1,
        WrOpcode::SendWithInv => 2,
        WrOpcode::RdmaWrite => 3,
        WrOpcode::RdmaWriteWithImm => 4,
        _ => 0,
    }
}

/// What [`only_fast`] decided.
enum Fast {
    /// The packet was built: its frame length.
    Sent(usize),
    /// Not the fast path's case; nothing was changed.
    No,
    /// The WQE failed locally (handled as the general path does).
    Failed,
}

/// The common case of an RC SEND or RDMA WRITE that fits one packet (an
/// ONLY), in one pass: the WQE at the requester pointer starts now, is not
/// fenced, failed or zero-copy, the unacknowledged window has room, and
/// the header cache has this packet's shape (`emit_request_fast`). It
/// builds exactly the packet [`produce`]'s general path builds (debug
/// builds check the frame against the full builder) and does the same
/// bookkeeping; anything else returns [`Fast::No`] having changed nothing.
#[inline(always)]
fn only_fast(qp: &mut Qp, ctx: &mut DeviceInner, now: Instant, buf: &mut [u8]) -> Fast {
    let idx = qp.req.wqe;
    let Some(w) = qp.sq.get(idx) else {
        return Fast::No;
    };
    let (opcode, flags, total) = (w.opcode, w.flags, w.total_len);
    let op = match opcode {
        WrOpcode::RdmaWrite => Opcode::RC_RDMA_WRITE_ONLY,
        WrOpcode::Send => Opcode::RC_SEND_ONLY,
        _ => return Fast::No,
    };
    if qp.qp_type != QpType::Rc
        || qp.state != QpState::Rts
        || qp.req.offset != 0
        || w.local_err.is_some()
        || total > qp.pmtu
        || flags.contains(SendFlags::FENCE)
        || (ctx.zc.min != 0 && total as usize >= ctx.zc.min)
        || qp.req.psn.diff(qp.comp.psn) >= ctx.cfg.max_unacked_psns as i32
    {
        return Fast::No;
    }
    let reth = (opcode == WrOpcode::RdmaWrite).then_some(RethRepr {
        va: w.remote_addr,
        rkey: w.rkey,
        dma_len: total,
    });
    let psn = qp.req.psn;
    // AckReq as in the general path (IBTA 1.7 §9.2.3).
    let ack_req = flags.contains(SendFlags::SIGNALED)
        || qp.sq.get(idx + 1).is_none()
        || qp.req.noack_pkts + 1 >= ctx.cfg.ackreq_interval;
    let solicited = flags.contains(SendFlags::SOLICITED);
    let Some(off) = qp.hdrs.emit_request_fast(
        &mut ctx.ident,
        qp.udp_sport,
        op,
        total,
        solicited,
        ack_req,
        psn.value(),
        reth.as_ref(),
        buf,
    ) else {
        return Fast::No;
    };
    let len = total as usize;
    let Some(out) = buf.get_mut(off..off + len) else {
        return Fast::Failed;
    };
    if gather(ctx, qp.pd, qp.sq_sges(idx), qp.sq_inline(idx), 0, out).is_err() {
        local_prot_err(qp, ctx, idx, true);
        return Fast::Failed;
    }
    let Some(frame_len) = qp.hdrs.finalize_fast(off, len, buf) else {
        return Fast::Failed;
    };
    #[cfg(debug_assertions)]
    {
        let mut bth = BthRepr::new(op, qp.attr.dest_qp_num, psn.value());
        bth.ack_req = ack_req;
        bth.solicited = solicited;
        let ext = ExtHeaders {
            reth,
            ..ExtHeaders::default()
        };
        qp.hdrs.check_fast_frame(bth, ext, buf, off, len, frame_len);
    }
    let Some(w) = qp.sq.get_mut(idx) else {
        return Fast::Failed;
    };
    if !w.started {
        qp.req.ssn = (qp.req.ssn + 1) & PSN_MASK;
    }
    w.first_psn = psn;
    w.npkts = 1;
    w.started = true;
    w.sent = true;
    qp.req.psn = psn.add(1);
    qp.req.noack_pkts = if ack_req { 0 } else { qp.req.noack_pkts + 1 };
    qp.req.wqe += 1;
    //= IBTA 1.7 §9.7.6.1.3
    //# Local ACK timeout: a timer runs while requests are
    //# unacknowledged, 4.096 µs × 2^timeout.
    if !qp.timers.is_armed(TimerKind::Ack) {
        if let Some(t) = ack_timeout(qp.attr.timeout) {
            qp.set_timer(&mut ctx.timers, TimerKind::Ack, Some(now + t));
        }
    }
    Fast::Sent(frame_len)
}

/// Build the next request packet of `qp` into `buf`.
pub(crate) fn produce(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    if qp.timers.is_armed(TimerKind::Rnr) {
        return None;
    }
    match only_fast(qp, ctx, now, buf) {
        Fast::Sent(n) => return Some(n),
        Fast::Failed => return None,
        Fast::No => {}
    }
    let rc = qp.qp_type == QpType::Rc;
    let idx = qp.req.wqe;
    if qp.state == QpState::Sqd && idx >= qp.drain_until {
        return None;
    }
    let pmtu = qp.pmtu;
    let offset = qp.req.offset;
    let (opcode, flags, total, local_err) = {
        let w = qp.sq.get(idx)?;
        (w.opcode, w.flags, w.total_len, w.local_err)
    };
    if let Some(status) = local_err {
        // A WQE that failed locally: complete it once everything before it
        // is acknowledged, then the QP enters ERR.
        if idx == qp.sq.head() && (!rc || qp.req.psn == qp.comp.psn) {
            fail_head(qp, ctx, status);
        }
        return None;
    }
    if rc && qp.req.psn.diff(qp.comp.psn) >= ctx.cfg.max_unacked_psns as i32 {
        return None;
    }
    // Only a fenced or READ/ATOMIC WQE needs the in-flight count (a scan of the
    // outstanding WQEs); plain SEND/WRITE skip it.
    if offset == 0 && rc && (flags.contains(SendFlags::FENCE) || opcode.is_rd_atomic()) {
        let inflight = rd_atomic_inflight(qp);
        // A fenced WQE waits for every READ/ATOMIC before it (rxe
        // `check_fence`).
        if flags.contains(SendFlags::FENCE) && inflight > 0 {
            return None;
        }
        // At most `max_rd_atomic` READ/ATOMICs outstanding as initiator
        // (rxe `rxe_wqe_is_fenced` / `qp->req.rd_atomic`).
        if opcode.is_rd_atomic() && inflight >= qp.attr.max_rd_atomic.max(1) as u32 {
            return None;
        }
    }
    let psn = qp.req.psn;
    let first = offset == 0;
    let wqe = qp.sq.get(idx)?;
    let mut ext = ExtHeaders::default();
    let (op, len, last, psns) = match opcode {
        WrOpcode::RdmaRead => {
            let rem = total - offset.min(total);
            ext.reth = Some(RethRepr {
                va: wqe.remote_addr.wrapping_add(offset as u64),
                rkey: wqe.rkey,
                dma_len: rem,
            });
            (Opcode::RC_RDMA_READ_REQUEST, 0, true, npkts(rem, pmtu))
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            let cmp = opcode == WrOpcode::AtomicCmpAndSwp;
            let [compare_add, swap] = qp.sq_atomic(idx);
            ext.atomic_eth = Some(AtomicEthRepr {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                swap_add: if cmp { swap } else { compare_add },
                compare: if cmp { compare_add } else { 0 },
            });
            let op = if cmp {
                Opcode::RC_COMPARE_SWAP
            } else {
                Opcode::RC_FETCH_ADD
            };
            (op, 0, true, 1)
        }
        _ => {
            let rem = total - offset.min(total);
            let len = rem.min(pmtu);
            let last = offset + len >= total;
            let write = matches!(opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm);
            let imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
            let inv = opcode == WrOpcode::SendWithInv;
            //= IBTA 1.7 §9.2
            //# RETH: in the first packet of an RDMA WRITE (FIRST or ONLY)
            //# and in every RDMA READ request; it carries the whole length.
            if write && first {
                ext.reth = Some(RethRepr {
                    va: wqe.remote_addr,
                    rkey: wqe.rkey,
                    dma_len: total,
                });
            }
            // ImmDt and IETH travel in the last packet only (CASES R19, R20).
            if imm && last {
                ext.immdt = Some(wqe.imm_or_inv);
            }
            if inv && last {
                ext.ieth = Some(wqe.imm_or_inv);
            }
            let op = SEGMENT_OPCODES[usize::from(!rc)][segmented_index(opcode)]
                [position_index(first, last)]?;
            (op, len, last, 1)
        }
    };
    //= IBTA 1.7 §9.2.3
    //# AckReq: set by the requester to ask for an acknowledgement of this
    //# packet; when to set it is the requester's choice.
    let ack_req = rc
        && ((last
            && (flags.contains(SendFlags::SIGNALED)
                || opcode.is_rd_atomic()
                || qp.sq.get(idx + 1).is_none()))
            || qp.req.noack_pkts + 1 >= ctx.cfg.ackreq_interval);
    let solicited = last && flags.contains(SendFlags::SOLICITED) && !opcode.is_rd_atomic();
    let sport = qp.udp_sport;
    // A zero-copy candidate (`Device::poll_transmit_gather`) takes the full
    // builder, which it needs for the split frame.
    let zc_off = ctx.zc.min == 0 || (len as usize) < ctx.zc.min;
    let fast = if zc_off {
        qp.hdrs.emit_request_fast(
            &mut ctx.ident,
            sport,
            op,
            len,
            solicited,
            ack_req,
            psn.value(),
            ext.reth.as_ref(),
            buf,
        )
    } else {
        None
    };
    let (frame_len, zc) = if let Some(off) = fast {
        // The payload, then pad, ICRC and the Ethernet minimum, as
        // `PacketRepr::finalize` writes them for a zero UDP checksum.
        let out = buf.get_mut(off..off + len as usize)?;
        if gather(ctx, qp.pd, qp.sq_sges(idx), qp.sq_inline(idx), offset, out).is_err() {
            local_prot_err(qp, ctx, idx, rc);
            return None;
        }
        let frame_len = qp.hdrs.finalize_fast(off, len as usize, buf)?;
        #[cfg(debug_assertions)]
        {
            let mut bth = BthRepr::new(op, qp.attr.dest_qp_num, psn.value());
            bth.ack_req = ack_req;
            bth.solicited = solicited;
            qp.hdrs
                .check_fast_frame(bth, ext, buf, off, len as usize, frame_len);
        }
        (frame_len, None)
    } else {
        let mut bth = BthRepr::new(op, qp.attr.dest_qp_num, psn.value());
        bth.ack_req = ack_req;
        bth.solicited = solicited;
        let av = qp.attr.ah_attr;
        let (off, repr) = qp.hdrs.emit(
            Dir::Req,
            &ctx.cfg,
            &mut ctx.ident,
            &av,
            sport,
            bth,
            ext,
            len as usize,
            buf,
        )?;
        let inline = flags.contains(SendFlags::INLINE);
        // Zero-copy (`Device::poll_transmit_gather`): a payload that is one
        // range of a shared MR is sent by reference, not copied.
        let zc = if inline {
            None
        } else {
            crate::transport::shared_sge_range(ctx, qp.pd, qp.sq_sges(idx), offset, len as usize)
                .and_then(|(mem, start)| {
                    crate::transport::finish_gather(&repr, buf, off, mem, start, len as usize)
                })
        };
        let gathered = if zc.is_some() {
            Ok(())
        } else {
            let out = buf.get_mut(off..off + len as usize)?;
            gather(ctx, qp.pd, qp.sq_sges(idx), qp.sq_inline(idx), offset, out)
        };
        if gathered.is_err() {
            local_prot_err(qp, ctx, idx, rc);
            return None;
        }
        let frame_len = if zc.is_some() {
            repr.frame_len(len as usize)
        } else {
            repr.finalize(buf, len as usize).ok()?
        };
        (frame_len, zc)
    };

    // Bookkeeping.
    let wqe = qp.sq.get_mut(idx)?;
    if first {
        if !wqe.started {
            qp.req.ssn = (qp.req.ssn + 1) & PSN_MASK;
        }
        // (Re)starting the WQE from its beginning assigns its PSN range.
        wqe.first_psn = psn;
        wqe.npkts = if opcode.is_atomic() {
            1
        } else {
            npkts(total, pmtu)
        };
        wqe.started = true;
    }
    qp.req.psn = psn.add(psns);
    qp.req.noack_pkts = if ack_req { 0 } else { qp.req.noack_pkts + 1 };
    if last {
        wqe.sent = true;
        qp.req.wqe += 1;
        qp.req.offset = 0;
    } else {
        qp.req.offset += len;
    }
    if rc {
        //= IBTA 1.7 §9.7.6.1.3
        //# Local ACK timeout: a timer runs while requests are
        //# unacknowledged, 4.096 µs × 2^timeout.
        if !qp.timers.is_armed(TimerKind::Ack) {
            if let Some(t) = ack_timeout(qp.attr.timeout) {
                qp.set_timer(&mut ctx.timers, TimerKind::Ack, Some(now + t));
            }
        }
    } else if last {
        // UC: complete on transmission.
        if let Some(w) = qp.sq.get(qp.sq.head()) {
            if w.opcode.is_send() {
                ctx.counters.rdma_sends += 1;
            }
            if w.signaled() {
                let wc = send_wc(qp.qpn, w, WcStatus::Success);
                ctx.complete(qp.send_cq, wc);
            }
        }
        qp.sq.pop();
    }
    if zc.is_some() {
        ctx.zc.frame = zc;
    }
    Some(frame_len)
}

/// A bad lkey, range or rights in the gather list (rxe `LOC_PROT_ERR`):
/// nothing of the packet leaves; the WQE completes with that status once
/// every WQE before it is acknowledged.
fn local_prot_err(qp: &mut Qp, ctx: &mut DeviceInner, idx: u64, rc: bool) {
    if let Some(w) = qp.sq.get_mut(idx) {
        w.local_err = Some(WcStatus::LocProtErr);
    }
    if idx == qp.sq.head() && (!rc || qp.req.psn == qp.comp.psn) {
        fail_head(qp, ctx, WcStatus::LocProtErr);
    }
}

/// Go back N (IBTA 1.7 §9.7.4.1.3): resend from the oldest unacknowledged PSN,
/// restarting a partly acknowledged WQE at the right offset.
pub(crate) fn go_back(qp: &mut Qp) {
    let head = qp.sq.head();
    qp.req.wqe = head;
    qp.req.psn = qp.comp.psn;
    qp.req.noack_pkts = 0;
    qp.req.offset = 0;
    let pmtu = qp.pmtu;
    let comp_psn: Psn = qp.comp.psn;
    if let Some(w) = qp.sq.get(head) {
        if w.started && !w.opcode.is_atomic() {
            let d = comp_psn.diff(w.first_psn);
            if d > 0 {
                qp.req.offset = (d as u32).saturating_mul(pmtu).min(w.total_len);
            }
        }
    }
}
