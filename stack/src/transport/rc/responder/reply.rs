//! The responses the responder sends: ACK/NAK, READ responses, ATOMIC
//! ACKNOWLEDGEs, one per call, from its queue.

use super::{RespItem, ACK};
use crate::resources::headers::Dir;
use crate::resources::inner::DeviceInner;
use crate::resources::types::AccessFlags;
use crate::transport::copy_payload;
use crate::transport::qp::Qp;
use crate::wire::ext::{AethRepr, AtomicAckEthRepr};
use crate::wire::{BthRepr, ExtHeaders, Opcode};

/// Whether the next response of `qp` is ACK-class (ACK, NAK, ATOMIC
/// ACKNOWLEDGE): no bulk data, so the congestion-control pacer lets it pass.
pub(crate) fn next_is_ack(qp: &Qp) -> bool {
    matches!(
        qp.resp.queue.front(),
        Some(RespItem::Ack { .. } | RespItem::AtomicAck { .. })
    )
}

/// Build the next queued response of `qp` into `buf`.
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
