//! Invalidate Extended Transport Header, 4 bytes, IBTA 1.7 §9.3.9: in
//! SEND_LAST/ONLY_WITH_INVALIDATE.
//!
//! ```text
//! | R_Key to invalidate (4) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const RKEY: Field = 0..4;
}

/// Length of the IETH, bytes.
pub const HEADER_LEN: usize = field::RKEY.end;

header_view!(
    /// An IETH in a buffer.
    "an IETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The R_Key to invalidate.
    #[inline]
    pub fn rkey(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `rkey`.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::RKEY, v);
    }
}

/// IETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// The meaning of a IETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> IethRepr {
        IethRepr { rkey: h.rkey() }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_rkey(self.rkey);
    }
}
