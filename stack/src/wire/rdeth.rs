//! Reliable Datagram Extended Transport Header, 4 bytes, IBTA 1.7 §9.3.1.
//!
//! ```text
//! | rsvd (1) | EE-context (3) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const RSVD: Field = 0..1;
    pub const EE_CONTEXT: Field = 1..4;
}

/// Length of the RDETH, bytes.
pub const HEADER_LEN: usize = field::EE_CONTEXT.end;

header_view!(
    /// A RDETH in a buffer.
    "a RDETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Reserved byte.
    #[inline]
    pub fn rsvd(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD.start]
    }
    /// EE context (24 bits).
    #[inline]
    pub fn ee_context(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::EE_CONTEXT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `rsvd`.
    #[inline]
    pub fn set_rsvd(&mut self, v: u8) {
        self.buffer.as_mut()[field::RSVD.start] = v;
    }
    /// Set the field `ee_context` (modulo 2^24).
    #[inline]
    pub fn set_ee_context(&mut self, v: u32) {
        view::set_u24(self.buffer.as_mut(), field::EE_CONTEXT, v);
    }
}

/// RDETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdethRepr {
    /// Reserved byte.
    pub rsvd: u8,
    /// EE context (24 bits).
    pub ee_context: u32,
}

impl RdethRepr {
    /// The meaning of a RDETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> RdethRepr {
        RdethRepr {
            rsvd: h.rsvd(),
            ee_context: h.ee_context(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_rsvd(self.rsvd);
        h.set_ee_context(self.ee_context);
    }
}
