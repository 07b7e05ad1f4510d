//! Queue pairs: the send and receive queues and the state of the engines
//! that drive them ([`crate::transport::rc`], UC, UD). The attributes live in
//! [`crate::resources::attr`], the IBTA state machine in [`crate::verbs::qp`].

use crate::cc::{CcConfig, QpCc};
use crate::resources::attr::{QpAttr, QpCap, QpInfo, QpInitAttr, VerbsError};
use crate::resources::headers::HeaderCache;
use crate::resources::timers::{QpTimers, TimerKind, TimerTable};
use crate::resources::types::{QpState, QpType, WcStatus};
use crate::resources::wr::{RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode, MAX_SGE};
use crate::time::Instant;
use crate::transport::psn::Psn;
use crate::transport::rc::completer::CompState;
use crate::transport::rc::requester::ReqState;
use crate::transport::rc::responder::RespState;

/// A send queue entry: the work request plus the requester's bookkeeping,
/// in one 64-byte line (`repr(C, align(64))`): every field a packet of a
/// SEND, WRITE, READ or ATOMIC reads, the first (usually only) SGE
/// included. The requester reads a slot some hundreds of WQEs after
/// `post_send` wrote it, mostly from L2, so the line count is the cost.
/// What few WQEs carry lives beside the ring, per slot ([`SendSide`]):
/// gather lists of more than one SGE, inline data, atomic operands, UD
/// destinations.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub remote_addr: u64,
    /// The gather (or, for READ and atomics, scatter) list when it has one
    /// element; with more, the list is in [`SendSide`].
    pub sge: Sge,
    pub total_len: u32,
    pub rkey: u32,
    /// Immediate data (`*_WITH_IMM`, sent as given) or the R_Key to
    /// invalidate (`SEND_WITH_INV`): no opcode carries both.
    pub imm_or_inv: u32,
    /// PSN of the first packet, once the WQE has been sent.
    pub first_psn: Psn,
    /// PSNs the WQE occupies (READ: response packets).
    pub npkts: u32,
    pub flags: SendFlags,
    pub opcode: WrOpcode,
    /// Elements of the gather list (at most [`MAX_SGE`]).
    pub num_sge: u8,
    /// Whether `first_psn`/`npkts` are assigned.
    pub started: bool,
    /// Whether the whole WQE has been handed to the wire at least once.
    pub sent: bool,
    /// A local error found while building its packets (e.g. `LOC_PROT_ERR`
    /// for a bad lkey): the WQE is not sent further and completes with this
    /// status once everything before it is acknowledged.
    pub local_err: Option<WcStatus>,
}

impl Default for SendWqe {
    fn default() -> Self {
        SendWqe {
            wr_id: 0,
            remote_addr: 0,
            sge: Sge::default(),
            total_len: 0,
            rkey: 0,
            imm_or_inv: 0,
            first_psn: Psn::default(),
            npkts: 0,
            flags: SendFlags::empty(),
            opcode: WrOpcode::Send,
            num_sge: 0,
            started: false,
            sent: false,
            local_err: None,
        }
    }
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    pub fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }
}

/// A receive queue entry (40 bytes; a list of more than one SGE lives in
/// the ring's [`SgeTable`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    /// The scatter list when it has one element.
    pub sge: Sge,
    pub total_len: u64,
    pub num_sge: u32,
}

/// The scatter/gather lists of more than one element of a ring's WQEs,
/// `stride` (the queue's `max_*_sge`) per slot; empty for queues created
/// with `max_*_sge` <= 1, whose WQEs keep their one SGE in the slot.
#[derive(Debug, Default)]
pub(crate) struct SgeTable {
    sges: Box<[Sge]>,
    stride: usize,
}

impl SgeTable {
    fn new(slots: usize, max_sge: u32) -> SgeTable {
        if max_sge <= 1 {
            return SgeTable::default();
        }
        let stride = max_sge as usize;
        SgeTable {
            sges: vec![Sge::default(); slots * stride].into_boxed_slice(),
            stride,
        }
    }

