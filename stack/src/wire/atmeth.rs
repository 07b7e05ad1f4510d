//! Atomic Extended Transport Header, 28 bytes, IBTA 1.7 §9.3.4: in
//! COMPARE_SWAP and FETCH_ADD.
//!
//! ```text
//! | virtual address (8) | R_Key (4) | swap or add (8) | compare (8) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// Length of the AtomicETH, bytes.
pub const HEADER_LEN: usize = field::COMPARE.end;

header_view!(
    /// An AtomicETH in a buffer.
    "an AtomicETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address (must be 8-byte aligned).
    #[inline]
    pub fn va(&self) -> u64 {
        view::get_u64(self.buffer.as_ref(), field::VA)
    }
    /// R_Key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::RKEY)
    }
    /// Swap value (COMPARE_SWAP) or add value (FETCH_ADD).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        view::get_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value (COMPARE_SWAP).
    #[inline]
    pub fn compare(&self) -> u64 {
        view::get_u64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `va`.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        view::set_u64(self.buffer.as_mut(), field::VA, v);
    }
    /// Set the field `rkey`.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
    /// Set the field `swap_add`.
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        view::set_u64(self.buffer.as_mut(), field::SWAP_ADD, v);
    }
    /// Set the field `compare`.
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        view::set_u64(self.buffer.as_mut(), field::COMPARE, v);
    }
}

/// AtomicETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address (must be 8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap value (COMPARE_SWAP) or add value (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// The meaning of a AtomicETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> AtomicEthRepr {
        AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}
