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

/// A send queue entry: the work request plus the requester's bookkeeping.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub(crate) struct SendWqe {
    // The fields every packet of a SEND/WRITE reads come first, in one
    // 64-byte line (`repr(C, align(64))` keeps them there): the requester
    // reads a slot some hundreds of WQEs after `post_send` wrote it, mostly
    // from L2, and with the compiler's field order its reads touched four
    // of the slot's seven lines.
    pub wr_id: u64,
    pub remote_addr: u64,
    pub num_sge: usize,
    pub total_len: u32,
    pub rkey: u32,
    pub imm: u32,
    pub inv_rkey: u32,
    /// PSN of the first packet, once the WQE has been sent.
    pub first_psn: Psn,
    /// PSNs the WQE occupies (READ: response packets).
    pub npkts: u32,
    pub flags: SendFlags,
    pub opcode: WrOpcode,
    /// Whether `first_psn`/`npkts` are assigned.
    pub started: bool,
    /// Whether the whole WQE has been handed to the wire at least once.
    pub sent: bool,
    /// A local error found while building its packets (e.g. `LOC_PROT_ERR`
    /// for a bad lkey): the WQE is not sent further and completes with this
    /// status once everything before it is acknowledged.
    pub local_err: Option<WcStatus>,
    pub compare_add: u64,
    pub sges: [Sge; MAX_SGE],
    pub swap: u64,
    pub inline: Vec<u8>,
    pub ud: Option<UdDest>,
}

impl Default for SendWqe {
    fn default() -> Self {
        SendWqe {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::empty(),
            sges: [Sge::default(); MAX_SGE],
            num_sge: 0,
            inline: Vec::new(),
            total_len: 0,
            imm: 0,
            inv_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            first_psn: Psn::default(),
            npkts: 0,
            started: false,
            sent: false,
            local_err: None,
        }
    }
}

impl SendWqe {
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge]
    }
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    pub fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }
}

/// A receive queue entry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: [Sge; MAX_SGE],
    pub num_sge: usize,
    pub total_len: u64,
}

impl RecvWqe {
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge]
    }
}

/// A fixed-capacity ring addressed by absolute 64-bit indices: slots are
/// allocated once at QP creation, so posting allocates nothing. The slot
/// array is a power of two long (index by mask, not division); at most
/// `cap` entries are in use.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    slots: Vec<T>,
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
            slots: vec![T::default(); n],
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
        let sq = ring(self.cap.max_send_wr)
            * (size_of::<SendWqe>() as u64 + u64::from(self.cap.max_inline_data));
        let rq = ring(self.cap.max_recv_wr) * size_of::<RecvWqe>() as u64;
        let res = u64::from(max_dest_rd_atomic.max(1)).next_power_of_two();
        let resp =
            res * size_of::<Resource>() as u64 + (2 * res + 4) * size_of::<RespItem>() as u64;
        let fixed = size_of::<Qp>() + 2 * 64;
        fixed as u64 + sq + rq + resp
    }
}

impl Qp {
    pub(crate) fn new(qpn: u32, pd: u32, init: &QpInitAttr, cc: &CcConfig) -> Qp {
        let mut sq = Ring::<SendWqe>::new(init.cap.max_send_wr as usize);
        // Inline buffers are allocated once here, never on post.
        for s in sq.slots.iter_mut() {
            s.inline = Vec::with_capacity(init.cap.max_inline_data as usize);
        }
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
            rq: Ring::new(init.cap.max_recv_wr as usize),
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
            .filter_map(|i| self.sq.get(i))
            .any(|w| {
                !w.flags.contains(SendFlags::INLINE) && w.sges().iter().any(|s| s.lkey == lkey)
            });
        sq || (self.rq.head()..self.rq.head() + self.rq.len())
            .filter_map(|i| self.rq.get(i))
            .any(|w| w.sges().iter().any(|s| s.lkey == lkey))
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
        let slot = self.sq.next_slot().ok_or(VerbsError::QueueFull)?;
        slot.wr_id = wr.wr_id;
        slot.opcode = wr.opcode;
        slot.flags = wr.send_flags;
        if sig_all {
            slot.flags |= SendFlags::SIGNALED;
        }
        slot.num_sge = wr.sg_list.len();
        if let ([d, ..], [sge]) = (&mut slot.sges, wr.sg_list) {
            // The common single-SGE WR: a 16-byte store, not a memcpy call.
            *d = *sge;
        } else {
            slot.sges[..wr.sg_list.len()].copy_from_slice(wr.sg_list);
        }
        slot.inline.clear();
        if inline {
            slot.inline.extend_from_slice(wr.inline_data);
        }
        slot.total_len = if wr.opcode.is_atomic() {
            8
        } else {
            total_len as u32
        };
        slot.imm = wr.imm_data;
        slot.inv_rkey = wr.invalidate_rkey;
        slot.remote_addr = wr.remote_addr;
        slot.rkey = wr.rkey;
        slot.compare_add = wr.compare_add;
        slot.swap = wr.swap;
        slot.ud = wr.ud;
        slot.started = false;
        slot.sent = false;
        slot.local_err = None;
        slot.npkts = 0;
        self.sq.commit_push();
        Ok(())
    }

    /// Validate and copy a receive WR into the receive queue.
    pub(crate) fn push_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        if wr.sg_list.len() > self.cap.max_recv_sge as usize || wr.sg_list.len() > MAX_SGE {
            return Err(VerbsError::TooLarge);
        }
        let slot = self.rq.next_slot().ok_or(VerbsError::QueueFull)?;
        slot.wr_id = wr.wr_id;
        slot.num_sge = wr.sg_list.len();
        if let ([d, ..], [sge]) = (&mut slot.sges, wr.sg_list) {
            // The common single-SGE WR: a 16-byte store, not a memcpy call.
            *d = *sge;
        } else {
            slot.sges[..wr.sg_list.len()].copy_from_slice(wr.sg_list);
        }
        slot.total_len = wr.sg_list.iter().map(|s| s.length as u64).sum();
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
    fn send_wqe_hot_fields_fit_the_first_line() {
        assert_eq!(core::mem::align_of::<SendWqe>(), 64);
        assert!(offset_of!(SendWqe, local_err) < 64);
        assert_eq!(offset_of!(SendWqe, sges), 64);
    }
}