    /// The list of `n` elements of slot `slot`, whose first is `first`.
    #[inline(always)]
    fn list<'a>(&'a self, slot: usize, first: &'a Sge, n: usize) -> &'a [Sge] {
        if n <= 1 {
            &core::slice::from_ref(first)[..n]
        } else {
            let at = slot * self.stride;
            self.sges.get(at..at + n).unwrap_or(&[])
        }
    }

    /// Store `list` for slot `slot` (a one-element list in `first`).
    #[inline(always)]
    fn store(&mut self, slot: usize, first: &mut Sge, list: &[Sge]) {
        match list {
            [] => {}
            [s] => *first = *s,
            _ => {
                let at = slot * self.stride;
                if let Some(d) = self.sges.get_mut(at..at + list.len()) {
                    d.copy_from_slice(list);
                }
            }
        }
    }
}

/// What some WQEs carry beyond their slot, per slot: the gather lists of
/// more than one SGE (send and receive), inline data (`max_inline_data`
/// bytes per slot, only for queues created with inline room), the operands
/// of atomics (allocated at the first atomic posted) and UD destinations
/// (UD QPs only). A QP needs none of it (one SGE, no inline data, no
/// atomics, RC or UC) holds none.
#[derive(Debug, Default)]
pub(crate) struct QpSide {
    sq_sges: SgeTable,
    rq_sges: SgeTable,
    inline: Box<[u8]>,
    inline_stride: usize,
    /// Compare (or add) and swap operands.
    atomic: Box<[[u64; 2]]>,
    ud: Box<[Option<UdDest>]>,
}

/// Bytes a send queue of `slots` slots holds beside the ring for `cap`.
fn side_bytes(slots: u64, cap: &QpCap, ud: bool, atomics: bool) -> u64 {
    use std::mem::size_of;
    let sge = if cap.max_send_sge > 1 {
        u64::from(cap.max_send_sge) * size_of::<Sge>() as u64
    } else {
        0
    };
    let ud = if ud {
        size_of::<Option<UdDest>>() as u64
    } else {
        0
    };
    let atomic = if atomics {
        size_of::<[u64; 2]>() as u64
    } else {
        0
    };
    slots * (sge + u64::from(cap.max_inline_data) + ud + atomic)
}

/// A fixed-capacity ring addressed by absolute 64-bit indices: slots are
/// allocated once at QP creation, so posting allocates nothing. The slot
/// array is a power of two long (index by mask, not division); at most
/// `cap` entries are in use.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    slots: Box<[T]>,
    mask: u64,
    cap: u64,
    head: u64,
    tail: u64,
}

