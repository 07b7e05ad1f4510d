//! Transports: the queue pair ([`qp`]), the RC requester, completer and
//! responder (`rc/`), UC (`uc.rs`), UD (`ud.rs`), PSN arithmetic (`psn.rs`)
//! and addressing (`av`, defined in [`crate::resources::av`]).
//!
//! The engines are functions over one [`Qp`] and the device state they share
//! (`DeviceInner`, [`crate::resources`]); nothing here imports
//! [`crate::verbs`]. They never allocate per packet: frames are built in the
//! caller's buffer, payload is gathered from and scattered to memory regions
//! directly.

pub mod psn;
pub mod qp;
/// GIDs, address vectors and UDP source ports (defined in [`crate::resources::av`]).
pub use crate::resources::av;
pub mod rc;
pub mod uc;
pub mod ud;

use std::sync::Arc;

use crate::backend::TxFrame;
use crate::icrc::IcrcForm;
use crate::resources::config::AsyncEvent;
use crate::resources::inner::DeviceInner;
use crate::resources::mr::AccessError;
use crate::resources::timers::TimerKind;
use crate::resources::types::{AccessFlags, QpState, QpType, WcStatus};
use crate::resources::wr::{NetworkHdrType, Sge, Wc, WcFlags, WcOpcode};
use crate::time::Instant;
use crate::wire::{ipv4, ipv6, udp, NetRepr, PacketRepr, UdpChecksum};
use qp::{Qp, SendWqe};

/// Build the next frame `qp` wants to send: responses first, then requests.
/// (`inline(always)`: the device's fast path and its paced path both call
/// it, and the fast path must not pay a call for the second caller.)
#[inline(always)]
pub(crate) fn produce(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    if qp.qp_type == QpType::Rc {
        if let Some(n) = rc::responder::produce(qp, ctx, buf) {
            return Some(n);
        }
    }
    // RTS sends; SQD (RC/UC) only finishes what was started before it
    // (IBTA 1.7 §10.3.1: the message in progress completes, retransmissions
    // included, and nothing new starts).
    let draining = qp.state == QpState::Sqd && qp.qp_type != QpType::Ud;
    if qp.state != QpState::Rts && !draining {
        return None;
    }
    match qp.qp_type {
        QpType::Rc | QpType::Uc => rc::requester::produce(qp, ctx, now, buf),
        QpType::Ud => ud::produce(qp, ctx, buf),
    }
}

/// In SQD: raise `SqDrained` once every WQE started before the move to SQD
/// has completed (IBTA 1.7 §11.6.3, `IBV_EVENT_SQ_DRAINED`).
pub(crate) fn check_drained(qp: &mut Qp, ctx: &mut DeviceInner) {
    if qp.sqd_event_pending && qp.state == QpState::Sqd && qp.sq.head() >= qp.drain_until {
        qp.sqd_event_pending = false;
        ctx.events.push_back(AsyncEvent::SqDrained { qpn: qp.qpn });
    }
}

/// A send completion for `wqe`.
pub(crate) fn send_wc(qpn: u32, wqe: &SendWqe, status: WcStatus) -> Wc {
    Wc {
        wr_id: wqe.wr_id,
        status,
        opcode: wqe.opcode.wc_opcode(),
        byte_len: if status == WcStatus::Success {
            wqe.total_len
        } else {
            0
        },
        imm_data: 0,
        invalidated_rkey: 0,
        qp_num: qpn,
        src_qp: 0,
        wc_flags: WcFlags::empty(),
        network_hdr_type: NetworkHdrType::None,
    }
}

/// A receive completion.
pub(crate) fn recv_wc(qpn: u32, wr_id: u64, status: WcStatus) -> Wc {
    Wc {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        imm_data: 0,
        invalidated_rkey: 0,
        qp_num: qpn,
        src_qp: 0,
        wc_flags: WcFlags::empty(),
        network_hdr_type: NetworkHdrType::None,
    }
}

/// Complete the head send WQE with `status` (always, signaled or not), then move
/// the QP to ERR and flush the rest (CASES R18).
pub(crate) fn fail_head(qp: &mut Qp, ctx: &mut DeviceInner, status: WcStatus) {
    if let Some(w) = qp.sq.get(qp.sq.head()) {
        let wc = send_wc(qp.qpn, w, status);
        ctx.complete(qp.send_cq, wc);
        qp.sq.pop();
    }
    enter_error(qp, ctx);
}

