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
use std::cell::Cell;
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
    /// `buf.bytes().len()`, fixed at registration.
    pub(crate) len: u64,
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
        self.len as usize
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
        (end <= self.len).then_some(start as usize..end as usize)
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
///
/// A key is `index << 8 | tag` (the rxe layout): the MR lives in slot
/// `index` of a table, so finding it by lkey, or by an rkey the device
/// chose (equal to the lkey), is one indexed load and a compare, not a hash
/// probe. The tag changes each time a slot is reused, so a stale key finds
/// nothing. R_Keys chosen by the caller ([`crate::verbs::Device::reg_mr_with_rkey`],
/// `reg_mr_window`) are found through a map beside the table.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    slots: Vec<MrSlot>,
    /// Free slot indices (reused last-freed first).
    free: Vec<u32>,
    /// R_Keys that are not their MR's lkey: rkey → lkey.
    custom_rkeys: KeyMap<u32, u32>,
    /// The last caller-chosen R_Key found and its lkey: a stream of
    /// requests to one region finds it without the map (checked against
    /// the slot, so a stale entry finds nothing).
    last_custom: Cell<(u32, u32)>,
}

/// One slot of an [`MrTable`].
#[derive(Debug, Default)]
struct MrSlot {
    mr: Option<Mr>,
    /// The tag of the slot's current (or last) key.
    tag: u8,
}

/// Key indices are 24 bits.
const MAX_INDEX: usize = 1 << 24;

impl MrTable {
    /// The slot index of `key`.
    #[inline(always)]
    fn index(key: u32) -> usize {
        (key >> 8) as usize
    }

    /// The key the next [`MrTable::insert`] of a fresh MR uses as its
    /// lkey: index << 8 | 8-bit tag (the rxe layout), never 0, never a
    /// key in use.
    pub(crate) fn fresh_key(&mut self) -> u32 {
        let index = match self.free.last() {
            Some(&i) => i as usize,
            None => self.slots.len().max(1),
        };
        // Index 0 is never used (key 0 is not a key); beyond 2^24 slots
        // the table is full and the last index is reused (never reached:
        // 16 M MRs).
        let index = index.min(MAX_INDEX - 1);
        let mut tag = self.slots.get(index).map_or(0, |s| s.tag);
        loop {
            tag = tag.wrapping_add(0x9E | 1);
            let key = (index as u32) << 8 | u32::from(tag);
            if key != 0 && !self.custom_rkeys.contains_key(&key) {
                return key;
            }
        }
    }
    pub(crate) fn rkey_in_use(&self, rkey: u32) -> bool {
        self.by_rkey(rkey).is_some()
    }
    /// Register `mr` (its lkey from [`MrTable::fresh_key`]).
    pub(crate) fn insert(&mut self, mr: Mr) {
        let index = Self::index(mr.lkey);
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, MrSlot::default);
        }
        if let Some(p) = self.free.iter().rposition(|&i| i as usize == index) {
            self.free.swap_remove(p);
        }
        if mr.rkey != mr.lkey {
            self.custom_rkeys.insert(mr.rkey, mr.lkey);
        }
        let slot = &mut self.slots[index];
        slot.tag = mr.lkey as u8;
        slot.mr = Some(mr);
    }
    pub(crate) fn remove(&mut self, lkey: u32) -> Option<Mr> {
        let index = Self::index(lkey);
        let slot = self.slots.get_mut(index)?;
        if slot.mr.as_ref()?.lkey != lkey {
            return None;
        }
        let mr = slot.mr.take()?;
        if mr.rkey != mr.lkey {
            self.custom_rkeys.remove(&mr.rkey);
        }
        self.free.push(index as u32);
        Some(mr)
    }
    #[inline(always)]
    pub(crate) fn get(&self, lkey: u32) -> Option<&Mr> {
        self.slots
            .get(Self::index(lkey))?
            .mr
            .as_ref()
            .filter(|m| m.lkey == lkey)
    }
    #[inline(always)]
    pub(crate) fn get_mut(&mut self, lkey: u32) -> Option<&mut Mr> {
        self.slots
            .get_mut(Self::index(lkey))?
            .mr
            .as_mut()
            .filter(|m| m.lkey == lkey)
    }
    /// The MR with `rkey`, if its slot says so.
    #[inline(always)]
    fn rkey_at(&self, index: usize, rkey: u32) -> Option<u32> {
        let m = self.slots.get(index)?.mr.as_ref()?;
        (m.rkey == rkey).then_some(m.lkey)
    }

    /// The lkey of the MR whose rkey is `rkey`.
    #[inline(always)]
    fn by_rkey(&self, rkey: u32) -> Option<u32> {
        if let Some(l) = self.rkey_at(Self::index(rkey), rkey) {
            return Some(l);
        }
        let (r, l) = self.last_custom.get();
        if r == rkey {
            if let Some(l) = self.rkey_at(Self::index(l), rkey) {
                return Some(l);
            }
        }
        self.by_custom_rkey(rkey)
    }

    /// A caller-chosen R_Key, from the map (remembered for the next).
    #[inline(never)]
    fn by_custom_rkey(&self, rkey: u32) -> Option<u32> {
        let l = *self.custom_rkeys.get(&rkey)?;
        self.last_custom.set((rkey, l));
        Some(l)
    }
    pub(crate) fn pd_has_mrs(&self, pd: u32) -> bool {
        self.slots
            .iter()
            .any(|s| s.mr.as_ref().is_some_and(|m| m.pd == pd))
    }

    /// Check a local access by `lkey` of `len` bytes at `va` in `pd`.
    /// (Inlined: returned through memory from a call, the MR and range
    /// cost the caller more than the check itself.)
    #[inline(always)]
    pub(crate) fn local(
        &mut self,
        pd: u32,
        lkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&mut Mr, Range<usize>), AccessError> {
        let mr = self.get_mut(lkey).ok_or(AccessError::BadKey)?;
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
    #[inline(always)]
    pub(crate) fn remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(&mut Mr, Range<usize>), AccessError> {
        let lkey = self.by_rkey(rkey).ok_or(AccessError::BadKey)?;
        self.local(pd, lkey, va, len, need)
    }
}
