//! The event queue: a timing wheel of ~1 ns buckets over the next few
//! microseconds (where a link's serialisation and propagation put nearly
//! every event), with a binary heap for anything later.
//!
//! Events come out in exactly the order of a binary heap on (time,
//! insertion sequence): a bucket is sorted by that key when it becomes
//! current, and an event scheduled into the current bucket (or, after a
//! look ahead, into an earlier one) is inserted in order. Pushing and
//! popping cost O(1) on average instead of O(log n) sifts of whole events.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// log2 of a bucket's width, ps (1.024 ns).
const SHIFT: u32 = 10;
/// Buckets on the wheel (a horizon of 4.19 µs).
const N: usize = 4096;
const WORDS: usize = N / 64;
/// Entries of capacity a wheel bucket keeps once drained.
const KEEP: usize = 8;

/// An event at time `t` (ps), scheduled `seq`-th.
pub(super) struct Entry<T> {
    pub(super) t: u64,
    pub(super) seq: u64,
    pub(super) ev: T,
}

impl<T> Entry<T> {
    #[inline]
    fn key(&self) -> (u64, u64) {
        (self.t, self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (t, seq).
        o.key().cmp(&self.key())
    }
}

/// A priority queue of events ordered by (time, sequence); sequence
/// numbers must be unique, and no event may be pushed earlier than the
/// last one popped.
pub(super) struct EventQueue<T> {
    /// Index (t >> SHIFT) of the current bucket.
    bucket: u64,
    /// Every event of a bucket up to the current one, ascending.
    cur: VecDeque<Entry<T>>,
    /// Buckets `bucket + 1 .. bucket + N`, at `b % N`, unsorted.
    wheel: Vec<Vec<Entry<T>>>,
    /// Non-empty wheel buckets (bit `b % N`).
    occupied: [u64; WORDS],
    in_wheel: usize,
    /// Events at bucket `bucket + N` or later.
    far: BinaryHeap<Entry<T>>,
}

impl<T> EventQueue<T> {
    pub(super) fn new() -> EventQueue<T> {
        EventQueue {
            bucket: 0,
            cur: VecDeque::new(),
            wheel: (0..N).map(|_| Vec::new()).collect(),
            occupied: [0; WORDS],
            in_wheel: 0,
            far: BinaryHeap::new(),
        }
    }

    /// Events queued.
    pub(super) fn len(&self) -> usize {
        self.cur.len() + self.in_wheel + self.far.len()
    }

    /// Queue `e`.
    #[inline]
    pub(super) fn push(&mut self, e: Entry<T>) {
        let b = e.t >> SHIFT;
        if b <= self.bucket {
            // Nearly always at the end: its sequence number is the largest.
            let k = e.key();
            if self.cur.back().map_or(true, |x| x.key() < k) {
                self.cur.push_back(e);
            } else {
                let i = self.cur.partition_point(|x| x.key() < k);
                self.cur.insert(i, e);
            }
        } else if b < self.bucket + N as u64 {
            self.put_wheel(b, e);
        } else {
            self.far.push(e);
        }
    }

    #[inline]
    fn put_wheel(&mut self, b: u64, e: Entry<T>) {
        let i = (b % N as u64) as usize;
        self.wheel[i].push(e);
        self.occupied[i / 64] |= 1 << (i % 64);
        self.in_wheel += 1;
    }

    /// The earliest event's time (moving the current bucket forward to it).
    #[inline]
    pub(super) fn peek_t(&mut self) -> Option<u64> {
        if self.cur.is_empty() {
            self.advance()?;
        }
        self.cur.front().map(|e| e.t)
    }

    /// Take the earliest event.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<Entry<T>> {
        if self.cur.is_empty() {
            self.advance()?;
        }
        self.cur.pop_front()
    }

    /// The earliest event's time, without moving anything.
    pub(super) fn min_t(&self) -> Option<u64> {
        if let Some(e) = self.cur.front() {
            return Some(e.t);
        }
        if self.in_wheel > 0 {
            if let Some(b) = self.next_occupied() {
                let i = (b % N as u64) as usize;
                return self.wheel[i].iter().map(|e| e.t).min();
            }
        }
        self.far.peek().map(|e| e.t)
    }

