//! XRC Extended Transport Header, 4 bytes (IBTA 1.7 XRC annex, §9.3.7): first
//! after the BTH of an XRC request.
//!
//! ```text
//! | rsvd (1) | XRC SRQ (3) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const RSVD: Field = 0..1;
    pub const XRC_SRQ: Field = 1..4;
}

/// Length of the XRCETH, bytes.
pub const HEADER_LEN: usize = field::XRC_SRQ.end;

header_view!(
    /// A XRCETH in a buffer.
    "a XRCETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Reserved byte.
    #[inline]
    pub fn rsvd(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD.start]
    }
    /// XRC SRQ number (24 bits).
    #[inline]
    pub fn xrc_srq(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::XRC_SRQ)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `rsvd`.
    #[inline]
    pub fn set_rsvd(&mut self, v: u8) {
        self.buffer.as_mut()[field::RSVD.start] = v;
    }
    /// Set the field `xrc_srq` (modulo 2^24).
    #[inline]
    pub fn set_xrc_srq(&mut self, v: u32) {
        view::set_u24(self.buffer.as_mut(), field::XRC_SRQ, v);
    }
}

/// XRCETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct XrcethRepr {
    /// Reserved byte.
    pub rsvd: u8,
    /// XRC SRQ number (24 bits).
    pub xrc_srq: u32,
}

impl XrcethRepr {
    /// The meaning of a XRCETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> XrcethRepr {
        XrcethRepr {
            rsvd: h.rsvd(),
            xrc_srq: h.xrc_srq(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_rsvd(self.rsvd);
        h.set_xrc_srq(self.xrc_srq);
    }
}