/// Move `qp` to ERR: every queued send and receive WQE completes with
/// `WR_FLUSH_ERR` in posting order, timers stop, and a fatal event is raised.
/// Queued ACK/NAK responses stay, so a NAK that caused the error still leaves.
pub(crate) fn enter_error(qp: &mut Qp, ctx: &mut DeviceInner) {
    let first_time = qp.state != QpState::Err;
    qp.state = QpState::Err;
    qp.attr.qp_state = QpState::Err;
    while let Some(w) = qp.sq.get(qp.sq.head()) {
        let wc = send_wc(qp.qpn, w, WcStatus::WrFlushErr);
        ctx.complete(qp.send_cq, wc);
        qp.sq.pop();
    }
    while let Some(r) = qp.rq.get(qp.rq.head()) {
        let wc = recv_wc(qp.qpn, r.wr_id, WcStatus::WrFlushErr);
        ctx.complete(qp.recv_cq, wc);
        qp.rq.pop();
    }
    qp.req.wqe = qp.sq.head();
    qp.req.offset = 0;
    qp.sqd_event_pending = false;
    qp.set_timer(&mut ctx.timers, TimerKind::Ack, None);
    qp.set_timer(&mut ctx.timers, TimerKind::Rnr, None);
    qp.resp.drop_read_streams();
    qp.resp.in_msg = None;
    if first_time {
        ctx.events.push_back(AsyncEvent::QpFatal { qpn: qp.qpn });
    }
}

/// Largest piece handed to one `memcpy` when moving payload: below glibc's
/// `rep movsb` threshold (2112 bytes with FSRM).
pub(crate) const COPY_CHUNK: usize = 2048;

/// Copy payload between a frame and a memory region in [`COPY_CHUNK`] pieces.
/// glibc 2.36's `rep movsb` path runs ~35x slower on these CPUs when
/// `(dst - src) mod 4096` is 1..=31 (glibc bug 30994; PERF-NOTES.md), and the
/// stack cannot choose where the application's memory regions lie relative to
/// the payload's offset in a frame; below the threshold glibc uses vector
/// moves, which have no such trap.
#[inline]
pub(crate) fn copy_payload(dst: &mut [u8], src: &[u8]) {
    if src.len() <= COPY_CHUNK && dst.len() == src.len() {
        // One piece (every small message): no chunk iterators.
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(COPY_CHUNK).zip(src.chunks(COPY_CHUNK)) {
        d.copy_from_slice(s);
    }
}

/// Copy `out.len()` bytes of the message described by `sges` (or `inline`),
/// starting `offset` bytes into it, from the memory regions into `out`.
#[inline]
pub(crate) fn gather(
    ctx: &mut DeviceInner,
    pd: u32,
    sges: &[Sge],
    inline: Option<&[u8]>,
    offset: u32,
    out: &mut [u8],
) -> Result<(), AccessError> {
    if let (None, [sge]) = (inline, sges) {
        // One SGE holding the whole piece (the common WQE): one MR check,
        // one copy.
        let (skip, n) = (u64::from(offset), out.len() as u64);
        if n > 0 && skip + n <= u64::from(sge.length) {
            let va = sge.addr.checked_add(skip).ok_or(AccessError::Range)?;
            let (mr, r) = ctx.mrs.local(pd, sge.lkey, va, n, AccessFlags::empty())?;
            copy_payload(out, &mr.buf.bytes()[r]);
            return Ok(());
        }
    }
    if let Some(data) = inline {
        let src = data
            .get(offset as usize..)
            .and_then(|d| d.get(..out.len()))
            .ok_or(AccessError::Range)?;
        copy_payload(out, src);
        return Ok(());
    }
    let mut skip = offset as u64;
    let mut done = 0usize;
    for sge in sges {
        if done == out.len() {
            break;
        }
        let len = sge.length as u64;
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = ((len - skip) as usize).min(out.len() - done);
        let va = sge.addr.checked_add(skip).ok_or(AccessError::Range)?;
        let (mr, r) = ctx
            .mrs
            .local(pd, sge.lkey, va, take as u64, AccessFlags::empty())?;
        copy_payload(&mut out[done..done + take], &mr.buf.bytes()[r]);
        done += take;
        skip = 0;
    }
    if done == out.len() {
        Ok(())
    } else {
        Err(AccessError::Range)
    }
}

/// Copy `data` into the buffer described by `sges`, starting `offset` bytes
/// into it. Needs LOCAL_WRITE on each MR.
pub(crate) fn scatter(
    ctx: &mut DeviceInner,
    pd: u32,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), AccessError> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == data.len() {
            break;
        }
        let len = sge.length as u64;
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = ((len - skip) as usize).min(data.len() - done);
        let va = sge.addr.checked_add(skip).ok_or(AccessError::Range)?;
        let (mr, r) = ctx
            .mrs
            .local(pd, sge.lkey, va, take as u64, AccessFlags::LOCAL_WRITE)?;
        copy_payload(&mut mr.buf.bytes_mut()[r], &data[done..done + take]);
        done += take;
        skip = 0;
    }
    if done == data.len() {
        Ok(())
    } else {
        Err(AccessError::Range)
    }
}

