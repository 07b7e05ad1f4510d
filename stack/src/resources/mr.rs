//! Memory regions (IBTA 1.7 §10.6): registered buffers with an I/O virtual
//! address, an lkey, an rkey and access rights. The device owns the memory while
//! it is registered (safe Rust has no pinned foreign pointers); the caller reads
//! and writes it through [`crate::verbs::Device::mr`] / `mr_mut`, and gets the
//! buffer back from `dereg_mr`.
//!
//! Shared MRs ([`crate::verbs::Device::reg_mr_shared`]) instead hold an
//! `Arc<[u8]>` the caller keeps a clone of. The stack never writes them
//! (registration refuses LOCAL_WRITE, REMOTE_WRITE and REMOTE_ATOMIC), so a
//! transmit path may hand the MR's bytes to a driver by reference, pinned by
//! an `Arc` clone until the driver is done with them: they can be the source
//! of SEND and RDMA WRITE payloads and of RDMA READ responses, never a
//! destination.
//!
//! External MRs ([`crate::verbs::Device::reg_mr_external`]) are memory the
//! caller keeps owning and lends through an [`MrBuffer`] (the drop-in
//! libibverbs registers an application's own buffer this way): the stack
//! reads and writes it in place, with the same bounds and access checks.

use crate::resources::keymap::KeyMap;
use std::ops::Range;
use std::sync::Arc;

use super::types::AccessFlags;

/// Memory an MR lends from its owner ([`crate::verbs::Device::reg_mr_external`]):
/// the device reads and writes it in place through these two views, only
/// while it handles a frame or a work request, and drops the buffer at
/// [`crate::verbs::Device::dereg_mr`]. Both views must cover the same bytes
/// (the MR's length is `as_slice().len()`, fixed at registration).
pub trait MrBuffer: Send + std::fmt::Debug {
    /// The bytes, readable.
    fn as_slice(&self) -> &[u8];
    /// The bytes, writable.
    fn as_mut_slice(&mut self) -> &mut [u8];
}

/// The memory behind an MR.
#[derive(Debug)]
pub(crate) enum MrMem {
    /// Owned by the device while registered ([`crate::verbs::Device::reg_mr`]).
    Owned(Vec<u8>),
    /// Bytes `start..start + len` of an owned buffer
    /// ([`crate::verbs::Device::reg_mr_window`]): the rest of the buffer
    /// (alignment padding) is not part of the MR and no access reaches it.
    Window {
        /// The whole buffer.
        buf: Vec<u8>,
        /// First byte of the MR in `buf`.
        start: usize,
        /// Length of the MR, bytes (`start + len <= buf.len()`, checked at
        /// registration).
        len: usize,
    },
    /// Shared with the caller, read-only ([`crate::verbs::Device::reg_mr_shared`]).
    Shared(Arc<[u8]>),
    /// Lent by the caller ([`crate::verbs::Device::reg_mr_external`]).
    External(Box<dyn MrBuffer>),
}

impl MrMem {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            MrMem::Owned(v) => v,
            MrMem::Window { buf, start, len } => buf.get(*start..*start + *len).unwrap_or(&[]),
            MrMem::Shared(a) => a,
            MrMem::External(b) => b.as_slice(),
        }
    }
    /// Writable bytes: empty for a shared MR (never written; the access
    /// checks refuse every write to it before this is reached).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            MrMem::Owned(v) => v,
            MrMem::Window { buf, start, len } => {
                buf.get_mut(*start..*start + *len).unwrap_or(&mut [])
            }
            MrMem::Shared(_) => &mut [],
            MrMem::External(b) => b.as_mut_slice(),
        }
    }
}

/// A registered memory region.
#[derive(Debug)]
pub struct Mr {
    pub(crate) pd: u32,
    pub(crate) buf: MrMem,
    pub(crate) iova: u64,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: AccessFlags,
}

