//! [`FaultIo`]: a seeded fault injector on the transmit side of any
//! backend, after smoltcp's `phy::FaultInjector`.

use std::os::fd::{AsFd, BorrowedFd};

use roce_stack::backend::FrameIo;
use roce_stack::testing::Rng;

/// What [`FaultIo`] does to the frames it transmits. Probabilities are per
/// frame, in `[0, 1)`; the decisions come from one SplitMix64 generator
/// ([`Rng`]) seeded with `seed`, so a run repeats exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Drop the frame (counted as sent, never on the wire).
    pub loss: f64,
    /// Send the frame twice in a row.
    pub duplicate: f64,
    /// Hold the frame back and send it after the next one (or at the end
    /// of the burst when there is no next one).
    pub reorder: f64,
    /// Flip one bit after the Ethernet header (the receiver must drop the
    /// frame on its ICRC or header checks).
    pub corrupt: f64,
    /// Seed of the decisions.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            seed: 1,
        }
    }
}

impl FaultConfig {
    /// Loss `p` only, decided from `seed`.
    pub fn loss(p: f64, seed: u64) -> FaultConfig {
        FaultConfig {
            loss: p,
            seed,
            ..FaultConfig::default()
        }
    }

    /// Whether no fault is configured (every probability 0).
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.duplicate <= 0.0 && self.reorder <= 0.0 && self.corrupt <= 0.0
    }
}

/// What a [`FaultIo`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames taken from the caller.
    pub frames: u64,
    /// Of those, dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Frames sent after the one that followed them.
    pub reordered: u64,
    /// Frames sent with a flipped bit.
    pub corrupted: u64,
}

/// A frame held by the injector: a copy to send next, or one held back.
#[derive(Debug, Default)]
struct Held {
    buf: Vec<u8>,
    len: Option<usize>,
}

impl Held {
    fn put(&mut self, frame: &[u8]) {
        if self.buf.len() < frame.len() {
            self.buf.resize(frame.len(), 0);
        }
        self.buf[..frame.len()].copy_from_slice(frame);
        self.len = Some(frame.len());
    }

    /// Copy the held frame into `out` (truncated to it); its length.
    fn take_into(&mut self, out: &mut [u8]) -> Option<usize> {
        let n = self.len.take()?.min(out.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        Some(n)
    }
}

/// Any backend with seeded faults on its transmit side; receive passes
/// through untouched, so that two wrapped endpoints each shape their own
/// direction (as `roce perf --loss` does on every backend).
///
/// For each frame the caller produces, in this order: lost with
/// probability [`FaultConfig::loss`]; else corrupted with
/// [`FaultConfig::corrupt`] (one bit of one byte past the first 14, both
/// drawn at random), then duplicated with [`FaultConfig::duplicate`] or
/// else held back with [`FaultConfig::reorder`] (one frame at a time). A
/// probability of 0 draws nothing, so a loss-only injector makes exactly
/// one decision per frame. Nothing is allocated per frame: the duplicate
/// and the held-back frame each have a buffer that is reused.
///
/// `tx_burst` returns the frames taken from the caller, dropped ones
/// included (a caller counting what it sent counts what it handed over).
/// Zero-copy frames ([`FrameIo::tx_burst_gather`]) are copied (the provided
/// implementation): faults need the bytes.
#[derive(Debug)]
pub struct FaultIo<B> {
    inner: B,
    cfg: FaultConfig,
    rng: Rng,
    dup: Held,
    late: Held,
    /// A frame went out after the held-back one was held: it is due.
    late_due: bool,
    stats: FaultStats,
}

impl<B: FrameIo> FaultIo<B> {
    /// Faults `cfg` on `inner`'s transmit side.
    pub fn new(inner: B, cfg: FaultConfig) -> FaultIo<B> {
        FaultIo {
            inner,
            rng: Rng::new(cfg.seed),
            cfg,
            dup: Held::default(),
            late: Held::default(),
            late_due: false,
            stats: FaultStats::default(),
        }
    }

