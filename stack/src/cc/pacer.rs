//! Per-QP transmit pacer: a token bucket at the reaction point's current rate,
//! in the virtual-scheduling form of the generic cell rate algorithm (ITU-T
//! I.371 GCRA; equivalent to a token bucket of depth `tau`).
//!
//! The theoretical arrival time `tat` of the next frame is the start of the
//! last frame's gap plus that frame's `n` bytes at the QP's *current* rate `R`
//! Mbit/s: `tat = start + n·8/R` (µs; `n·8·10^6/R` ps). A frame may leave at
//! `now` if `now + tau >= tat`, and sending it starts the next gap at
//! `max(tat, now)`. So consecutive frames of a backlogged QP leave `n·8/R`
//! apart, and after an idle spell the QP may send a burst of about `tau`
//! worth of bytes at once.
//!
//! The gap in progress is re-timed when the rate changes (it is kept as
//! bytes, not as a deadline): a QP that sent a 4 KiB frame at the 1 Mbit/s
//! floor (a 33 ms gap) and is then raised to 25 Gbit/s may send again 1.3 µs
//! after that frame, not 33 ms later.
//!
//! `tau` = 1 ns + `burst_bytes` at the current rate. The 1 ns is the clock's
//! resolution: a frame released at `ceil(tat − tau)` ns is never counted
//! late, so sub-nanosecond remainders of `n·8/R` are carried instead of lost
//! (consecutive gaps are the exact gap rounded down or up to the nanosecond,
//! and average to it).
//!
//! The pacer never blocks and never allocates: the device asks
//! [`Pacer::is_ready`], and when it is not, arms a timer at
//! [`Pacer::release_time`] and skips the QP until then.

use crate::cc::dcqcn::RATE_FLOOR_MBPS;
use crate::time::Instant;

/// Picoseconds per nanosecond.
const PS_PER_NS: u128 = 1000;

/// A token-bucket pacer (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pacer {
    /// Start of the gap in progress (when the last frame was due), ps since
    /// the epoch.
    start_ps: u128,
    /// Bytes of the last frame: the gap in progress is this many bytes long
    /// at the current rate.
    gap_bytes: u64,
    /// Bucket depth beyond one frame, bytes.
    burst_bytes: u32,
}

impl Pacer {
    /// A pacer allowing bursts of `burst_bytes` bytes (beyond one frame)
    /// after an idle spell; 0 spaces every frame.
    pub fn new(burst_bytes: u32) -> Pacer {
        Pacer {
            start_ps: 0,
            gap_bytes: 0,
            burst_bytes,
        }
    }

    /// Forget the past: the next frame may leave at once.
    pub fn reset(&mut self, now: Instant) {
        self.start_ps = ps(now);
        self.gap_bytes = 0;
    }

    /// Theoretical arrival time of the next frame at `rate_mbps`, ps.
    fn tat_ps(&self, rate_mbps: f64) -> u128 {
        self.start_ps + Pacer::gap_ps(self.gap_bytes, rate_mbps)
    }

    /// Time `bytes` take at `rate_mbps` Mbit/s, ps (`bytes·8·10^6/rate`,
    /// rounded to the picosecond). The rate is taken as at least
    /// [`RATE_FLOOR_MBPS`], so no rate (0, negative, NaN) divides by zero.
    pub fn gap_ps(bytes: u64, rate_mbps: f64) -> u128 {
        let r = rate_mbps.max(RATE_FLOOR_MBPS);
        (bytes as f64 * 8.0e6 / r).round() as u128
    }

    /// The tolerance `tau` at `rate_mbps`, ps.
    fn tau_ps(&self, rate_mbps: f64) -> u128 {
        PS_PER_NS + Pacer::gap_ps(self.burst_bytes as u64, rate_mbps)
    }

    /// Whether a frame may leave at `now` with the QP at `rate_mbps`.
    pub fn is_ready(&self, now: Instant, rate_mbps: f64) -> bool {
        ps(now) + self.tau_ps(rate_mbps) >= self.tat_ps(rate_mbps)
    }