impl Mr {
    /// The memory.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.bytes()
    }
    /// The memory, writable. Empty for a shared MR
    /// ([`crate::verbs::Device::reg_mr_shared`]): write it through your own
    /// handle before registering it, it is read-only afterwards.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.bytes_mut()
    }
    /// The shared memory of an MR registered with
    /// [`crate::verbs::Device::reg_mr_shared`]; `None` for an owned MR.
    pub fn shared(&self) -> Option<&Arc<[u8]>> {
        match &self.buf {
            MrMem::Shared(a) => Some(a),
            MrMem::Owned(_) | MrMem::Window { .. } | MrMem::External(_) => None,
        }
    }
    /// I/O virtual address of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Length, bytes.
    pub fn len(&self) -> usize {
        self.buf.bytes().len()
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.bytes().is_empty()
    }
    /// Access rights.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Byte range of `[va, va + len)` inside the buffer, if it lies inside.
    pub(crate) fn range(&self, va: u64, len: u64) -> Option<Range<usize>> {
        let start = va.checked_sub(self.iova)?;
        let end = start.checked_add(len)?;
        (end <= self.buf.bytes().len() as u64).then_some(start as usize..end as usize)
    }
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccessError {
    /// No MR with that key (or another PD).
    BadKey,
    /// Outside the MR.
    Range,
    /// The MR lacks the right.
    Rights,
}

/// Every MR of a device, indexed by lkey and by rkey.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    mrs: KeyMap<u32, Mr>,
    by_rkey: KeyMap<u32, u32>,
    next_index: u32,
}

impl MrTable {
    /// Allocate a fresh key: index << 8 | 8-bit tag (the rxe layout).
    pub(crate) fn fresh_key(&mut self) -> u32 {
        loop {
            self.next_index = self.next_index.wrapping_add(1) & 0x00FF_FFFF;
            let key = self.next_index << 8 | (self.next_index.wrapping_mul(0x9E) & 0xFF);
            if key != 0 && !self.mrs.contains_key(&key) && !self.by_rkey.contains_key(&key) {
                return key;
            }
        }
    }
    pub(crate) fn rkey_in_use(&self, rkey: u32) -> bool {
        self.by_rkey.contains_key(&rkey)
    }
    pub(crate) fn insert(&mut self, mr: Mr) {
        self.by_rkey.insert(mr.rkey, mr.lkey);
        self.mrs.insert(mr.lkey, mr);
    }
    pub(crate) fn remove(&mut self, lkey: u32) -> Option<Mr> {
        let mr = self.mrs.remove(&lkey)?;
        self.by_rkey.remove(&mr.rkey);
        Some(mr)
    }
    pub(crate) fn get(&self, lkey: u32) -> Option<&Mr> {
        self.mrs.get(&lkey)
    }
    pub(crate) fn get_mut(&mut self, lkey: u32) -> Option<&mut Mr> {
        self.mrs.get_mut(&lkey)
    }
    pub(crate) fn pd_has_mrs(&self, pd: u32) -> bool {
        self.mrs.values().any(|m| m.pd == pd)
    }

    /// Check a local access by `lkey` of `len` bytes at `va` in `pd`.
    pub(crate) fn local(
        &mut self,
        pd: u32,
        lkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&mut Mr, Range<usize>), AccessError> {
        let mr = self.mrs.get_mut(&lkey).ok_or(AccessError::BadKey)?;
        if mr.pd != pd {
            return Err(AccessError::BadKey);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::Rights);
        }
        let r = mr.range(va, len).ok_or(AccessError::Range)?;
        Ok((mr, r))
    }

    /// Check a remote access by `rkey` of `len` bytes at `va` in `pd`
    /// (IBTA 1.7 §9.7.4.1.5, C9-86..C9-88).
    pub(crate) fn remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&mut Mr, Range<usize>), AccessError> {
        let lkey = *self.by_rkey.get(&rkey).ok_or(AccessError::BadKey)?;
        self.local(pd, lkey, va, len, need)
    }
}
