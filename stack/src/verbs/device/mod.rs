//! The device: the sans-IO entry point of the stack.
//!
//! A [`Device`] owns protection domains, memory regions, completion queues and
//! queue pairs. It never does I/O and never reads a clock; the caller drives it:
//!
//! 1. [`Device::handle_frame`] for every received frame, with the current time;
//! 2. [`Device::poll_transmit`] until it returns `None`, sending each frame;
//! 3. [`Device::poll_timeout`] for the next deadline, and
//!    [`Device::handle_timeout`] once it has passed;
//! 4. [`Device::poll_cq`] and [`Device::poll_event`] for completions and events.
//!
//! Received frames are checked as a host's network stack and rxe check them
//! (see [`Device::handle_frame`]): the destination MAC must be the port's
//! ([`DeviceConfig::mac`], unless [`DeviceConfig::promiscuous`]), the
//! destination IP one of the GIDs, the VLAN that of the QP's path (or the
//! port's, [`DeviceConfig::vlan`], for UD); every frame that is not taken
//! increments exactly one named counter ([`Counters`], the parser's drop
//! counters, or the pause counters).
//!
//! Idle QPs cost nothing per poll: only QPs with work are on the active list,
//! and timers sit in an ordered set with exactly one entry per armed QP timer
//! (a cancelled timer is removed at once), so [`Device::poll_timeout`] is exact
//! and `None` when no timer is armed.
//!
//! # Inside
//!
//! After smoltcp's `Interface` over `InterfaceInner`: the `Device` holds its
//! QPs (each with its engines' state, its timers and its congestion
//! control), its transmit scheduler and the state the transport engines
//! share (`DeviceInner`, [`crate::resources`]: configuration, MR and CQ
//! tables, counters, events, the timer table, header building); an engine
//! call gets one QP and that state. The parts:
//!
//! - this module: the handle/poll API over the verbs objects (PDs, MRs, CQs,
//!   QPs, posting);
//! - `rx`: the receive checks, as rxe's `rxe_rcv` / `hdr_check` steps
//!   (`check_keys`, `check_type_state`, `check_addr`), then the transport;
//! - `sched`: the transmit scheduler (CNPs first, the active list, pause,
//!   the pacer) and the timers;
//! - `modify`: `modify_qp` along the QP state machine.
//!
//! Congestion control ([`crate::cc`]): CE-marked packets make the device queue
//! CNPs (sent by `poll_transmit` before anything else); received CNPs drive
//! the DCQCN reaction point of their QP, and a QP with an active reaction
//! point is paced: `poll_transmit` skips it until its pacer releases it, and
//! the release time is one of the timers `poll_timeout` reports.
//!
//! Flow control ([`crate::pfc`]): received PFC and 802.3x PAUSE frames stop
//! the paused priorities at once (QPs of a paused priority, and CNPs when
//! theirs is, are skipped by `poll_transmit`); the pause expiry is one of the
//! deadlines `poll_timeout` reports, and XON resumes at once.

mod modify;
mod rx;
mod sched;

use std::sync::Arc;

use crate::counters::Counters;
use crate::resources::cq::Cq;
use crate::resources::inner::DeviceInner;
use crate::resources::keymap::KeyMap;
use crate::resources::mr::{Mr, MrBuffer, MrMem};
use crate::resources::timers::TimerKind;
use crate::resources::types::{AccessFlags, Mtu, QpState};
use crate::resources::wr::{RecvWr, SendWr, Wc};
use crate::transport::av::Gid;
use crate::transport::qp::Qp;
use crate::wire::DropCounters;

use super::qp::{QpInfo, QpInitAttr, VerbsError};
pub use crate::resources::config::{AsyncEvent, DeviceConfig, FlowControlConfig};
use sched::Scheduler;

/// lkey and rkey of a registered MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// A RoCEv2 device (one port).
#[derive(Debug)]
pub struct Device {
    /// The state the transport engines share.
    inner: DeviceInner,
    /// Every QP, by QPN.
    qps: KeyMap<u32, Qp>,
    /// The transmit scheduler: active list, pause state, CNPs to send.
    sched: Scheduler,
    drops: DropCounters,
    active_mtu: Mtu,
    next_pd: u32,
    pds: Vec<u32>,
    next_cq: u32,
    next_qpn: u32,
}

