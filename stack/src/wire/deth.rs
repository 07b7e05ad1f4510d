//! Datagram Extended Transport Header, 8 bytes, IBTA 1.7 §9.3.2: in every UD
//! (and RD) request.
//!
//! ```text
//! | Q_Key (4) | rsvd (1) | SrcQP (3) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const QKEY: Field = 0..4;
    pub const RSVD: Field = 4..5;
    pub const SRC_QP: Field = 5..8;
}

/// Length of the DETH, bytes.
pub const HEADER_LEN: usize = field::SRC_QP.end;

header_view!(
    /// A DETH in a buffer.
    "a DETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Q_Key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::QKEY)
    }
    /// Reserved byte.
    #[inline]
    pub fn rsvd(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD.start]
    }
    /// Source QPN (24 bits).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `qkey`.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::QKEY, v);
    }
    /// Set the field `rsvd`.
    #[inline]
    pub fn set_rsvd(&mut self, v: u8) {
        self.buffer.as_mut()[field::RSVD.start] = v;
    }
    /// Set the field `src_qp` (modulo 2^24).
    #[inline]
    pub fn set_src_qp(&mut self, v: u32) {
        view::set_u24(self.buffer.as_mut(), field::SRC_QP, v);
    }
}

/// DETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: u32,
    /// Reserved byte.
    pub rsvd: u8,
    /// Source QPN (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// The meaning of a DETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> DethRepr {
        DethRepr {
            qkey: h.qkey(),
            rsvd: h.rsvd(),
            src_qp: h.src_qp(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_qkey(self.qkey);
        h.set_rsvd(self.rsvd);
        h.set_src_qp(self.src_qp);
    }
}
