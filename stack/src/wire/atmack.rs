//! Atomic Acknowledge Extended Transport Header, 8 bytes, IBTA 1.7 §9.3.6:
//! after the AETH of an ATOMIC ACKNOWLEDGE.
//!
//! ```text
//! | original remote data (8) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const ORIG: Field = 0..8;
}

/// Length of the AtomicAckETH, bytes.
pub const HEADER_LEN: usize = field::ORIG.end;

header_view!(
    /// An AtomicAckETH in a buffer.
    "an AtomicAckETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Original value of the remote 64-bit word.
    #[inline]
    pub fn orig(&self) -> u64 {
        view::get_u64(self.buffer.as_ref(), field::ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `orig`.
    #[inline]
    pub fn set_orig(&mut self, v: u64) {
        view::set_u64(self.buffer.as_mut(), field::ORIG, v);
    }
}

/// AtomicAckETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// Original value of the remote 64-bit word.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// The meaning of a AtomicAckETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig: h.orig() }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_orig(self.orig);
    }
}
