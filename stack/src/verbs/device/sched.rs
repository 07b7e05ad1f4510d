//! The transmit scheduler and the timers of a device.
//!
//! [`Device::poll_transmit`] sends, in this order: a queued CNP (unless its
//! priority is paused), then the QPs on the active list round-robin, one
//! frame per turn. A QP of a paused priority keeps its place; a QP whose
//! DCQCN reaction point is active sends only when its pacer allows
//! (ACK-class responses excepted), else it leaves the list until its pacer
//! timer puts it back. Only QPs with work are on the list, so idle QPs cost
//! nothing per poll.
//!
//! The timers are the device's [`TimerTable`]: one entry per armed QP timer
//! (ACK, RNR, reaction point, pacer), so [`Device::poll_timeout`] is its
//! first deadline (or the pause expiry, if earlier).

use std::collections::VecDeque;

use super::Device;
use crate::backend::TxFrame;
use crate::cc::{CcConfig, NotificationPoint, QpCc, ReactionPoint};
use crate::pfc::classify::Trust;
use crate::pfc::pause::PauseState;
use crate::resources::config::DeviceConfig;
use crate::resources::inner::DeviceInner;
use crate::resources::timers::{TimerKind, TimerTable};
use crate::resources::types::QpType;
use crate::time::Instant;
use crate::transport::qp::Qp;
use crate::transport::rc;
use crate::wire::NetRepr;

/// What decides which frame leaves next (see the module docs).
#[derive(Debug)]
pub(super) struct Scheduler {
    /// QPNs with something to send, round-robin.
    pub active: VecDeque<u32>,
    /// QPs whose reaction point is active (paced); 0 = the fast path.
    paced: usize,
    /// The notification point: CNP rate limiting and the CNPs to send.
    pub np: NotificationPoint,
    /// Received PFC / PAUSE state: which priorities may not transmit.
    pub pause: PauseState,
    /// Some priority may still be paused (cleared once none is): keeps the
    /// unpaused transmit path to one test of a flag.
    pub pause_armed: bool,
}

impl Scheduler {
    pub fn new(cfg: &DeviceConfig) -> Scheduler {
        let np_flows = if cfg.cc.np_enabled {
            cfg.cc.np_max_flows
        } else {
            1
        };
        Scheduler {
            active: VecDeque::new(),
            paced: 0,
            np: NotificationPoint::new(np_flows),
            pause: PauseState::new(cfg.flow_control.pause),
            pause_armed: false,
        }
    }

    /// Put `qp` on the active list (once).
    #[inline]
    pub fn activate(&mut self, qp: &mut Qp) {
        if !qp.active {
            qp.active = true;
            self.active.push_back(qp.qpn);
        }
    }

    /// The mask of paused priorities at `now`, clearing `pause_armed` once
    /// no priority is paused any more.
    #[cold]
    #[inline(never)]
    pub fn refresh_pause(&mut self, now: Instant) -> u8 {
        self.pause.handle_timeout(now);
        let m = self.pause.paused_mask(now);
        if m == 0 {
            self.pause_armed = false;
        }
        m
    }

    /// After a reaction-point call on `qp`: keep the paced count, the pacer
    /// and the RP timer in step with the RP. A QP whose RP went idle is woken
    /// (it may have been waiting for its pacer).
    pub fn sync_cc(&mut self, timers: &mut TimerTable, qp: &mut Qp, now: Instant) {
        let active = qp.cc.rp.is_active();
        let mut wake = false;
        if active != qp.cc.paced {
            qp.cc.paced = active;
            if active {
                self.paced += 1;
                qp.cc.pacer.reset(now);
            } else {
                self.paced -= 1;
                qp.set_timer(timers, TimerKind::Pacer, None);
                wake = true;
            }
        }
        // The rate changed: a QP waiting for its pacer waits for the gap in
        // progress at the new rate (shorter after an increase).
        if qp.cc.paced && qp.timers.is_armed(TimerKind::Pacer) {
            let at = qp.cc.pacer.release_time(qp.cc.rp.rate());
            qp.set_timer(timers, TimerKind::Pacer, Some(at));
        }
        let at = qp.cc.rp.poll_timeout();
        qp.set_timer(timers, TimerKind::Rp, at);
        if wake {
            self.activate(qp);
        }
    }

