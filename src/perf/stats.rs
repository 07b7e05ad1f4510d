//! Bandwidth and latency figures from per-operation timestamps (nanoseconds),
//! computed as perftest's `print_report_bw` and `print_report_lat` do.

/// Bandwidth figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwStats {
    /// Best bandwidth over any run of consecutive operations (perftest's peak),
    /// Gbit/s (10^9 bit/s).
    pub peak_gbps: f64,
    /// All bytes over the time from the first post to the last completion,
    /// Gbit/s.
    pub avg_gbps: f64,
    /// Operations per second over the same time, millions.
    pub msg_rate_mpps: f64,
    /// That time, nanoseconds.
    pub elapsed_ns: u64,
}

/// Latency figures, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Smallest sample.
    pub min_us: f64,
    /// Largest sample.
    pub max_us: f64,
    /// Median (perftest's "typical").
    pub typical_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// Standard deviation (population).
    pub stdev_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
}

/// Largest number of points the O(n²) peak search looks at.
const PEAK_POINTS: usize = 4096;

/// Bandwidth of `ops` operations of `bytes` each; `posted[k]` / `completed[k]`
/// are the times of the k-th post and the k-th completion (ns).
pub fn bw(bytes: u64, posted: &[u64], completed: &[u64]) -> BwStats {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return BwStats {
            peak_gbps: 0.0,
            avg_gbps: 0.0,
            msg_rate_mpps: 0.0,
            elapsed_ns: 0,
        };
    }
    let elapsed = completed[n - 1].saturating_sub(posted[0]).max(1);
    let bits = bytes as f64 * 8.0;
    let avg_gbps = bits * n as f64 / elapsed as f64;
    let msg_rate_mpps = n as f64 * 1e3 / elapsed as f64;
    // perftest: opt_delta = min over i <= j of (tcompleted[j] - tposted[i]) / (j - i + 1).
    let step = n.div_ceil(PEAK_POINTS).max(1);
    let mut best = f64::INFINITY;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j < n {
            let d = completed[j].saturating_sub(posted[i]).max(1) as f64 / (j - i + 1) as f64;
            if d < best {
                best = d;
            }
            j += step;
        }
        i += step;
    }
    let peak_gbps = if best.is_finite() {
        (bits / best).max(avg_gbps)
    } else {
        avg_gbps
    };
    BwStats {
        peak_gbps,
        avg_gbps,
        msg_rate_mpps,
        elapsed_ns: elapsed,
    }
}

/// Width of the intervals a duration run (`-D`) counts completions in, ns.
pub const INTERVAL_NS: u64 = 100_000_000;

/// Bandwidth of a duration run, from counts instead of per-operation
/// timestamps: `total` operations of `bytes` each between the first post
/// (`first_ns`) and the last completion (`last_ns`); `counts[i]` operations
/// completed in the `i`-th [`INTERVAL_NS`] after the first post. The average
/// is as [`bw`]'s; the peak is the best one-second window of whole intervals
/// (10 of them), or the average when the run is shorter than that.
pub fn bw_counted(bytes: u64, first_ns: u64, last_ns: u64, total: u64, counts: &[u64]) -> BwStats {
    let elapsed = last_ns.saturating_sub(first_ns).max(1);
    let bits = bytes as f64 * 8.0;
    let avg_gbps = bits * total as f64 / elapsed as f64;
    let msg_rate_mpps = total as f64 * 1e3 / elapsed as f64;
    const WINDOW: usize = (1_000_000_000 / INTERVAL_NS) as usize;
    // Only intervals that ended before the last completion are whole.
    let whole = ((elapsed / INTERVAL_NS) as usize).min(counts.len());
    let best = counts[..whole]
        .windows(WINDOW)
        .map(|w| w.iter().sum::<u64>())
        .max();
    let peak_gbps = match best {
        Some(ops) => (bits * ops as f64 / 1e9).max(avg_gbps),
        None => avg_gbps,
    };
    BwStats {
        peak_gbps,
        avg_gbps,
        msg_rate_mpps,
        elapsed_ns: if total == 0 { 0 } else { elapsed },
    }
}

/// Latency figures of `samples` (ns); sorts them.
pub fn lat(samples: &mut [u64]) -> LatStats {
    samples.sort_unstable();
    let n = samples.len();
    if n == 0 {
        return LatStats {
            min_us: 0.0,
            max_us: 0.0,
            typical_us: 0.0,
            avg_us: 0.0,
            stdev_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
        };
    }
    let us = |ns: u64| ns as f64 / 1e3;
    let mean = samples.iter().map(|&s| s as f64).sum::<f64>() / n as f64;
    let var = samples
        .iter()
        .map(|&s| {
            let d = s as f64 - mean;
            d * d
        })
        .sum::<f64>()
        / n as f64;
    // Nearest-rank percentiles: the smallest sample with at least p of them at
    // or below it.
    let pct = |p: f64| {
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        us(samples[rank - 1])
    };
    LatStats {
        min_us: us(samples[0]),
        max_us: us(samples[n - 1]),
        typical_us: us(samples[n / 2]),
        avg_us: mean / 1e3,
        stdev_us: var.sqrt() / 1e3,
        p99_us: pct(0.99),
        p999_us: pct(0.999),
    }
}

/// Latency samples of a run with bounded memory: the first `cap` samples
/// are kept; after that each new one replaces a kept one with probability
/// `cap / n` (reservoir sampling, Vitter's Algorithm R, seeded), so the kept
/// ones stay a uniform sample of all. The minimum, maximum, mean and
/// standard deviation are exact (running sums over every sample); the
/// median and percentiles come from the kept sample (exact while `n <=
/// cap`).
#[derive(Debug, Clone)]
pub(crate) struct LatSamples {
    kept: Vec<u64>,
    cap: usize,
    n: u64,
    sum: u128,
    sum_sq: u128,
    min: u64,
    max: u64,
    rng: u64,
}

