//! Unreliable Datagram transport (IBTA 1.7 §9.8.5; RoCEv2 Annex A17.4.5.2).
//!
//! - Send: one SEND_ONLY(_WITH_IMMEDIATE) packet with a DETH per WR; a message
//!   larger than the PMTU completes with `LOC_LEN_ERR` without being sent (rxe
//!   silently "succeeds" instead). The Q_Key is the WR's, or the QP's own when
//!   the WR's has bit 31 set (C10-15). Completes on transmission.
//! - Receive: the DETH Q_Key must equal the QP's (`qkey_violation`); the
//!   datagram plus the 40-byte GRH area must fit the receive WQE and the
//!   payload the PMTU, else it is dropped without consuming the WQE or touching
//!   the QP state (`ud_len_err`; CASES R26, CVE-2024-40992). The GRH area holds
//!   the IPv6 header in bytes 0..40, or for IPv4 zeros in 0..20 and the IPv4
//!   header in 20..40 (CASES R27); `byte_len` includes the 40 bytes. IPv4
//!   headers with options never get here (the parser drops them), so the
//!   layout never shifts.
//! - The PMTU of a UD QP is the port's active MTU (it has no path MTU
//!   attribute): 1024 on a 1500-byte Ethernet, 4096 on a 9000-byte one.

use crate::resources::av::udp_sport;
use crate::resources::headers;
use crate::resources::inner::DeviceInner;
use crate::resources::types::WcStatus;
use crate::resources::wr::{NetworkHdrType, SendFlags, WcFlags, WrOpcode};
use crate::transport::qp::Qp;
use crate::transport::{gather, recv_wc, scatter, send_wc};
use crate::wire::ext::DethRepr;
use crate::wire::{BthRepr, ExtHeaders, NetInfo, Opcode, PacketRepr, RocePacket};

/// Length of the GRH area at the start of every UD receive buffer.
pub const GRH_AREA_LEN: usize = 40;

/// Build the next UD datagram of `qp` into `buf`.
pub(crate) fn produce(qp: &mut Qp, ctx: &mut DeviceInner, buf: &mut [u8]) -> Option<usize> {
    loop {
        let head = qp.sq.head();
        let w = *qp.sq.get(head)?;
        let ud = qp.sq_ud(head)?;
        if w.total_len > qp.pmtu {
            let wc = send_wc(qp.qpn, &w, WcStatus::LocLenErr);
            ctx.complete(qp.send_cq, wc);
            qp.sq.pop();
            qp.req.wqe = qp.sq.head();
            continue;
        }
        let len = w.total_len as usize;
        let imm = w.opcode == WrOpcode::SendWithImm;
        let mut ext = ExtHeaders {
            deth: Some(DethRepr {
                qkey: if ud.remote_qkey & 0x8000_0000 != 0 {
                    qp.attr.qkey
                } else {
                    ud.remote_qkey
                },
                rsvd: 0,
                src_qp: qp.qpn,
            }),
            ..ExtHeaders::default()
        };
        let op = if imm {
            ext.immdt = Some(w.imm_or_inv);
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
        let mut bth = BthRepr::new(op, ud.remote_qpn, qp.req.psn.value());
        bth.solicited = w.flags.contains(SendFlags::SOLICITED);
        let sport = udp_sport(&ud.av, qp.qpn, ud.remote_qpn);
        let (eth, net, udp) = headers::build(&ctx.cfg, &mut ctx.ident, &ud.av, sport)?;
        let repr = PacketRepr {
            eth,
            net,
            udp,
            bth,
            ext,
        };
        let off = repr.emit_headers(buf, len).ok()?;
        let out = buf.get_mut(off..off + len)?;
        if gather(ctx, qp.pd, qp.sq_sges(head), qp.sq_inline(head), 0, out).is_err() {
            crate::transport::fail_head(qp, ctx, WcStatus::LocProtErr);
            return None;
        }
        let n = repr.finalize(buf, len).ok()?;
        ctx.counters.rdma_sends += 1;
        if w.signaled() {
            let wc = send_wc(qp.qpn, &w, WcStatus::Success);
            ctx.complete(qp.send_cq, wc);
        }
        qp.sq.pop();
        qp.req.wqe = qp.sq.head();
        qp.req.psn = qp.req.psn.next();
        return Some(n);
    }
}

/// Handle an inbound UD datagram. Never produces a response.
pub(crate) fn handle_request(qp: &mut Qp, ctx: &mut DeviceInner, pkt: &RocePacket<'_>) -> bool {
    let Some(deth) = pkt.ext().deth() else {
        return false;
    };
    if deth.qkey != qp.attr.qkey {
        ctx.counters.qkey_violation += 1;
        return false;
    }
    let Some(r) = qp.rq.get(qp.rq.head()).copied() else {
        ctx.counters.rx_no_rwqe += 1;
        return false;
    };
    let plen = pkt.payload().len();
    if plen > qp.pmtu as usize || (GRH_AREA_LEN + plen) as u64 > r.total_len {
        ctx.counters.ud_len_err += 1;
        return false;
    }
    let mut grh = [0u8; GRH_AREA_LEN];
    let region = pkt.icrc_region();
    let hdr_type = match pkt.net() {
        NetInfo::Ipv4(_) => {
            grh[20..40].copy_from_slice(region.get(..20).unwrap_or(&[0; 20]));
            NetworkHdrType::Ipv4
        }
        _ => {
            grh.copy_from_slice(region.get(..40).unwrap_or(&[0; 40]));
            NetworkHdrType::Ipv6
        }
    };
    let head = qp.rq.head();
    if scatter(ctx, qp.pd, qp.rq_sges(head), 0, &grh).is_err()
        || scatter(
            ctx,
            qp.pd,
            qp.rq_sges(head),
            GRH_AREA_LEN as u64,
            pkt.payload(),
        )
        .is_err()
    {
        let wc = recv_wc(qp.qpn, r.wr_id, WcStatus::LocProtErr);
        ctx.complete(qp.recv_cq, wc);
        qp.rq.pop();
        return false;
    }
    let mut wc = recv_wc(qp.qpn, r.wr_id, WcStatus::Success);
    wc.byte_len = (GRH_AREA_LEN + plen) as u32;
    wc.src_qp = deth.src_qp;
    wc.wc_flags = WcFlags::GRH;
    wc.network_hdr_type = hdr_type;
    if let Some(imm) = pkt.ext().immdt() {
        wc.imm_data = imm;
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    ctx.counters.rdma_recvs += 1;
    ctx.complete(qp.recv_cq, wc);
    qp.rq.pop();
    false
}
