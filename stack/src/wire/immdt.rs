//! Immediate Data Extended Transport Header, 4 bytes, IBTA 1.7 §9.3.8: opaque
//! 32 bits passed to the receive completion unchanged.
//!
//! ```text
//! | immediate data (4) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const IMM: Field = 0..4;
}

/// Length of the ImmDt, bytes.
pub const HEADER_LEN: usize = field::IMM.end;

header_view!(
    /// An ImmDt in a buffer.
    "an ImmDt",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Immediate data, as the big-endian value of its 4 bytes.
    #[inline]
    pub fn imm(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `imm`.
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::IMM, v);
    }
}

/// ImmDt meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDtRepr {
    /// Immediate data, as the big-endian value of its 4 bytes.
    pub imm: u32,
}

impl ImmDtRepr {
    /// The meaning of a ImmDt.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> ImmDtRepr {
        ImmDtRepr { imm: h.imm() }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_imm(self.imm);
    }
}