    /// What was done so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The wrapped backend.
    pub fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped backend, unwrapped (a frame still held is lost).
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: FrameIo> FrameIo for FaultIo<B> {
    type Error = B::Error;

    fn max_frame_len(&self) -> usize {
        self.inner.max_frame_len()
    }

    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> Result<usize, B::Error> {
        self.inner.rx_burst(max, on_frame)
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, B::Error> {
        if self.cfg.is_none() && self.dup.len.is_none() && self.late.len.is_none() {
            // Nothing to inject, nothing held: the burst goes straight
            // through (a run without faults pays one branch per burst).
            let n = self.inner.tx_burst(max, fill)?;
            self.stats.frames += n as u64;
            return Ok(n);
        }
        let FaultIo {
            inner,
            cfg,
            rng,
            dup,
            late,
            late_due,
            stats,
        } = self;
        let mut taken = 0usize;
        let mut caller_done = false;
        inner.tx_burst(max, &mut |buf| loop {
            if let Some(n) = dup.take_into(buf) {
                return Some(n);
            }
            if *late_due {
                *late_due = false;
                if let Some(n) = late.take_into(buf) {
                    return Some(n);
                }
            }
            if caller_done || taken >= max {
                // The end of the burst: what was held back goes now.
                return late.take_into(buf);
            }
            let Some(n) = fill(buf) else {
                caller_done = true;
                continue;
            };
            let n = n.min(buf.len());
            taken += 1;
            stats.frames += 1;
            if rng.chance(cfg.loss) {
                stats.dropped += 1;
                continue;
            }
            if rng.chance(cfg.corrupt) && n > 14 {
                let i = 14 + rng.below((n - 14) as u64) as usize;
                buf[i] ^= 1 << rng.below(8);
                stats.corrupted += 1;
            }
            if rng.chance(cfg.duplicate) {
                dup.put(&buf[..n]);
                stats.duplicated += 1;
            } else if late.len.is_none() && rng.chance(cfg.reorder) {
                late.put(&buf[..n]);
                stats.reordered += 1;
                continue;
            }
            if late.len.is_some() {
                *late_due = true;
            }
            return Some(n);
        })?;
        Ok(taken)
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.wait_fd()
    }
}

impl<B: AsFd> AsFd for FaultIo<B> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapt::tests::{numbered, send_all, QueueIo};

    fn ids(sent: &[Vec<u8>]) -> Vec<u8> {
        sent.iter().map(|f| f[14]).collect()
    }

    #[test]
    fn no_fault_passes_every_frame_in_order() {
        let mut io = FaultIo::new(QueueIo::default(), FaultConfig::default());
        assert!(io.config().is_none());
        let frames = numbered(20);
        assert_eq!(send_all(&mut io, &frames, 8), vec![8, 8, 4]);
        assert_eq!(io.inner().sent, frames);
        assert_eq!(io.stats().frames, 20);
    }

    /// The decisions are those of the seeded generator, one draw per frame
    /// for loss only: the same seed drops the same frames, and which ones
    /// is what `Rng::chance` says.
    #[test]
    fn loss_is_seeded_and_one_draw_per_frame() {
        let frames = numbered(200);
        let run = |seed| {
            let mut io = FaultIo::new(QueueIo::default(), FaultConfig::loss(0.25, seed));
            send_all(&mut io, &frames, 32);
            (ids(&io.inner().sent), io.stats())
        };
        let (a, st) = run(7);
        assert_eq!(run(7).0, a);
        assert_ne!(run(8).0, a);
        let mut rng = Rng::new(7);
        let want: Vec<u8> = (0..200u8).filter(|_| !rng.chance(0.25)).collect();
        assert_eq!(a, want);
        assert_eq!(st.frames, 200);
        assert_eq!(st.dropped, 200 - a.len() as u64);
        assert!((30..70).contains(&st.dropped), "{st:?}");
    }

    #[test]
    fn duplicates_follow_their_frame() {
        let cfg = FaultConfig {
            duplicate: 0.999,
            ..FaultConfig::default()
        };
        let mut io = FaultIo::new(QueueIo::default(), cfg);
        let taken = send_all(&mut io, &numbered(3), 8);
        assert_eq!(taken.iter().sum::<usize>(), 3);
        assert_eq!(ids(&io.inner().sent), vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(io.stats().duplicated, 3);
    }

    /// A held-back frame goes after the next one, and at the end of a
    /// burst when there is none: nothing is lost or held forever.
    #[test]
    fn reordering_swaps_neighbours_and_flushes_at_the_end() {
        let cfg = FaultConfig {
            reorder: 0.999,
            ..FaultConfig::default()
        };
        let mut io = FaultIo::new(QueueIo::default(), cfg);
        send_all(&mut io, &numbered(5), 8);
        assert_eq!(ids(&io.inner().sent), vec![1, 0, 3, 2, 4]);
        assert_eq!(io.stats().reordered, 3);
    }

    /// A full ring (one frame per burst) keeps the duplicate for the next
    /// burst.
    #[test]
    fn a_full_ring_keeps_what_is_held() {
        let cfg = FaultConfig {
            duplicate: 0.999,
            ..FaultConfig::default()
        };
        let inner = QueueIo {
            tx_room: Some(1),
            ..QueueIo::default()
        };
        let mut io = FaultIo::new(inner, cfg);
        send_all(&mut io, &numbered(2), 8);
        assert_eq!(ids(&io.inner().sent), vec![0, 0, 1, 1]);
    }

    #[test]
    fn corruption_flips_one_bit_past_the_ethernet_header() {
        let cfg = FaultConfig {
            corrupt: 0.999,
            ..FaultConfig::default()
        };
        let mut io = FaultIo::new(QueueIo::default(), cfg);
        let frames = numbered(50);
        send_all(&mut io, &frames, 16);
        for (a, b) in frames.iter().zip(&io.inner().sent) {
            let diff: Vec<(usize, u8)> = a
                .iter()
                .zip(b)
                .enumerate()
                .filter(|(_, (x, y))| x != y)
                .map(|(i, (x, y))| (i, x ^ y))
                .collect();
            assert_eq!(diff.len(), 1, "{diff:?}");
            assert!(diff[0].0 >= 14);
            assert_eq!(diff[0].1.count_ones(), 1);
        }
        assert_eq!(io.stats().corrupted, 50);
    }
}