impl LatSamples {
    /// An empty set keeping at most `cap` samples (at least 1), with room
    /// reserved for `expected` of them.
    pub(crate) fn new(cap: usize, expected: usize, seed: u64) -> LatSamples {
        let cap = cap.max(1);
        LatSamples {
            kept: Vec::with_capacity(expected.min(cap)),
            cap,
            n: 0,
            sum: 0,
            sum_sq: 0,
            min: u64::MAX,
            max: 0,
            rng: seed,
        }
    }

    /// Add one sample (ns).
    pub(crate) fn push(&mut self, ns: u64) {
        self.n += 1;
        self.sum += u128::from(ns);
        self.sum_sq += u128::from(ns) * u128::from(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        if self.kept.len() < self.cap {
            self.kept.push(ns);
            return;
        }
        // SplitMix64 step; j uniform in 0..n (the bias of the modulo is
        // below n / 2^64).
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = z % self.n;
        if let Some(slot) = self.kept.get_mut(j as usize) {
            *slot = ns;
        }
    }

    /// Samples added.
    pub(crate) fn len(&self) -> u64 {
        self.n
    }

    /// Samples kept (at most the cap).
    pub(crate) fn kept(&self) -> usize {
        self.kept.len()
    }

    /// The figures (sorts the kept samples).
    pub(crate) fn stats(&mut self) -> LatStats {
        let mut l = lat(&mut self.kept);
        if self.n > self.kept.len() as u64 {
            let n = self.n as f64;
            let mean = self.sum as f64 / n;
            let var = (self.sum_sq as f64 / n - mean * mean).max(0.0);
            l.min_us = self.min as f64 / 1e3;
            l.max_us = self.max as f64 / 1e3;
            l.avg_us = mean / 1e3;
            l.stdev_us = var.sqrt() / 1e3;
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lat_samples_are_bounded_and_exact_where_they_can_be() {
        // 1..=100000 µs into a set keeping 1000: min, max and mean are
        // exact; the median of a uniform sample of 1000 is within a few
        // percent of the true one (50000.5 µs).
        let mut s = LatSamples::new(1000, 0, 7);
        for i in 1..=100_000u64 {
            s.push(i * 1000);
        }
        assert_eq!((s.len(), s.kept()), (100_000, 1000));
        let l = s.stats();
        assert_eq!((l.min_us, l.max_us), (1.0, 100_000.0));
        assert!((l.avg_us - 50_000.5).abs() < 1e-6, "{l:?}");
        // Population standard deviation of 1..=N: sqrt((N^2 - 1) / 12).
        let sd = ((1e10f64 - 1.0) / 12.0).sqrt();
        assert!((l.stdev_us - sd).abs() / sd < 1e-9, "{l:?}");
        assert!((l.typical_us - 50_000.5).abs() < 5_000.0, "{l:?}");
        // Under the cap, the figures are those of every sample.
        let mut s = LatSamples::new(1000, 10, 7);
        for i in 1..=1000u64 {
            s.push(i * 1000);
        }
        let mut all: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        assert_eq!(s.stats(), lat(&mut all));
    }

    #[test]
    fn bw_counted_peak_is_the_best_second() {
        // 2.5 s: 1000 ops per 100 ms, except 2000 in intervals 12..=14; the
        // best 10 whole intervals hold 13,000 ops = 13,000 x 64 B x 8 bit in
        // 1 s; the average is 28,000 ops over 2.5 s (the last interval is cut
        // at 2.5 s and not a whole one).
        let mut counts = vec![1000u64; 25];
        for c in &mut counts[12..15] {
            *c = 2000;
        }
        let b = bw_counted(64, 5_000, 5_000 + 2_500_000_000, 28_000, &counts);
        assert!(
            (b.peak_gbps - 13_000.0 * 512.0 / 1e9).abs() < 1e-12,
            "{b:?}"
        );
        assert!((b.msg_rate_mpps - 28_000.0 / 2.5e6).abs() < 1e-12, "{b:?}");
        assert_eq!(b.elapsed_ns, 2_500_000_000);
        // Shorter than a second: the peak is the average.
        let b = bw_counted(64, 0, 500_000_000, 5000, &[1000; 5]);
        assert_eq!(b.peak_gbps, b.avg_gbps);
    }

    #[test]
    fn bw_of_a_steady_stream() {
        // 10 messages of 1250 bytes (10^4 bits), one per µs, each completing
        // 1 µs after its post: 10^5 bits in 10 µs = 10 Gbit/s, 1 Mpps.
        let posted: Vec<u64> = (0..10).map(|i| i * 1000).collect();
        let completed: Vec<u64> = (1..=10).map(|i| i * 1000).collect();
        let b = bw(1250, &posted, &completed);
        assert!((b.avg_gbps - 10.0).abs() < 1e-9, "{b:?}");
        assert!((b.msg_rate_mpps - 1.0).abs() < 1e-9, "{b:?}");
        assert!((b.peak_gbps - 10.0).abs() < 1e-9, "{b:?}");
    }

    #[test]
    fn lat_percentiles() {
        let mut s: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let l = lat(&mut s);
        assert_eq!((l.min_us, l.max_us), (1.0, 1000.0));
        assert_eq!(l.p99_us, 990.0);
        assert_eq!(l.p999_us, 999.0);
        assert_eq!(l.typical_us, 501.0);
        assert!((l.avg_us - 500.5).abs() < 1e-9);
    }
}
