//! Completion queues (IBTA 1.7 §11.4.2). A CQ holds at most `capacity`
//! completions; one more is an overrun: the completion is not stored, the CQ is
//! marked in error and an [`crate::verbs::AsyncEvent::CqErr`] is raised
//! (IBTA C11-33: a CQ overrun is an error, never silent loss).

use std::collections::VecDeque;

use super::wr::Wc;

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    ring: VecDeque<Wc>,
    capacity: usize,
    overrun: bool,
}

impl Cq {
    pub(crate) fn new(capacity: usize) -> Cq {
        Cq {
            ring: VecDeque::with_capacity(capacity),
            capacity,
            overrun: false,
        }
    }
    /// Store a completion; `false` on overrun.
    pub(crate) fn push(&mut self, wc: Wc) -> bool {
        if self.overrun || self.ring.len() >= self.capacity {
            self.overrun = true;
            return false;
        }
        self.ring.push_back(wc);
        true
    }
    /// Take up to `out.len()` completions, oldest first. Returns how many.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.ring.len());
        for (slot, wc) in out.iter_mut().zip(self.ring.drain(..n)) {
            *slot = wc;
        }
        n
    }
    /// Take one completion.
    pub fn poll_one(&mut self) -> Option<Wc> {
        self.ring.pop_front()
    }
    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.ring.len()
    }
    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
    /// Capacity (`cqe`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Whether the CQ overran.
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }
}