/// Local ACK timeout: 4.096 µs × 2^code (IBTA 1.7 §9.7.6.1.3); `None` for code 0
/// (no timer).
pub fn ack_timeout(code: u8) -> Option<core::time::Duration> {
    (code != 0 && code <= 31).then(|| core::time::Duration::from_nanos(4096u64 << code))
}

/// The payload `[offset, offset + len)` of the message `sges` as one range of
/// a shared MR (its memory and the byte offset in it), when zero-copy is on
/// for payloads this long and the range lies inside one SGE of a shared MR
/// the WQE may read. `None` means: copy as usual (every error is found and
/// reported by the copying path).
pub(crate) fn shared_sge_range(
    ctx: &mut DeviceInner,
    pd: u32,
    sges: &[Sge],
    offset: u32,
    len: usize,
) -> Option<(Arc<[u8]>, usize)> {
    if ctx.zc.min == 0 || len < ctx.zc.min {
        return None;
    }
    let mut skip = u64::from(offset);
    for sge in sges {
        let sl = u64::from(sge.length);
        if skip >= sl {
            skip -= sl;
            continue;
        }
        if sl - skip < len as u64 {
            return None;
        }
        let va = sge.addr.checked_add(skip)?;
        let (mr, r) = ctx
            .mrs
            .local(pd, sge.lkey, va, len as u64, AccessFlags::empty())
            .ok()?;
        return mr.shared().map(|m| (Arc::clone(m), r.start));
    }
    None
}

/// Finish a frame whose headers `repr.emit_headers` wrote into `buf` (the
/// payload would start at `off`) for a payload of `len` bytes at `start` of
/// `mem`, without copying the payload: the pad bytes and the ICRC (IBTA 1.7
/// §7.8.1, RoCEv2 Annex A17.4) go into the returned tail, computed over the
/// masked header prefix, then the payload in place, then the pad; the UDP
/// checksum (when the policy computes one, RFC 768 / RFC 8200 §8.1) is
/// computed the same way and written into the header. The bytes
/// `buf[..off] | payload | tail` equal what `PacketRepr::finalize` writes.
/// `None` (copy instead) for RoCEv1 or a frame under the Ethernet minimum.
pub(crate) fn finish_gather(
    repr: &PacketRepr,
    buf: &mut [u8],
    off: usize,
    mem: Arc<[u8]>,
    start: usize,
    len: usize,
) -> Option<TxFrame> {
    let payload = mem.get(start..start.checked_add(len)?)?;
    let (form, l3_hdr) = match repr.net {
        NetRepr::Ipv4(_) => (IcrcForm::Ipv4, ipv4::HEADER_LEN),
        NetRepr::Ipv6(_) => (IcrcForm::Ipv6, ipv6::HEADER_LEN),
        NetRepr::Grh(_) => return None,
    };
    let l3 = repr.eth.header_len();
    let pad = len.wrapping_neg() & 3;
    let end = off + len + pad + 4;
    if end < crate::wire::ETH_MIN_FRAME_LEN {
        return None;
    }
    let head = crate::icrc::compute(form, buf.get(l3..off)?).ok()?;
    let mut h = crc32fast::Hasher::new_with_initial(head);
    h.update(payload);
    h.update(&[0u8; 3][..pad]);
    let crc = h.finalize();
    let mut tail = [0u8; 8];
    tail[pad..pad + 4].copy_from_slice(&crc.to_le_bytes());
    let tail_len = pad + 4;

    let udp_off = l3 + l3_hdr;
    let value = match repr.net.udp_checksum(repr.udp.checksum) {
        UdpChecksum::Zero | UdpChecksum::Default => 0,
        UdpChecksum::Value(v) => v,
        UdpChecksum::Compute => {
            let (src, dst) = repr.net.ip_addrs()?;
            let udp_len = end - udp_off;
            let mut sum = udp::pseudo_header(src, dst, udp_len as u32);
            // The UDP header's checksum field is still 0 (emit_headers).
            sum.add(buf.get(udp_off..off)?);
            sum.add(payload);
            sum.add(&tail[..tail_len]);
            udp::transmitted(sum.finish())
        }
    };
    udp::Packet::new_checked(buf.get_mut(udp_off..)?)
        .ok()?
        .set_checksum(value);
    Some(TxFrame::Gather {
        hdr_len: off,
        payload: mem,
        offset: start,
        len,
        tail,
        tail_len,
    })
}