    /// Congestion control of `qp` back to idle (RESET, destroy; its timers
    /// are already cancelled): reaction point idle, pacer reset, NP flows
    /// and queued CNPs forgotten (CASES R22).
    pub fn reset_cc(&mut self, cfg: &DeviceConfig, qp: &mut Qp) {
        self.np.purge_qp(qp.qpn);
        if qp.cc.paced {
            self.paced -= 1;
        }
        qp.cc = QpCc::new(&cfg.cc);
    }
}

/// The priority the peer gives QP `qp`'s frames ([`crate::verbs::FlowControlConfig::prio_map`]):
/// from the DSCP or PCP the header builder writes (the address vector's when
/// non-zero, else the configured data class). A UD QP's address vector is
/// per work request; it is classified by the configured data class.
fn qp_priority(cfg: &DeviceConfig, qp: &Qp) -> u8 {
    let map = &cfg.flow_control.prio_map;
    let av = (qp.qp_type != QpType::Ud).then_some(&qp.attr.ah_attr);
    match map.trust {
        Trust::Dscp => {
            let dscp = match av.map_or(0, |a| a.traffic_class >> 2) {
                0 => cfg.cc.data_dscp & 0x3F,
                d => d,
            };
            map.dscp[dscp as usize] & 7
        }
        Trust::Pcp => match av.map_or(Some(None), |a| a.vlan.map(Some)) {
            None => map.default_prio & 7,
            Some(Some(t)) if t.pcp != 0 => t.pcp & 7,
            Some(_) => cfg.cc.data_802p_prio & 7,
        },
    }
}

/// The priority the peer gives this port's CNPs (`cnp_dscp`, or
/// `cnp_802p_prio` under trust PCP).
fn cnp_priority(cfg: &DeviceConfig) -> u8 {
    let map = &cfg.flow_control.prio_map;
    match map.trust {
        Trust::Dscp => map.dscp[(cfg.cc.cnp_dscp & 0x3F) as usize] & 7,
        Trust::Pcp => cfg.cc.cnp_802p_prio & 7,
    }
}

/// One frame of a QP whose reaction point is active. ACK-class responses
/// (ACK, NAK, ATOMIC ACKNOWLEDGE) leave at once and are not charged; anything
/// else waits for the pacer (`Err(())`: a pacer timer is armed at the release
/// time) and, once sent, is charged to the pacer (frame length plus
/// `pacer_overhead_bytes`) and to the reaction point's byte counter.
#[inline(never)]
fn produce_paced(
    qp: &mut Qp,
    ctx: &mut DeviceInner,
    now: Instant,
    buf: &mut [u8],
) -> Result<Option<usize>, ()> {
    if qp.qp_type == QpType::Rc && rc::responder::next_is_ack(qp) {
        if let Some(n) = rc::responder::produce(qp, ctx, buf) {
            return Ok(Some(n));
        }
    }
    let rate = qp.cc.rp.rate();
    if !qp.cc.pacer.is_ready(now, rate) {
        let at = qp.cc.pacer.release_time(rate);
        qp.set_timer(&mut ctx.timers, TimerKind::Pacer, Some(at));
        return Err(());
    }
    // Released: a pacer timer still armed (the QP was woken another way)
    // has nothing left to do.
    qp.set_timer(&mut ctx.timers, TimerKind::Pacer, None);
    let sent = crate::transport::produce(qp, ctx, now, buf);
    if let Some(n) = sent {
        let charged = n as u64 + u64::from(ctx.cfg.cc.pacer_overhead_bytes);
        qp.cc.pacer.on_sent(now, charged, rate);
        qp.cc.rp.on_bytes_sent(now, n as u64);
    }
    Ok(sent)
}

