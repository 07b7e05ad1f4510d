//! Measurements: binned time series, Jain's fairness index, percentiles.

/// Jain's fairness index of `x` (Jain, Chiu, Hawe 1984):
/// (Σx)² / (n·Σx²); 1 when all are equal, 1/n when one takes everything.
/// An empty slice or all zeros gives 1.
pub fn jain_index(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || s2 == 0.0 {
        return 1.0;
    }
    s * s / (n * s2)
}

/// The `p`-th percentile (0..=100) of `samples` by the nearest-rank method
/// (the smallest value with at least p % of the samples at or below it);
/// 0 for no samples.
pub fn percentile(samples: &[u64], p: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    let mut v = samples.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Values per fixed-width time bin (bin `i` covers `[i·width, (i+1)·width)`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bins {
    /// Bin width, picoseconds.
    pub width_ps: u64,
    /// One value per bin.
    pub v: Vec<f64>,
}

impl Bins {
    /// Empty series with bins of `width_ps`.
    pub fn new(width_ps: u64) -> Bins {
        Bins {
            width_ps: width_ps.max(1),
            v: Vec::new(),
        }
    }

    fn slot(&mut self, i: usize) -> &mut f64 {
        if self.v.len() <= i {
            self.v.resize(i + 1, 0.0);
        }
        &mut self.v[i]
    }

    /// Add `x` to the bin holding time `t_ps`.
    pub fn add(&mut self, t_ps: u64, x: f64) {
        let i = (t_ps / self.width_ps) as usize;
        *self.slot(i) += x;
    }

    /// Keep the maximum of the bin's value and `x`.
    pub fn max(&mut self, t_ps: u64, x: f64) {
        let i = (t_ps / self.width_ps) as usize;
        let s = self.slot(i);
        if x > *s {
            *s = x;
        }
    }

    /// Add the length (ps) of the overlap of `[start, end)` with each bin.
    pub fn add_interval(&mut self, start: u64, end: u64) {
        let mut t = start;
        while t < end {
            let i = t / self.width_ps;
            let bin_end = ((i + 1) * self.width_ps).min(end);
            *self.slot(i as usize) += (bin_end - t) as f64;
            t = bin_end;
        }
    }

    /// Bin `i`'s value (0 past the end).
    pub fn get(&self, i: usize) -> f64 {
        self.v.get(i).copied().unwrap_or(0.0)
    }

    /// Sum over the bins covering `[from_ps, to_ps)` (whole bins).
    pub fn sum(&self, from_ps: u64, to_ps: u64) -> f64 {
        let a = (from_ps / self.width_ps) as usize;
        let b = to_ps.div_ceil(self.width_ps) as usize;
        (a..b).map(|i| self.get(i)).sum()
    }
}

/// Counts of values in fixed-width buckets (bucket `i` holds
/// `[i·width, (i+1)·width)`), for percentiles of long streams without
/// keeping the samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Bucket width.
    pub width: u64,
    /// Count per bucket.
    pub counts: Vec<u64>,
    /// Values recorded.
    pub n: u64,
    /// Largest value recorded.
    pub max: u64,
}

impl Histogram {
    /// Empty histogram with buckets of `width` (at least 1).
    pub fn new(width: u64) -> Histogram {
        Histogram {
            width: width.max(1),
            ..Histogram::default()
        }
    }

    /// Record `v`.
    #[inline]
    pub fn add(&mut self, v: u64) {
        let i = (v / self.width) as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    /// The `p`-th percentile (0..=100) by nearest rank, as the upper edge of
    /// the bucket holding it (capped at the largest value); 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i as u64 + 1) * self.width).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_extremes() {
        assert!((jain_index(&[5.0, 5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        // (1+2+3)^2 / (3 * 14) = 36/42
        assert!((jain_index(&[1.0, 2.0, 3.0]) - 36.0 / 42.0).abs() < 1e-12);
    }

    #[test]
    fn nearest_rank() {
        // Nearest-rank examples (Wikipedia "Percentile"): 15 20 35 40 50.
        let v = [15, 20, 35, 40, 50];
        assert_eq!(percentile(&v, 5.0), 15);
        assert_eq!(percentile(&v, 30.0), 20);
        assert_eq!(percentile(&v, 40.0), 20);
        assert_eq!(percentile(&v, 50.0), 35);
        assert_eq!(percentile(&v, 100.0), 50);
    }

    #[test]
    fn histogram_percentiles() {
        let mut h = Histogram::new(10);
        for v in [15, 20, 35, 40, 50] {
            h.add(v);
        }
        // Nearest rank as above (15 20 35 40 50), reported as bucket tops.
        assert_eq!(h.percentile(5.0), 20);
        assert_eq!(h.percentile(50.0), 40);
        assert_eq!(h.percentile(100.0), 50);
        assert_eq!(Histogram::new(1).percentile(99.0), 0);
    }

    #[test]
    fn interval_split() {
        let mut b = Bins::new(10);
        b.add_interval(5, 27);
        assert_eq!(b.v, vec![5.0, 10.0, 7.0]);
        assert_eq!(b.sum(0, 30), 22.0);
    }
}