impl<T: Default + Clone> Ring<T> {
    pub fn new(cap: usize) -> Ring<T> {
        let cap = cap.max(1);
        let n = cap.next_power_of_two();
        Ring {
            slots: vec![T::default(); n].into_boxed_slice(),
            mask: n as u64 - 1,
            cap: cap as u64,
            head: 0,
            tail: 0,
        }
    }
    pub fn cap(&self) -> u64 {
        self.cap
    }
    pub fn len(&self) -> u64 {
        self.tail - self.head
    }
    pub fn is_full(&self) -> bool {
        self.len() >= self.cap()
    }
    pub fn head(&self) -> u64 {
        self.head
    }
    /// Slots in the array (a power of two).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
    /// The slot of absolute index `i`.
    #[inline(always)]
    pub fn slot_of(&self, i: u64) -> usize {
        (i & self.mask) as usize
    }
    /// The slot at absolute index `i`, if it is in `[head, tail)`.
    pub fn get(&self, i: u64) -> Option<&T> {
        if i >= self.head && i < self.tail {
            self.slots.get((i & self.mask) as usize)
        } else {
            None
        }
    }
    pub fn get_mut(&mut self, i: u64) -> Option<&mut T> {
        if i >= self.head && i < self.tail {
            self.slots.get_mut((i & self.mask) as usize)
        } else {
            None
        }
    }
    /// The slot the next push fills (to be filled in place, then committed).
    pub fn next_slot(&mut self) -> Option<&mut T> {
        if self.is_full() {
            return None;
        }
        self.slots.get_mut((self.tail & self.mask) as usize)
    }
    pub fn commit_push(&mut self) {
        self.tail += 1;
    }
    pub fn pop(&mut self) {
        if self.head < self.tail {
            self.head += 1;
        }
    }
    pub fn clear(&mut self) {
        self.head = self.tail;
    }
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub(crate) qpn: u32,
    pub(crate) qp_type: QpType,
    pub(crate) pd: u32,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    /// Path MTU in effect (the attribute clamped to the device MTU).
    pub(crate) pmtu: u32,
    pub(crate) udp_sport: u16,
    pub(crate) sq: Ring<SendWqe>,
    pub(crate) rq: Ring<RecvWqe>,
    /// What WQEs carry beyond their slots, if any QP of this kind needs it.
    pub(crate) side: Option<Box<QpSide>>,
    pub(crate) req: ReqState,
    pub(crate) comp: CompState,
    pub(crate) resp: RespState,
    /// Whether the QP is on the device's active list.
    pub(crate) active: bool,
    /// In SQD: the absolute index of the first send WQE that must wait for
    /// RTS (WQEs before it, the message in progress included, still finish).
    pub(crate) drain_until: u64,
    /// In SQD: the `SqDrained` event is still to be raised.
    pub(crate) sqd_event_pending: bool,
    /// The headers of this QP's packets ([`crate::resources::headers`]).
    pub(crate) hdrs: HeaderCache,
    /// This QP's timers (ACK, RNR, reaction point, pacer), indexed by kind.
    pub(crate) timers: QpTimers,
    /// Congestion control: the DCQCN reaction point and the pacer.
    pub(crate) cc: QpCc,
}

impl QpInitAttr {
    /// Upper bound of the heap and table memory, bytes, that a QP created
    /// with these attributes holds on a [`crate::verbs::Device`], with
    /// `max_dest_rd_atomic` responder resources: the QP itself and its
    /// congestion-control state, the send ring (`max_send_wr` rounded up to
    /// a power of two, each slot a WQE with its inline buffer), the receive
    /// ring, the responder resources (rounded up to a power of two, as
    /// rxe) and the response queue sized for them, and an allowance for the
    /// two table entries. CQs and MRs are not included. Callers that take
    /// queue sizes from a peer or a command line bound them with this
    /// before creating anything.
    pub fn footprint(&self, max_dest_rd_atomic: u8) -> u64 {
        use crate::transport::rc::responder::{Resource, RespItem};
        use std::mem::size_of;
        let ring = |n: u32| u64::from(n.max(1)).next_power_of_two();
        let sq_slots = ring(self.cap.max_send_wr);
        let rc = self.qp_type == QpType::Rc;
        let ud = self.qp_type == QpType::Ud;
        let sq = sq_slots * size_of::<SendWqe>() as u64 + side_bytes(sq_slots, &self.cap, ud, rc);
        let rq_sge = if self.cap.max_recv_sge > 1 {
            u64::from(self.cap.max_recv_sge) * size_of::<Sge>() as u64
        } else {
            0
        };
        let rq = ring(self.cap.max_recv_wr) * (size_of::<RecvWqe>() as u64 + rq_sge);
        let res = u64::from(max_dest_rd_atomic.max(1)).next_power_of_two();
        let resp =
            res * size_of::<Resource>() as u64 + (2 * res + 4) * size_of::<RespItem>() as u64;
        let fixed = size_of::<Qp>() + 2 * 64;
        fixed as u64 + sq + rq + resp
    }
}