impl Device {
    /// Write the next frame to send into `buf` and return its length, or `None`
    /// when nothing is ready. `buf` must hold a whole frame (PMTU + 90 bytes).
    ///
    /// Queued CNPs go first. A QP whose DCQCN reaction point is active sends
    /// only when its pacer allows (ACK-class responses excepted); otherwise
    /// it is skipped and a timer is armed at its release time. Releases due
    /// by `now` take effect here as well as in [`Device::handle_timeout`].
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let paused = if self.sched.pause_armed {
            self.sched.refresh_pause(now)
        } else {
            0
        };
        if self.sched.np.has_pending() && paused & (1 << cnp_priority(&self.inner.cfg)) == 0 {
            if let Some(n) = self.emit_cnp(buf) {
                return Some(n);
            }
        }
        if self.inner.timers.has_pacers() {
            self.release_pacers(now);
        }
        let mut budget = self.sched.active.len();
        while budget > 0 {
            budget -= 1;
            let qpn = self.sched.active.pop_front()?;
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if paused != 0 && paused & (1 << qp_priority(&self.inner.cfg, qp)) != 0 {
                // Its priority is paused: it keeps its place on the active
                // list and sends once the pause ends (`poll_timeout`).
                self.sched.active.push_back(qpn);
                continue;
            }
            let ctx = &mut self.inner;
            let paced = self.sched.paced > 0 && qp.cc.paced;
            let sent = if paced {
                match produce_paced(qp, ctx, now, buf) {
                    Ok(sent) => sent,
                    Err(()) => {
                        // Not released yet: off the active list until the
                        // pacer timer fires.
                        qp.active = false;
                        continue;
                    }
                }
            } else {
                crate::transport::produce(qp, ctx, now, buf)
            };
            crate::transport::check_drained(qp, ctx);
            match sent {
                Some(n) => {
                    ctx.counters.sent_pkts += 1;
                    self.sched.active.push_back(qpn);
                    if paced {
                        self.sched.sync_cc(&mut ctx.timers, qp, now);
                    }
                    return Some(n);
                }
                None => {
                    qp.active = false;
                    if paced {
                        self.sched.sync_cc(&mut ctx.timers, qp, now);
                    }
                }
            }
        }
        None
    }

    /// As [`Device::poll_transmit`], but a packet whose payload is one
    /// contiguous range of a shared MR ([`Device::reg_mr_shared`]) of at
    /// least [`DeviceConfig::zero_copy_min_bytes`] bytes comes back as
    /// [`TxFrame::Gather`]: only the headers are written into `hdr_buf`, the
    /// payload is named by reference (an `Arc` clone that pins the memory
    /// until the caller drops it, e.g. when the driver frees the frame), and
    /// the pad bytes and ICRC are in the returned tail. Everything else is
    /// [`TxFrame::Whole`], written whole into `hdr_buf` as `poll_transmit`
    /// does, so `hdr_buf` must still hold a whole frame (PMTU + 90 bytes).
    /// `headers | payload | tail` is byte for byte the frame `poll_transmit`
    /// would have produced.
    pub fn poll_transmit_gather(&mut self, now: Instant, hdr_buf: &mut [u8]) -> Option<TxFrame> {
        self.inner.zc.min = self.inner.cfg.zero_copy_min_bytes;
        self.inner.zc.frame = None;
        let n = self.poll_transmit(now, hdr_buf);
        self.inner.zc.min = 0;
        let gather = self.inner.zc.frame.take();
        let n = n?;
        match gather {
            Some(g) => {
                debug_assert_eq!(g.len(), n);
                self.inner.zc.frames += 1;
                Some(g)
            }
            None => Some(TxFrame::Whole(n)),
        }
    }

    /// Frames [`Device::poll_transmit_gather`] returned as
    /// [`TxFrame::Gather`] (payload sent by reference).
    pub fn tx_zero_copy_frames(&self) -> u64 {
        self.inner.zc.frames
    }

    /// Send the next queued CNP into `buf`.
    #[cold]
    #[inline(never)]
    fn emit_cnp(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(c) = self.sched.np.pop() {
            let mut repr = c.repr;
            if let NetRepr::Ipv4(ip) = &mut repr.net {
                ip.ident = self.inner.ident.next();
            }
            if let Ok(n) = repr.emit(buf, &[]) {
                self.inner.counters.np_cnp_sent += 1;
                self.inner.counters.sent_pkts += 1;
                return Some(n);
            }
        }
        None
    }

    /// Priorities the port may not transmit at `now` (bit n = priority n).
    pub fn paused_priorities(&self, now: Instant) -> u8 {
        if self.sched.pause_armed {
            self.sched.pause.paused_mask(now)
        } else {
            0
        }
    }

    /// The earliest deadline at which [`Device::handle_timeout`] has work, or
    /// `None` when no timer is armed (an idle device has none). Includes the
    /// pacer release of every QP waiting for its pacer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.inner.timers.next();
        if !self.sched.pause_armed {
            return t;
        }
        match self.sched.pause.poll_timeout() {
            None => t,
            Some(p) => Some(t.map_or(p, |t| t.min(p))),
        }
    }

    /// Put every QP whose pacer release is due by `now` back on the active
    /// list.
    #[inline(never)]
    fn release_pacers(&mut self, now: Instant) {
        while let Some((t, qpn, kind)) = self.inner.timers.pop_due(now, true) {
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.timers.fired(kind, t);
                self.sched.activate(qp);
            }
        }
    }

    /// Run the timers due at `now` (ACK timeouts, RNR waits, DCQCN rate
    /// increases and deferred cuts, pacer releases).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.inner.timers.has_pacers() {
            self.release_pacers(now);
        }
        if self.sched.pause_armed {
            self.sched.refresh_pause(now);
        }
        while let Some((t, qpn, kind)) = self.inner.timers.pop_due(now, false) {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            // The entry is gone; clear the QP's matching deadline (the handler
            // may arm the timer again).
            if !qp.timers.fired(kind, t) {
                continue;
            }
            let ctx = &mut self.inner;
            if kind == TimerKind::Rp {
                qp.cc.rp.handle_timeout(now);
                self.sched.sync_cc(&mut ctx.timers, qp, now);
                continue;
            }
            let wake = rc::completer::on_timer(qp, ctx, kind);
            crate::transport::check_drained(qp, ctx);
            if wake {
                self.sched.activate(qp);
            }
        }
    }

    /// QPNs currently on the active list (for tests of idle cost).
    pub fn active_qps(&self) -> usize {
        self.sched.active.len()
    }

    /// The congestion-control configuration (`DeviceConfig::cc`).
    pub fn cc_config(&self) -> &CcConfig {
        &self.inner.cfg.cc
    }

    /// The current DCQCN rate of QP `qpn`, Mbit/s, while its reaction point
    /// limits it; `None` when the QP is unlimited (line rate: no CNP yet, or
    /// recovered) or does not exist.
    pub fn qp_rate_mbps(&self, qpn: u32) -> Option<f64> {
        self.qps.get(&qpn).and_then(|q| q.cc.rp.limit())
    }

    /// The DCQCN reaction point of QP `qpn` (rate, target rate, α, stages),
    /// idle or active; `None` if the QP does not exist. Its α is as of the
    /// RP's last event: use [`ReactionPoint::alpha_at`] for the value now.
    pub fn reaction_point(&self, qpn: u32) -> Option<&ReactionPoint> {
        self.qps.get(&qpn).map(|q| &q.cc.rp)
    }

    /// When the pacer of QP `qpn` next lets a frame leave: `None` unless the
    /// QP is paced and waiting for its pacer.
    pub fn qp_pacer_release(&self, qpn: u32) -> Option<Instant> {
        self.qps
            .get(&qpn)
            .and_then(|q| q.timers.get(TimerKind::Pacer))
    }
}
