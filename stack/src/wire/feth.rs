//! Flush Extended Transport Header, 4 bytes (IBTA 1.5 memory placement
//! extensions): before the RETH of a FLUSH.
//!
//! ```text
//! | rsvd (26 bits) | selectivity level (bits 5:4) | placement type (bits 3:0) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const RAW: Field = 0..4;
}

/// Length of the FETH, bytes.
pub const HEADER_LEN: usize = field::RAW.end;

header_view!(
    /// A FETH in a buffer.
    "a FETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The whole 32-bit field.
    #[inline]
    pub fn raw(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::RAW)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `raw`.
    #[inline]
    pub fn set_raw(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::RAW, v);
    }
}

/// FETH meaning (FLUSH, IBTA 1.5 memory placement extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// The whole 32-bit field.
    pub raw: u32,
}

impl FethRepr {
    /// The meaning of a FETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> FethRepr {
        FethRepr { raw: h.raw() }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_raw(self.raw);
    }
}

impl FethRepr {
    /// Selectivity level, bits 5:4.
    pub fn selectivity_level(&self) -> u8 {
        ((self.raw >> 4) & 3) as u8
    }
    /// Placement type, bits 3:0.
    pub fn placement_type(&self) -> u8 {
        (self.raw & 0xF) as u8
    }
}