    /// The first occupied wheel bucket after the current one.
    fn next_occupied(&self) -> Option<u64> {
        let start = ((self.bucket + 1) % N as u64) as usize;
        // Words from the one holding `start`, wrapping once round.
        for k in 0..=WORDS {
            let w = (start / 64 + k) % WORDS;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= !0u64 << (start % 64);
            } else if k == WORDS {
                bits &= !(!0u64 << (start % 64));
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (i + N - start) % N;
                return Some(self.bucket + 1 + ahead as u64);
            }
        }
        None
    }

    /// Make the next non-empty bucket current (`cur` is empty); `None` if
    /// nothing is queued.
    fn advance(&mut self) -> Option<()> {
        let next = if self.in_wheel > 0 {
            self.next_occupied()?
        } else {
            self.far.peek()?.t >> SHIFT
        };
        self.bucket = next;
        // Far events now within the horizon join the wheel (or `cur`).
        while let Some(e) = self.far.peek() {
            let b = e.t >> SHIFT;
            if b >= self.bucket + N as u64 {
                break;
            }
            let Some(e) = self.far.pop() else {
                break;
            };
            if b == self.bucket {
                self.cur.push_back(e);
            } else {
                self.put_wheel(b, e);
            }
        }
        let i = (self.bucket % N as u64) as usize;
        if self.occupied[i / 64] & (1 << (i % 64)) != 0 {
            self.occupied[i / 64] &= !(1 << (i % 64));
            let v = &mut self.wheel[i];
            self.in_wheel -= v.len();
            self.cur.extend(v.drain(..));
            // A burst's capacity is not kept in every bucket it passed.
            if v.capacity() > KEEP {
                v.shrink_to(KEEP);
            }
        }
        self.cur.make_contiguous().sort_unstable_by_key(|e| e.key());
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_stack::testing::Rng;

    /// The queue pops exactly what a binary heap on (t, seq) pops, for a
    /// mix of near, far, equal-time and look-ahead pushes.
    #[test]
    fn same_order_as_a_binary_heap() {
        let mut rng = Rng::new(7);
        let mut q = EventQueue::new();
        let mut h = BinaryHeap::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        let mut popped = 0;
        for round in 0..200_000u64 {
            let r = rng.unit();
            if r < 0.55 || h.is_empty() {
                let d = match (rng.unit() * 6.0) as u32 {
                    0 => 0,
                    1 => (rng.unit() * 2000.0) as u64,
                    2 => (rng.unit() * 1.5e6) as u64,
                    3 => (rng.unit() * 5e6) as u64,
                    4 => (rng.unit() * 1e9) as u64,
                    _ => 1024 * (rng.unit() * 8.0) as u64,
                };
                seq += 1;
                q.push(Entry {
                    t: now + d,
                    seq,
                    ev: round,
                });
                h.push(Entry {
                    t: now + d,
                    seq,
                    ev: round,
                });
            } else if r < 0.6 {
                // Look ahead, then push at the current time.
                assert_eq!(q.min_t(), h.peek().map(|e| e.t));
                assert_eq!(q.peek_t(), h.peek().map(|e| e.t));
                seq += 1;
                q.push(Entry {
                    t: now,
                    seq,
                    ev: round,
                });
                h.push(Entry {
                    t: now,
                    seq,
                    ev: round,
                });
            } else {
                let a = q.pop().unwrap();
                let b = h.pop().unwrap();
                assert_eq!((a.t, a.seq, a.ev), (b.t, b.seq, b.ev));
                now = a.t;
                popped += 1;
            }
            assert_eq!(q.len(), h.len());
        }
        while let Some(b) = h.pop() {
            let a = q.pop().unwrap();
            assert_eq!((a.t, a.seq), (b.t, b.seq));
        }
        assert!(q.pop().is_none());
        assert!(popped > 50_000);
    }
}
