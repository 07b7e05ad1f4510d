//! RDMA Extended Transport Header, 16 bytes, IBTA 1.7 §9.3.3: in RDMA WRITE
//! FIRST/ONLY, READ requests, FLUSH and ATOMIC WRITE.
//!
//! ```text
//! | virtual address (8) | R_Key (4) | DMA length (4) |
//! ```

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// Length of the RETH, bytes.
pub const HEADER_LEN: usize = field::DMA_LEN.end;

header_view!(
    /// A RETH in a buffer.
    "a RETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address.
    #[inline]
    pub fn va(&self) -> u64 {
        view::get_u64(self.buffer.as_ref(), field::VA)
    }
    /// R_Key.
    #[inline]
    pub fn rkey(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::RKEY)
    }
    /// DMA length of the whole message, bytes.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::DMA_LEN)
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
    /// Set the field `dma_len`.
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        view::set_u32(self.buffer.as_mut(), field::DMA_LEN, v);
    }
}

/// RETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length of the whole message, bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// The meaning of a RETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> RethRepr {
        RethRepr {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}