impl Qp {
    pub(crate) fn new(qpn: u32, pd: u32, init: &QpInitAttr, cc: &CcConfig) -> Qp {
        let sq = Ring::<SendWqe>::new(init.cap.max_send_wr as usize);
        let rq = Ring::<RecvWqe>::new(init.cap.max_recv_wr as usize);
        // Side storage is allocated once here, never on post (but the
        // atomic operands, at the first atomic).
        let n = sq.slots();
        let cap = &init.cap;
        let ud = init.qp_type == QpType::Ud;
        let side = (cap.max_send_sge > 1 || cap.max_recv_sge > 1 || cap.max_inline_data > 0 || ud)
            .then(|| {
                let inline_stride = cap.max_inline_data as usize;
                Box::new(QpSide {
                    sq_sges: SgeTable::new(n, cap.max_send_sge),
                    rq_sges: SgeTable::new(rq.slots(), cap.max_recv_sge),
                    inline: vec![0u8; n * inline_stride].into_boxed_slice(),
                    inline_stride,
                    atomic: Box::default(),
                    ud: if ud {
                        vec![None; n].into_boxed_slice()
                    } else {
                        Box::default()
                    },
                })
            });
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            state: QpState::Reset,
            attr: QpAttr::default(),
            pmtu: 1024,
            udp_sport: 0xC000,
            sq,
            rq,
            side,
            req: ReqState::default(),
            comp: CompState::default(),
            resp: RespState::new(1),
            active: false,
            drain_until: 0,
            sqd_event_pending: false,
            hdrs: HeaderCache::default(),
            timers: QpTimers::default(),
            cc: QpCc::new(cc),
        }
    }

    /// QPN.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// Transport service.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// Queue capacities it was created with.
    pub fn cap(&self) -> QpCap {
        self.cap
    }
    /// Attributes as last set.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }
    /// Path MTU in effect, bytes.
    pub fn pmtu(&self) -> u32 {
        self.pmtu
    }
    /// Send WQEs posted and not completed.
    pub fn sq_outstanding(&self) -> u64 {
        self.sq.len()
    }
    /// Receive WQEs posted and not consumed.
    pub fn rq_outstanding(&self) -> u64 {
        self.rq.len()
    }
    /// The transport state now: PSNs, MSNs, queue fill ([`QpInfo`]).
    pub fn info(&self) -> QpInfo {
        QpInfo {
            qpn: self.qpn,
            dest_qp_num: self.attr.dest_qp_num,
            qp_type: self.qp_type,
            state: self.state,
            pmtu: self.pmtu,
            sq_psn: self.req.psn.value(),
            rq_psn: self.resp.epsn.value(),
            msn: self.resp.msn,
            last_acked_psn: self.comp.psn.sub(1).value(),
            unacked_psns: self.req.psn.diff(self.comp.psn).max(0) as u32,
            peer_msn: self.comp.msn,
            ssn: self.req.ssn,
            sq_outstanding: self.sq.len(),
            rq_outstanding: self.rq.len(),
            retry_cnt_left: self.comp.retry_cnt,
            rnr_retry_left: self.comp.rnr_retry,
        }
    }

    /// Whether a posted send or receive WQE (not yet completed) has an SGE
    /// with `lkey` ([`crate::verbs::Device::dereg_mr`] refuses to drop
    /// external memory under it).
    pub(crate) fn references_lkey(&self, lkey: u32) -> bool {
        let sq = (self.sq.head()..self.sq.head() + self.sq.len())
            .filter(|&i| {
                self.sq
                    .get(i)
                    .is_some_and(|w| !w.flags.contains(SendFlags::INLINE))
            })
            .any(|i| self.sq_sges(i).iter().any(|s| s.lkey == lkey));
        sq || (self.rq.head()..self.rq.head() + self.rq.len())
            .any(|i| self.rq_sges(i).iter().any(|s| s.lkey == lkey))
    }

    /// The gather (scatter) list of send WQE `i`; empty if `i` is not
    /// queued.
    #[inline(always)]
    pub(crate) fn sq_sges(&self, i: u64) -> &[Sge] {
        let Some(w) = self.sq.get(i) else {
            return &[];
        };
        let n = usize::from(w.num_sge);
        match &self.side {
            Some(s) if n > 1 => s.sq_sges.list(self.sq.slot_of(i), &w.sge, n),
            _ => &core::slice::from_ref(&w.sge)[..n.min(1)],
        }
    }

    /// The inline payload of send WQE `i`, if it was posted with
    /// `IBV_SEND_INLINE`.
    #[inline(always)]
    pub(crate) fn sq_inline(&self, i: u64) -> Option<&[u8]> {
        let w = self.sq.get(i)?;
        if !w.flags.contains(SendFlags::INLINE) {
            return None;
        }
        let s = self.side.as_deref()?;
        let at = self.sq.slot_of(i) * s.inline_stride;
        s.inline.get(at..at + w.total_len as usize)
    }

    /// The compare (or add) and swap operands of atomic WQE `i`.
    pub(crate) fn sq_atomic(&self, i: u64) -> [u64; 2] {
        self.side
            .as_deref()
            .and_then(|s| s.atomic.get(self.sq.slot_of(i)))
            .copied()
            .unwrap_or_default()
    }

    /// The destination of UD send WQE `i`.
    pub(crate) fn sq_ud(&self, i: u64) -> Option<UdDest> {
        let s = self.side.as_deref()?;
        s.ud.get(self.sq.slot_of(i)).copied().flatten()
    }

    /// The scatter list of receive WQE `i`; empty if `i` is not queued.
    #[inline(always)]
    pub(crate) fn rq_sges(&self, i: u64) -> &[Sge] {
        let Some(w) = self.rq.get(i) else {
            return &[];
        };
        let n = w.num_sge as usize;
        match &self.side {
            Some(s) if n > 1 => s.rq_sges.list(self.rq.slot_of(i), &w.sge, n),
            _ => &core::slice::from_ref(&w.sge)[..n.min(1)],
        }
    }

    /// Reset every queue and transport state (modify to RESET; CASES R22).
    pub(crate) fn reset(&mut self) {
        self.sq.clear();
        self.rq.clear();
        self.req = ReqState::default();
        self.comp = CompState::default();
        self.resp = RespState::new(1);
        self.attr = QpAttr::default();
        self.hdrs.clear();
        self.sqd_event_pending = false;
    }

    /// Arm (`Some`), move or cancel (`None`) this QP's timer `kind` in the
    /// device's table.
    #[inline]
    pub(crate) fn set_timer(
        &mut self,
        timers: &mut TimerTable,
        kind: TimerKind,
        at: Option<Instant>,
    ) {
        timers.set(self.qpn, &mut self.timers, kind, at);
    }

    /// Validate and copy a send WR into the send queue.
    pub(crate) fn push_send(&mut self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        if wr.sg_list.len() > self.cap.max_send_sge as usize || wr.sg_list.len() > MAX_SGE {
            return Err(VerbsError::TooLarge);
        }
        let inline = wr.send_flags.contains(SendFlags::INLINE);
        if inline && wr.inline_data.len() > self.cap.max_inline_data as usize {
            return Err(VerbsError::TooLarge);
        }
        match (self.qp_type, wr.opcode) {
            (QpType::Ud, WrOpcode::Send | WrOpcode::SendWithImm) if wr.ud.is_none() => {
                return Err(VerbsError::InvalidAttribute("ud"));
            }
            (QpType::Ud, WrOpcode::Send | WrOpcode::SendWithImm) => {}
            (QpType::Ud, _) => return Err(VerbsError::BadOpcode),
            (QpType::Uc, op) if op.is_rd_atomic() || op == WrOpcode::SendWithInv => {
                return Err(VerbsError::BadOpcode)
            }
            _ => {}
        }
        let total_len: u64 = if inline {
            wr.inline_data.len() as u64
        } else {
            wr.sg_list.iter().map(|s| s.length as u64).sum()
        };
        if total_len > (1u64 << 31) {
            return Err(VerbsError::TooLarge);
        }
        let sig_all = self.sq_sig_all;
        let i = self.sq.tail;
        let slot = self.sq.slot_of(i);
        if self.sq.is_full() {
            return Err(VerbsError::QueueFull);
        }
        let atomic = wr.opcode.is_atomic();
        let mut sge = Sge::default();
        if let [s] = wr.sg_list {
            sge = *s;
        }
        if inline || atomic || wr.sg_list.len() > 1 || self.side.is_some() {
            let n = self.sq.slots();
            let side = self.side.get_or_insert_with(Box::default);
            if atomic && side.atomic.is_empty() {
                side.atomic = vec![[0; 2]; n].into_boxed_slice();
            }
            if inline {
                let at = slot * side.inline_stride;
                if let Some(d) = side.inline.get_mut(at..at + wr.inline_data.len()) {
                    d.copy_from_slice(wr.inline_data);
                }
            }
            if atomic {
                if let Some(a) = side.atomic.get_mut(slot) {
                    *a = [wr.compare_add, wr.swap];
                }
            }
            if let Some(u) = side.ud.get_mut(slot) {
                *u = wr.ud;
            }
            side.sq_sges.store(slot, &mut sge, wr.sg_list);
        }
        let w = self.sq.next_slot().ok_or(VerbsError::QueueFull)?;
        let mut flags = wr.send_flags;
        if sig_all {
            flags |= SendFlags::SIGNALED;
        }
        *w = SendWqe {
            wr_id: wr.wr_id,
            remote_addr: wr.remote_addr,
            sge,
            total_len: if wr.opcode.is_atomic() {
                8
            } else {
                total_len as u32
            },
            rkey: wr.rkey,
            imm_or_inv: if wr.opcode == WrOpcode::SendWithInv {
                wr.invalidate_rkey
            } else {
                wr.imm_data
            },
            first_psn: Psn::default(),
            npkts: 0,
            flags,
            opcode: wr.opcode,
            num_sge: wr.sg_list.len() as u8,
            started: false,
            sent: false,
            local_err: None,
        };
        self.sq.commit_push();
        Ok(())
    }

    /// Validate and copy a receive WR into the receive queue.
    pub(crate) fn push_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        if wr.sg_list.len() > self.cap.max_recv_sge as usize || wr.sg_list.len() > MAX_SGE {
            return Err(VerbsError::TooLarge);
        }
        let slot = self.rq.slot_of(self.rq.tail);
        let w = self.rq.next_slot().ok_or(VerbsError::QueueFull)?;
        let mut sge = Sge::default();
        match (&mut self.side, wr.sg_list) {
            (_, [s]) => sge = *s,
            (Some(side), list) => side.rq_sges.store(slot, &mut sge, list),
            (None, _) => {}
        }
        *w = RecvWqe {
            wr_id: wr.wr_id,
            sge,
            total_len: wr.sg_list.iter().map(|s| s.length as u64).sum(),
            num_sge: wr.sg_list.len() as u32,
        };
        self.rq.commit_push();
        Ok(())
    }
}

#[cfg(test)]
mod layout_tests {
    use super::SendWqe;
    use core::mem::offset_of;

    /// The per-packet fields share the slot's first line (see `SendWqe`).
    #[test]
    fn send_wqe_is_one_line() {
        assert_eq!(core::mem::align_of::<SendWqe>(), 64);
        assert!(offset_of!(SendWqe, local_err) < 64);
        assert_eq!(core::mem::size_of::<SendWqe>(), 64);
        assert_eq!(core::mem::size_of::<super::RecvWqe>(), 40);
    }
}
