//! Time as the caller passes it in: the core never reads a clock.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, nanoseconds since an epoch the caller chooses (a test's
/// virtual clock, or a monotonic clock in a backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// From nanoseconds.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us * 1_000)
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms * 1_000_000)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}
