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

use crate::icrc::{self, IcrcForm};
use crate::time::Instant;
use crate::transport::psn::{Psn, PSN_MASK};
use crate::transport::{ack_timeout, fail_head, gather, send_wc};
use crate::verbs::device::{Ctx, TimerKind};
use crate::verbs::qp::{Qp, RequestHeader, SendWqe};
use crate::verbs::types::{QpState, QpType, WcStatus};
use crate::verbs::wr::{SendFlags, WrOpcode};
use crate::wire::ext::{AtomicEthRepr, RethRepr};
use crate::wire::{
    bth, ethernet, ipv4, patch_ipv4_ident, reth, udp, BthRepr, ExtHeader, ExtHeaders, HdrMask,
    NetRepr, Opcode, PacketRepr, UdpChecksum, ETH_MIN_FRAME_LEN,
};

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

/// Build the next request packet of `qp` into `buf`.
pub(crate) fn produce(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    now: Instant,
    buf: &mut [u8],
) -> Option<usize> {
    if qp.comp.rnr_deadline.is_some() {
        return None;
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
        if flags.contains(SendFlags::FENCE) && inflight > 0 {
            return None;
        }
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
            ext.atomic_eth = Some(AtomicEthRepr {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                swap_add: if cmp { wqe.swap } else { wqe.compare_add },
                compare: if cmp { wqe.compare_add } else { 0 },
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
            let base: u8 = match (write, first, last) {
                (false, true, true) => 0x04,
                (false, true, false) => 0x00,
                (false, false, false) => 0x01,
                (false, false, true) => 0x02,
                (true, true, true) => 0x0A,
                (true, true, false) => 0x06,
                (true, false, false) => 0x07,
                (true, false, true) => 0x08,
            };
            let code = match (base, imm && last, inv && last) {
                (0x04, true, _) => 0x05,
                (0x02, true, _) => 0x03,
                (0x0A, true, _) => 0x0B,
                (0x08, true, _) => 0x09,
                (0x04, _, true) => 0x17,
                (0x02, _, true) => 0x16,
                (b, _, _) => b,
            };
            if write && first {
                ext.reth = Some(RethRepr {
                    va: wqe.remote_addr,
                    rkey: wqe.rkey,
                    dma_len: total,
                });
            }
            if imm && last {
                ext.immdt = Some(wqe.imm);
            }
            if inv && last {
                ext.ieth = Some(wqe.inv_rkey);
            }
            let transport_base = if rc { 0x00 } else { 0x20 };
            (Opcode(transport_base | code), len, last, 1)
        }
    };
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
    let pkt = ReqPacket {
        op,
        len,
        solicited,
        ack_req,
        psn,
        ext: &ext,
    };
    let fast = if zc_off {
        fast_headers(qp, ctx, &pkt, sport, buf)
    } else {
        None
    };
    let (frame_len, zc) = if let Some(off) = fast {
        // The payload, then pad, ICRC and the Ethernet minimum, as
        // `PacketRepr::finalize` writes them for a zero UDP checksum.
        let wqe = qp.sq.get(idx)?;
        let out = buf.get_mut(off..off + len as usize)?;
        let inl = inline_of(flags, wqe);
        if gather(ctx, qp.pd, wqe.sges(), inl, offset, out).is_err() {
            local_prot_err(qp, ctx, idx, rc);
            return None;
        }
        let frame_len = fast_finalize(qp, off, len as usize, buf)?;
        #[cfg(debug_assertions)]
        check_fast_frame(qp, &pkt, buf, off, frame_len);
        (frame_len, None)
    } else {
        let mut bth = BthRepr::new(op, qp.attr.dest_qp_num, psn.value());
        bth.ack_req = ack_req;
        bth.solicited = solicited;
        let (eth, net, udp) = ctx.headers_cached(qp, sport)?;
        let repr = PacketRepr {
            eth,
            net,
            udp,
            bth,
            ext,
        };
        let off = repr
            .emit_headers_cached(buf, len as usize, &mut qp.req_tmpl)
            .ok()?;
        let inline = flags.contains(SendFlags::INLINE);
        // Zero-copy (`Device::poll_transmit_gather`): a payload that is one
        // range of a shared MR is sent by reference, not copied.
        let zc = if inline {
            None
        } else {
            let wqe = qp.sq.get(idx)?;
            crate::transport::shared_sge_range(ctx, qp.pd, wqe.sges(), offset, len as usize)
                .and_then(|(mem, start)| {
                    crate::transport::finish_gather(&repr, buf, off, mem, start, len as usize)
                })
        };
        let gathered = if zc.is_some() {
            Ok(())
        } else {
            let wqe = qp.sq.get(idx)?;
            let out = buf.get_mut(off..off + len as usize)?;
            gather(ctx, qp.pd, wqe.sges(), inline_of(flags, wqe), offset, out)
        };
        if gathered.is_err() {
            local_prot_err(qp, ctx, idx, rc);
            return None;
        }
        let frame_len = if zc.is_some() {
            repr.frame_len(len as usize)
        } else {
            let n = repr.finalize(buf, len as usize).ok()?;
            keep_request_header(qp, &repr, len, buf, off);
            n
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
        if qp.comp.ack_deadline.is_none() {
            if let Some(t) = ack_timeout(qp.attr.timeout) {
                ctx.set_timer(qp, TimerKind::Ack, Some(now + t));
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

/// The inline payload of `wqe`, if it was posted with `IBV_SEND_INLINE`.
fn inline_of(flags: SendFlags, wqe: &SendWqe) -> Option<&[u8]> {
    flags
        .contains(SendFlags::INLINE)
        .then_some(wqe.inline.as_slice())
}

/// A bad lkey, range or rights in the gather list (rxe `LOC_PROT_ERR`):
/// nothing of the packet leaves; the WQE completes with that status once
/// every WQE before it is acknowledged.
fn local_prot_err(qp: &mut Qp, ctx: &mut Ctx<'_>, idx: u64, rc: bool) {
    if let Some(w) = qp.sq.get_mut(idx) {
        w.local_err = Some(WcStatus::LocProtErr);
    }
    if idx == qp.sq.head() && (!rc || qp.req.psn == qp.comp.psn) {
        fail_head(qp, ctx, WcStatus::LocProtErr);
    }
}

/// The fields of one request packet that vary from packet to packet: what
/// the fast path patches into a kept header, and what the debug check
/// rebuilds it from.
struct ReqPacket<'e> {
    op: Opcode,
    len: u32,
    solicited: bool,
    ack_req: bool,
    psn: Psn,
    ext: &'e ExtHeaders,
}

/// Largest header [`RequestHeader`] holds: Ethernet + 802.1Q, IPv4, UDP,
/// BTH, RETH.
const FAST_HDR_MAX: usize = ethernet::VLAN_HEADER_LEN
    + ipv4::HEADER_LEN
    + udp::HEADER_LEN
    + bth::HEADER_LEN
    + reth::HEADER_LEN;

/// Keep the header the full builder just wrote into `buf[..off]` as the
/// QP's [`RequestHeader`], when the packet has the shape the fast path
/// handles: RoCEv2 over IPv4, a zero UDP checksum, at most a RETH.
fn keep_request_header(qp: &mut Qp, repr: &PacketRepr, len: u32, buf: &[u8], off: usize) {
    let ipv4 = matches!(repr.net, NetRepr::Ipv4(_));
    let zero_csum = matches!(repr.udp.checksum, UdpChecksum::Default | UdpChecksum::Zero);
    let ext = repr.ext.mask();
    let only_reth = ext.0 & !HdrMask::EMPTY.with(ExtHeader::Reth).0 == 0;
    let l3 = repr.eth.header_len();
    let (Some(cache), Some(hdr)) = (qp.hdr_cache.as_mut(), buf.get(..off)) else {
        return;
    };
    if !(ipv4 && zero_csum && only_reth && off <= FAST_HDR_MAX) {
        return;
    }
    let mut bytes = [0u8; FAST_HDR_MAX];
    bytes[..off].copy_from_slice(hdr);
    cache.req = Some(RequestHeader {
        opcode: repr.bth.opcode.0,
        len,
        solicited: repr.bth.solicited,
        l3: l3 as u8,
        hdr_len: off as u8,
        bytes,
    });
}

/// The fast path: when the QP's [`RequestHeader`] has this packet's shape,
/// write its header into `buf` by copying that one and patching the IPv4
/// identification (the device's next, as `Ctx::headers_cached` takes it) and
/// header checksum (RFC 1624 eqn. 3), AckReq, the PSN and the RETH. Returns
/// where the payload goes; `None` to take the full builder.
fn fast_headers(
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
    pkt: &ReqPacket<'_>,
    sport: u16,
    buf: &mut [u8],
) -> Option<usize> {
    let &ReqPacket {
        op,
        len,
        solicited,
        ack_req,
        psn,
        ext,
    } = pkt;
    let cache = qp.hdr_cache.as_ref()?;
    let h = cache.req.as_ref()?;
    if cache.sport != sport || h.opcode != op.0 || h.len != len || h.solicited != solicited {
        return None;
    }
    let n = h.hdr_len as usize;
    let ip = h.l3 as usize;
    let bth_at = ip + ipv4::HEADER_LEN + udp::HEADER_LEN;
    let reth_len = if ext.reth.is_some() {
        reth::HEADER_LEN
    } else {
        0
    };
    if n != bth_at + bth::HEADER_LEN + reth_len {
        return None;
    }
    let out = buf.get_mut(..n)?;
    out.copy_from_slice(h.bytes.get(..n)?);
    *ctx.ip_ident = ctx.ip_ident.wrapping_add(1);
    patch_ipv4_ident(out.get_mut(ip..ip + ipv4::HEADER_LEN)?, *ctx.ip_ident);
    let (b, rest) = out.get_mut(bth_at..)?.split_at_mut(bth::HEADER_LEN);
    let mut b = bth::Packet::new_unchecked(b);
    b.set_ack_req(ack_req);
    b.set_psn(psn.value());
    if let Some(r) = &ext.reth {
        r.emit(&mut reth::Packet::new_checked(rest).ok()?);
    }
    Some(n)
}

/// After the fast path's payload: pad bytes, ICRC and zeros up to the
/// Ethernet minimum (what `PacketRepr::finalize` writes when the UDP
/// checksum is zero). Returns the frame length.
fn fast_finalize(qp: &Qp, off: usize, len: usize, buf: &mut [u8]) -> Option<usize> {
    let l3 = qp.hdr_cache.as_ref()?.req.as_ref()?.l3 as usize;
    let pad = len.wrapping_neg() & 3;
    let icrc = off + len + pad;
    let end = icrc + 4;
    let frame_len = end.max(ETH_MIN_FRAME_LEN);
    let buf = buf.get_mut(..frame_len)?;
    buf.get_mut(off + len..icrc)?.fill(0);
    let crc = icrc::compute(IcrcForm::Ipv4, buf.get(l3..icrc)?).ok()?;
    buf.get_mut(icrc..end)?.copy_from_slice(&crc.to_le_bytes());
    buf.get_mut(end..)?.fill(0);
    Some(frame_len)
}

/// Debug builds: the fast path's frame equals what the full builder
/// (`PacketRepr::emit`, checked against the reference vectors) writes for
/// the same packet.
#[cfg(debug_assertions)]
fn check_fast_frame(qp: &Qp, pkt: &ReqPacket<'_>, buf: &[u8], off: usize, frame_len: usize) {
    let len = pkt.len as usize;
    let Some(c) = qp.hdr_cache.as_ref() else {
        panic!("fast path without a header cache");
    };
    let l3 = c.req.map_or(14, |h| h.l3 as usize);
    let mut net = c.net;
    if let NetRepr::Ipv4(r) = &mut net {
        r.ident = ipv4::Packet::new_unchecked(&buf[l3..]).ident();
    }
    let mut bth = BthRepr::new(pkt.op, qp.attr.dest_qp_num, pkt.psn.value());
    bth.ack_req = pkt.ack_req;
    bth.solicited = pkt.solicited;
    let repr = PacketRepr {
        eth: c.eth,
        net,
        udp: c.udp,
        bth,
        ext: *pkt.ext,
    };
    let payload = &buf[off..off + len];
    // On the stack: steady traffic allocates nothing (tests/no_alloc.rs).
    let mut want = [0u8; 10 * 1024];
    if repr.frame_len(len) > want.len() {
        return;
    }
    let n = repr.emit(&mut want, payload).expect("full builder");
    assert_eq!(n, frame_len, "fast path frame length");
    assert_eq!(&buf[..frame_len], &want[..n], "fast path frame bytes");
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