impl Device {
    /// A device with `cfg`.
    pub fn new(cfg: DeviceConfig) -> Device {
        let active_mtu = Mtu::for_netdev(cfg.netdev_mtu).unwrap_or(Mtu::Mtu256);
        Device {
            sched: Scheduler::new(&cfg),
            inner: DeviceInner::new(cfg),
            qps: KeyMap::default(),
            drops: DropCounters::default(),
            active_mtu,
            next_pd: 0,
            pds: Vec::new(),
            next_cq: 0,
            next_qpn: 0x10,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.inner.cfg
    }
    /// Change the responder's ACK coalescing interval (packets; 0 = ACK only
    /// on AckReq) while traffic flows: the per-QP packet counters carry on,
    /// and a QP whose counter already reached the new interval ACKs on its
    /// next packet (CASES R14).
    pub fn set_ack_coalesce(&mut self, packets: u32) {
        self.inner.cfg.ack_coalesce = packets;
    }
    /// The active path MTU of the port (from the netdev MTU).
    pub fn active_mtu(&self) -> Mtu {
        self.active_mtu
    }
    /// GID at `index`.
    pub fn gid(&self, index: usize) -> Option<Gid> {
        self.inner.cfg.gids.get(index).copied()
    }
    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }
    /// Frames dropped by the wire parser, per reason.
    pub fn drop_counters(&self) -> &DropCounters {
        &self.drops
    }