    /// The first nanosecond at which [`Pacer::is_ready`] holds.
    pub fn release_time(&self, rate_mbps: f64) -> Instant {
        let t = self
            .tat_ps(rate_mbps)
            .saturating_sub(self.tau_ps(rate_mbps));
        Instant(t.div_ceil(PS_PER_NS).min(u64::MAX as u128) as u64)
    }

    /// A frame of `bytes` bytes left at `now` with the QP at `rate_mbps`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, rate_mbps: f64) {
        self.start_ps = self.tat_ps(rate_mbps).max(ps(now));
        self.gap_bytes = bytes;
    }

    /// The theoretical arrival time of the next frame at `rate_mbps`, ns
    /// (rounded up).
    pub fn next_frame_time(&self, rate_mbps: f64) -> Instant {
        Instant(
            self.tat_ps(rate_mbps)
                .div_ceil(PS_PER_NS)
                .min(u64::MAX as u128) as u64,
        )
    }
}

fn ps(t: Instant) -> u128 {
    t.as_nanos() as u128 * PS_PER_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spacing_is_bytes_times_8_over_rate() {
        // 1000 bytes at 8000 Mbit/s: 8000 bits / 8000 bit/µs = 1 µs.
        let mut p = Pacer::new(0);
        let t0 = Instant::from_micros(10);
        p.reset(t0);
        assert!(p.is_ready(t0, 8000.0));
        p.on_sent(t0, 1000, 8000.0);
        assert_eq!(p.next_frame_time(8000.0), Instant::from_micros(11));
        // Ready 1 ns early (the clock-resolution tolerance), not before.
        assert_eq!(p.release_time(8000.0), Instant(10_999));
        assert!(!p.is_ready(Instant(10_998), 8000.0));
        assert!(p.is_ready(Instant(10_999), 8000.0));
    }

    #[test]
    fn r30_zero_rate_never_divides_by_zero() {
        // CASES R30 (c): rate 0 is taken as the 1 Mbit/s floor: 125 bytes =
        // 1000 bits = 1000 µs at 1 bit/µs.
        assert_eq!(Pacer::gap_ps(125, 0.0), 1_000_000_000);
        assert_eq!(Pacer::gap_ps(125, f64::NAN), 1_000_000_000);
        assert_eq!(Pacer::gap_ps(125, -5.0), 1_000_000_000);
    }

    #[test]
    fn a_rate_rise_shortens_the_gap_in_progress() {
        // 4096 bytes at the 1 Mbit/s floor: 32,768 µs. Raised to 25,000
        // Mbit/s before the gap ends, the same 32,768 bits take 1.31072 µs, so
        // the next frame is due at t0 + 1,310.72 ns (released at the 1 ns
        // tolerance before: 1,310 ns after t0, rounded up from 1,309.72).
        let mut p = Pacer::new(0);
        let t0 = Instant::from_micros(100);
        p.reset(t0);
        p.on_sent(t0, 4096, 1.0);
        assert_eq!(p.next_frame_time(1.0), Instant(100_000 + 32_768_000));
        assert_eq!(p.next_frame_time(25_000.0), Instant(100_000 + 1_311));
        assert_eq!(p.release_time(25_000.0), Instant(100_000 + 1_310));
        assert!(p.is_ready(Instant(100_000 + 1_310), 25_000.0));
        assert!(!p.is_ready(Instant(100_000 + 1_309), 25_000.0));
        // A cut lengthens it the same way: 32,768 bits at 8,192 Mbit/s = 4 µs.
        assert_eq!(p.next_frame_time(8_192.0), Instant(104_000));
    }

    #[test]
    fn burst_after_idle() {
        // burst 2000 bytes at 8000 Mbit/s = 2 µs of credit: three 1000-byte
        // frames at t0 (the first, then two on credit), the fourth waits.
        let mut p = Pacer::new(2000);
        let t0 = Instant::from_micros(5);
        p.reset(t0);
        for _ in 0..3 {
            assert!(p.is_ready(t0, 8000.0));
            p.on_sent(t0, 1000, 8000.0);
        }
        assert!(!p.is_ready(t0, 8000.0));
        // tat = 8 µs, tau = 2 µs + 1 ns: ready at 5.999 µs.
        assert_eq!(p.release_time(8000.0), Instant(5_999));
    }
}
