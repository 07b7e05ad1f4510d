//! 24-bit packet sequence numbers (IBTA 1.7 §9.7.1).
//!
//! PSNs wrap modulo 2^24. Order is defined only within half the space:
//! `a` is before `b` when `((a - b) << 8) as i32 < 0` (rxe `psn_compare`).

use core::cmp::Ordering;
use core::fmt;

/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// A packet sequence number, always < 2^24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// `v` modulo 2^24.
    pub const fn new(v: u32) -> Psn {
        Psn(v & PSN_MASK)
    }
    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }
    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }
    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }
    /// The next PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }
    /// Signed distance `self - other`, valid when the two are within 2^23.
    pub const fn diff(self, other: Psn) -> i32 {
        (self.0.wrapping_sub(other.0) << 8) as i32 >> 8
    }
    /// Order within the half-space window (rxe `psn_compare`).
    pub fn cmp_psn(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }
    /// `self` is strictly before `other`.
    pub fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
    /// `self` is at or after `other`.
    pub fn at_or_after(self, other: Psn) -> bool {
        self.diff(other) >= 0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn(0x{:06x})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_orders_across_2_pow_24() {
        let a = Psn::new(0xFF_FFFE);
        assert_eq!(a.next(), Psn::new(0xFF_FFFF));
        assert_eq!(a.add(2), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::new(0xFF_FFFF));
        assert_eq!(Psn::new(1).diff(a), 3);
        assert_eq!(a.diff(Psn::new(1)), -3);
        assert!(a.before(Psn::new(1)));
        assert!(Psn::new(1).at_or_after(a));
        assert_eq!(Psn::new(0x80_0000).diff(Psn::new(0)), -0x80_0000);
        assert_eq!(Psn::new(0x7F_FFFF).diff(Psn::new(0)), 0x7F_FFFF);
    }
}
