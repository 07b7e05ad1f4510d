//! Timers: one table per QP indexed by kind, and one ordered index of every
//! armed timer of the device.
//!
//! After quinn-proto's `TimerTable` (one per connection; `poll_timeout` is
//! its minimum): each QP keeps its deadlines in a [`QpTimers`] indexed by
//! [`TimerKind`], and the device's [`TimerTable`] holds exactly one entry
//! `(deadline, QPN, kind)` per armed QP timer, so the earliest deadline of
//! the device is the first entry (exact, and `None` when nothing is armed:
//! idle QPs cost nothing). [`TimerTable::set`] is the only place a deadline
//! changes; it keeps the QP's table and the index in agreement (a
//! cancelled timer leaves the index at once).

use std::collections::BTreeSet;

use crate::time::Instant;

/// Which timer of a QP. The order is the order of timers due at the same
/// instant on the same QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// Local ACK timeout (IBTA 1.7 §9.7.6.1.3): the completer retries.
    Ack = 0,
    /// End of an RNR wait (IBTA 1.7 §9.7.5.2.8): the requester resends.
    Rnr = 1,
    /// The DCQCN reaction point's next event (rate increase, deferred cut).
    Rp = 2,
    /// The pacer lets the QP send again.
    Pacer = 3,
}

impl TimerKind {
    const COUNT: usize = 4;
}

/// The deadlines of one QP, indexed by [`TimerKind`]; `None`: not armed.
/// Changed only through [`TimerTable::set`] (and [`QpTimers::fired`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QpTimers([Option<Instant>; TimerKind::COUNT]);

impl QpTimers {
    /// The deadline of timer `kind`.
    #[inline]
    pub fn get(&self, kind: TimerKind) -> Option<Instant> {
        self.0[kind as usize]
    }

    /// Whether timer `kind` is armed.
    #[inline]
    pub fn is_armed(&self, kind: TimerKind) -> bool {
        self.0[kind as usize].is_some()
    }

    /// The index entry `(t, kind)` of this QP was taken out as due: clear
    /// the slot if it still holds `t`. Returns whether it did (a stale
    /// entry, which cannot happen while every change goes through
    /// [`TimerTable::set`], fires nothing).
    #[inline]
    pub fn fired(&mut self, kind: TimerKind, t: Instant) -> bool {
        let slot = &mut self.0[kind as usize];
        if *slot == Some(t) {
            *slot = None;
            true
        } else {
            false
        }
    }
}

/// Every armed timer of a device (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TimerTable {
    index: BTreeSet<(Instant, u32, TimerKind)>,
    /// Entries of kind [`TimerKind::Pacer`]: 0 keeps the transmit path's
    /// check for due pacer releases to one comparison.
    pacers: usize,
}

impl TimerTable {
    /// Arm (`Some`), move or cancel (`None`) timer `kind` of QP `qpn`, whose
    /// table is `slots`.
    #[inline]
    pub fn set(&mut self, qpn: u32, slots: &mut QpTimers, kind: TimerKind, at: Option<Instant>) {
        let slot = &mut slots.0[kind as usize];
        if *slot == at {
            return;
        }
        // Insert before removing: the set never empties on a move, so the
        // B-tree keeps its nodes (no free/allocate per re-armed timer).
        if let Some(new) = at {
            self.index.insert((new, qpn, kind));
            self.pacers += usize::from(kind == TimerKind::Pacer);
        }
        if let Some(old) = slot.take() {
            self.index.remove(&(old, qpn, kind));
            self.pacers -= usize::from(kind == TimerKind::Pacer);
        }
        *slot = at;
    }

    /// The earliest deadline of any armed timer.
    #[inline]
    pub fn next(&self) -> Option<Instant> {
        self.index.first().map(|e| e.0)
    }

    /// Whether some pacer release is armed.
    #[inline]
    pub fn has_pacers(&self) -> bool {
        self.pacers > 0
    }

    /// Take out the earliest entry due by `now` that is a pacer release
    /// (`pacer`) or any other timer (`!pacer`). The caller clears the
    /// QP's slot with [`QpTimers::fired`].
    #[inline(always)]
    pub fn pop_due(&mut self, now: Instant, pacer: bool) -> Option<(Instant, u32, TimerKind)> {
        // Nothing due (the idle case): decided inline, without a call.
        let first = *self.index.first()?;
        if first.0 > now {
            return None;
        }
        self.pop_due_from(first, now, pacer)
    }

    /// [`TimerTable::pop_due`] once the first entry, `first`, is due.
    #[inline(never)]
    fn pop_due_from(
        &mut self,
        first: (Instant, u32, TimerKind),
        now: Instant,
        pacer: bool,
    ) -> Option<(Instant, u32, TimerKind)> {
        let wanted = |e: &(Instant, u32, TimerKind)| (e.2 == TimerKind::Pacer) == pacer;
        let e = if wanted(&first) {
            self.index.pop_first()?
        } else {
            let e = *self
                .index
                .iter()
                .take_while(|e| e.0 <= now)
                .find(|e| wanted(e))?;
            self.index.remove(&e);
            e
        };
        self.pacers -= usize::from(pacer);
        Some(e)
    }
}