    /// Allocate a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&mut self) -> u32 {
        self.next_pd += 1;
        self.pds.push(self.next_pd);
        self.next_pd
    }

    /// Free a protection domain (`ibv_dealloc_pd`); `Busy` while MRs or QPs use it.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<(), VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        if self.inner.mrs.pd_has_mrs(pd) || self.qps.values().any(|q| q.pd == pd) {
            return Err(VerbsError::Busy);
        }
        self.pds.retain(|p| *p != pd);
        Ok(())
    }

    /// Register `buf` as an MR at I/O virtual address `iova` (`ibv_reg_mr_iova`).
    /// lkey and rkey are chosen by the device.
    pub fn reg_mr(
        &mut self,
        pd: u32,
        buf: Vec<u8>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        let key = self.inner.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Owned(buf), iova, access, key, key)
    }

    /// Register memory the caller shares with the device (`ibv_reg_mr_iova`
    /// of read-only memory) at I/O virtual address `iova`: the MR keeps a
    /// clone of `mem` until [`Device::dereg_mr`], and transmit paths may pin
    /// more clones while a driver reads the bytes
    /// ([`Device::poll_transmit_gather`]).
    ///
    /// The stack never writes a shared MR, so `access` may not contain
    /// LOCAL_WRITE, REMOTE_WRITE or REMOTE_ATOMIC (IBTA 1.7 §10.6.3.1 access
    /// rights; the MR can only be a source: SEND and RDMA WRITE payloads,
    /// RDMA READ responses). [`Mr::as_mut_slice`] of it is empty.
    ///
    /// # Errors
    /// `InvalidAttribute("access")` for a write or atomic right, `NotFound`
    /// for an unknown PD, `InvalidAttribute("iova")` when `iova + len`
    /// overflows.
    pub fn reg_mr_shared(
        &mut self,
        pd: u32,
        mem: Arc<[u8]>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        if access.intersects(
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
        ) {
            return Err(VerbsError::InvalidAttribute("access"));
        }
        let key = self.inner.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Shared(mem), iova, access, key, key)
    }

    /// Register memory the caller keeps owning (`ibv_reg_mr` of an
    /// application's buffer) at I/O virtual address `iova`: the device reads
    /// and writes it in place through `mem` ([`MrBuffer`]) with the usual
    /// bounds and access checks, and drops `mem` at [`Device::dereg_mr`].
    ///
    /// # Errors
    /// As [`Device::reg_mr`]: `NotFound` for an unknown PD,
    /// `InvalidAttribute("access")` for a remote write or atomic right
    /// without LOCAL_WRITE, `InvalidAttribute("iova")` when `iova + len`
    /// overflows.
    pub fn reg_mr_external(
        &mut self,
        pd: u32,
        mem: Box<dyn MrBuffer>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, VerbsError> {
        let key = self.inner.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::External(mem), iova, access, key, key)
    }

    /// Register `buf` with a chosen rkey (replay and test tools that must match
    /// a capture's R_Keys). `KeyInUse` if the rkey is taken.
    pub fn reg_mr_with_rkey(
        &mut self,
        pd: u32,
        buf: Vec<u8>,
        iova: u64,
        access: AccessFlags,
        rkey: u32,
    ) -> Result<MrKeys, VerbsError> {
        if self.inner.mrs.rkey_in_use(rkey) {
            return Err(VerbsError::KeyInUse);
        }
        let lkey = self.inner.mrs.fresh_key();
        self.reg_mr_keys(pd, MrMem::Owned(buf), iova, access, lkey, rkey)
    }

    /// Register bytes `window` of `buf` as an MR at I/O virtual address
    /// `iova` (byte `window.start` of `buf` is at `iova`); the bytes outside
    /// the window are not part of the MR, so an access past either end of
    /// the window is refused as out of range (IBTA 1.7 §9.7.4.1.5 C9-88:
    /// the responder checks VA and length against the region). For callers
    /// that align a region inside a larger allocation. `rkey`: the R_Key to
    /// use (e.g. a random one), or `None` to let the device choose (then
    /// lkey = rkey). [`Device::dereg_mr`] returns the whole `buf`.
    ///
    /// # Errors
    /// `InvalidAttribute("window")` when the window is not inside `buf`;
    /// `KeyInUse` when `rkey` is taken; otherwise as [`Device::reg_mr`].
    pub fn reg_mr_window(
        &mut self,
        pd: u32,
        buf: Vec<u8>,
        window: std::ops::Range<usize>,
        iova: u64,
        access: AccessFlags,
        rkey: Option<u32>,
    ) -> Result<MrKeys, VerbsError> {
        if window.start > window.end || window.end > buf.len() {
            return Err(VerbsError::InvalidAttribute("window"));
        }
        let (lkey, rkey) = match rkey {
            Some(r) if self.inner.mrs.rkey_in_use(r) => return Err(VerbsError::KeyInUse),
            Some(r) => (self.inner.mrs.fresh_key(), r),
            None => {
                let k = self.inner.mrs.fresh_key();
                (k, k)
            }
        };
        let mem = MrMem::Window {
            start: window.start,
            len: window.end - window.start,
            buf,
        };
        self.reg_mr_keys(pd, mem, iova, access, lkey, rkey)
    }

    fn reg_mr_keys(
        &mut self,
        pd: u32,
        buf: MrMem,
        iova: u64,
        access: AccessFlags,
        lkey: u32,
        rkey: u32,
    ) -> Result<MrKeys, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        // IBTA C10-?: remote write/atomic require local write.
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute("access"));
        }
        if iova.checked_add(buf.bytes().len() as u64).is_none() {
            return Err(VerbsError::InvalidAttribute("iova"));
        }
        self.inner.mrs.insert(Mr {
            pd,
            buf,
            iova,
            lkey,
            rkey,
            access,
        });
        Ok(MrKeys { lkey, rkey })
    }

    /// Deregister an MR and return its memory (`ibv_dereg_mr`). A shared MR
    /// ([`Device::reg_mr_shared`]) returns an empty `Vec`: its memory stays
    /// with the caller's `Arc` (the device drops its clone; frames still
    /// held by a driver keep theirs until freed). An external MR
    /// ([`Device::reg_mr_external`]) returns an empty `Vec` and drops its
    /// [`MrBuffer`]; while a posted send or receive WQE of any QP still
    /// names its lkey it is refused with `Busy` (`EBUSY`), so the caller's
    /// memory is never used after the caller took it back.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<Vec<u8>, VerbsError> {
        if matches!(
            self.inner.mrs.get(lkey).map(|m| &m.buf),
            Some(MrMem::External(_))
        ) && self.qps.values().any(|q| q.references_lkey(lkey))
        {
            return Err(VerbsError::Busy);
        }
        self.inner
            .mrs
            .remove(lkey)
            .map(|m| match m.buf {
                MrMem::Owned(v) | MrMem::Window { buf: v, .. } => v,
                MrMem::Shared(_) | MrMem::External(_) => Vec::new(),
            })
            .ok_or(VerbsError::NotFound)
    }

    /// The MR with `lkey`.
    pub fn mr(&self, lkey: u32) -> Option<&Mr> {
        self.inner.mrs.get(lkey)
    }
    /// The MR with `lkey`, writable.
    pub fn mr_mut(&mut self, lkey: u32) -> Option<&mut Mr> {
        self.inner.mrs.get_mut(lkey)
    }

    /// Create a CQ holding `cqe` completions (`ibv_create_cq`).
    pub fn create_cq(&mut self, cqe: usize) -> u32 {
        self.next_cq += 1;
        self.inner.cqs.insert(self.next_cq, Cq::new(cqe.max(1)));
        self.next_cq
    }
    /// Destroy a CQ (`ibv_destroy_cq`): `Busy` while a QP sends or receives
    /// through it, `NotFound` for an unknown CQ. Its completions are dropped.
    pub fn destroy_cq(&mut self, cq: u32) -> Result<(), VerbsError> {
        if !self.inner.cqs.contains_key(&cq) {
            return Err(VerbsError::NotFound);
        }
        if self
            .qps
            .values()
            .any(|q| q.send_cq == cq || q.recv_cq == cq)
        {
            return Err(VerbsError::Busy);
        }
        self.inner.cqs.remove(&cq);
        Ok(())
    }
    /// The CQ.
    pub fn cq(&self, cq: u32) -> Option<&Cq> {
        self.inner.cqs.get(&cq)
    }
    /// Take up to `out.len()` completions (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: u32, out: &mut [Wc]) -> usize {
        self.inner.cqs.get_mut(&cq).map_or(0, |c| c.poll(out))
    }

    /// Create a QP (`ibv_create_qp`) in RESET.
    pub fn create_qp(&mut self, pd: u32, init: &QpInitAttr) -> Result<u32, VerbsError> {
        loop {
            self.next_qpn = (self.next_qpn + 1) & 0x00FF_FFFF;
            if self.next_qpn < 0x11 {
                self.next_qpn = 0x11;
            }
            if !self.qps.contains_key(&self.next_qpn) {
                break;
            }
        }
        self.create_qp_with_qpn(pd, init, self.next_qpn)
    }

    /// Create a QP with a chosen QPN (replaying captures). `KeyInUse` if taken.
    pub fn create_qp_with_qpn(
        &mut self,
        pd: u32,
        init: &QpInitAttr,
        qpn: u32,
    ) -> Result<u32, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound);
        }
        if !self.inner.cqs.contains_key(&init.send_cq)
            || !self.inner.cqs.contains_key(&init.recv_cq)
        {
            return Err(VerbsError::NotFound);
        }
        let qpn = qpn & 0x00FF_FFFF;
        if qpn < 2 || qpn == 0x00FF_FFFF || self.qps.contains_key(&qpn) {
            return Err(VerbsError::KeyInUse);
        }
        if init.cap.max_send_sge as usize > crate::resources::wr::MAX_SGE
            || init.cap.max_recv_sge as usize > crate::resources::wr::MAX_SGE
            || init.cap.max_inline_data as usize > crate::resources::wr::MAX_INLINE
            || init.cap.max_send_wr == 0
            || init.cap.max_recv_wr == 0
        {
            return Err(VerbsError::TooLarge);
        }
        self.qps
            .insert(qpn, Qp::new(qpn, pd, init, &self.inner.cfg.cc));
        Ok(qpn)
    }

    /// Destroy a QP (`ibv_destroy_qp`). Its QPN may be reused; nothing of its
    /// state survives (CASES R22).
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let mut qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound)?;
        self.reset_timers_and_cc(&mut qp);
        if qp.active {
            self.sched.active.retain(|q| *q != qpn);
        }
        Ok(())
    }

    /// Every timer of `qp` cancelled and its congestion control back to
    /// idle: reaction point idle, pacer reset, NP flows and queued CNPs
    /// forgotten (RESET, destroy; CASES R22).
    fn reset_timers_and_cc(&mut self, qp: &mut Qp) {
        let timers = &mut self.inner.timers;
        for kind in [
            TimerKind::Ack,
            TimerKind::Rnr,
            TimerKind::Rp,
            TimerKind::Pacer,
        ] {
            qp.set_timer(timers, kind, None);
        }
        self.sched.reset_cc(&self.inner.cfg, qp);
    }

    /// The QP.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn)
    }

    /// The transport state of QP `qpn` now (`ibv_query_qp`'s live PSNs as
    /// rxe reports them, and what `rdma res show qp` prints: `sq-psn`,
    /// `rq-psn`; plus the MSNs and the last acknowledged PSN); `None` if the
    /// QP does not exist. See [`QpInfo`].
    pub fn query_qp(&self, qpn: u32) -> Option<QpInfo> {
        self.qps.get(&qpn).map(Qp::info)
    }

    /// Post a send work request (`ibv_post_send`). In RESET, INIT or RTR the
    /// call fails; in ERR the WR is accepted and completes at once with
    /// `WR_FLUSH_ERR` (CASES R18: never hangs).
    pub fn post_send(&mut self, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound)?;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(VerbsError::BadState(s)),
        }
        qp.push_send(wr)?;
        if qp.state == QpState::Err {
            crate::transport::enter_error(qp, &mut self.inner);
        } else {
            self.sched.activate(qp);
        }
        Ok(())
    }

    /// Post a receive work request (`ibv_post_recv`). Not in RESET; in ERR it
    /// completes at once with `WR_FLUSH_ERR`.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound)?;
        if qp.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        qp.push_recv(wr)?;
        if qp.state == QpState::Err {
            crate::transport::enter_error(qp, &mut self.inner);
        }
        Ok(())
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.inner.events.pop_front()
    }
}
