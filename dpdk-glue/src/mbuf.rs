//! [`Mbuf`]: an owned packet buffer (`struct rte_mbuf`), possibly a chain.
//!
//! Ownership rules: an `Mbuf` is the only handle to its mbuf chain; dropping
//! it frees the chain (`rte_pktmbuf_free`); handing it to
//! [`crate::Port::tx_burst`] moves it to the driver, which frees it after
//! transmission. There is no way to free an mbuf twice or to leak one
//! without `mem::forget`.

use std::ptr::NonNull;

use dpdk_sys::rte_mbuf;

/// An owned mbuf chain. `repr(transparent)` over a non-null pointer, so a
/// `[Mbuf]` is a `struct rte_mbuf *[]` for the burst calls.
#[repr(transparent)]
pub struct Mbuf(NonNull<rte_mbuf>);

// SAFETY: an Mbuf is the unique owner of its chain; DPDK lets any thread
// read, write and free an mbuf it owns (mempool puts are MP-safe).
unsafe impl Send for Mbuf {}
// SAFETY: &Mbuf only allows reading the chain's bytes and header fields.
unsafe impl Sync for Mbuf {}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the chain exclusively (see the type's invariant); it
        // is freed exactly once, here.
        unsafe { dpdk_sys::shim_rte_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("pkt_len", &self.pkt_len())
            .field("nb_segs", &self.nb_segs())
            .field("data_len", &self.data_len())
            .finish()
    }
}

impl Mbuf {
    /// Take ownership of a raw mbuf chain; `None` for a null pointer.
    ///
    /// # Safety
    /// `m` must be null or point to a valid mbuf chain that nothing else
    /// owns or frees (e.g. fresh from `rte_pktmbuf_alloc` or
    /// `rte_eth_rx_burst`).
    pub unsafe fn from_raw(m: *mut rte_mbuf) -> Option<Mbuf> {
        NonNull::new(m).map(Mbuf)
    }

    /// Give up ownership: the caller must free the chain (or hand it to a
    /// DPDK call that takes ownership).
    pub fn into_raw(self) -> *mut rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The raw pointer, still owned by `self`.
    pub fn as_ptr(&self) -> *mut rte_mbuf {
        self.0.as_ptr()
    }

    /// Bytes in the first segment (`data_len`).
    pub fn data_len(&self) -> usize {
        // SAFETY: valid mbuf (invariant); reads one field.
        usize::from(unsafe { dpdk_sys::shim_rte_pktmbuf_data_len(self.0.as_ptr()) })
    }

    /// Bytes in the whole chain (`pkt_len`).
    pub fn pkt_len(&self) -> usize {
        // SAFETY: valid mbuf; reads one field.
        unsafe { dpdk_sys::shim_rte_pktmbuf_pkt_len(self.0.as_ptr()) as usize }
    }

    /// Segments in the chain (`nb_segs`).
    pub fn nb_segs(&self) -> usize {
        // SAFETY: valid mbuf; reads one field.
        usize::from(unsafe { dpdk_sys::shim_rte_pktmbuf_nb_segs(self.0.as_ptr()) })
    }

    /// Free bytes before the data of the first segment.
    pub fn headroom(&self) -> usize {
        // SAFETY: valid mbuf; reads header fields.
        usize::from(unsafe { dpdk_sys::shim_rte_pktmbuf_headroom(self.0.as_ptr()) })
    }

    /// Free bytes after the data of the first segment.
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid mbuf; reads header fields.
        usize::from(unsafe { dpdk_sys::shim_rte_pktmbuf_tailroom(self.0.as_ptr()) })
    }

    /// Reference count of the first segment (`rte_mbuf_refcnt_read`).
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid mbuf; an atomic read.
        unsafe { dpdk_sys::shim_rte_mbuf_refcnt_read(self.0.as_ptr()) }
    }

    /// Whether the first segment points at an external buffer
    /// (`RTE_MBUF_HAS_EXTBUF`).
    pub fn has_extbuf(&self) -> bool {
        // SAFETY: valid mbuf; reads ol_flags.
        unsafe { dpdk_sys::shim_rte_mbuf_has_extbuf(self.0.as_ptr()) != 0 }
    }

    /// Whether the data of the first segment may be written through this
    /// handle: a direct mbuf (its own buffer, not indirect, not external)
    /// with reference count 1.
    pub fn is_writable(&self) -> bool {
        // SAFETY: valid mbuf; reads ol_flags and refcnt.
        unsafe {
            dpdk_sys::shim_rte_mbuf_direct(self.0.as_ptr()) != 0
                && dpdk_sys::shim_rte_mbuf_refcnt_read(self.0.as_ptr()) == 1
        }
    }

    /// The data of the first segment.
    pub fn data(&self) -> &[u8] {
        seg_data(self.0)
    }

    /// The data of the first segment, writable; `None` unless
    /// [`Mbuf::is_writable`].
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        if !self.is_writable() {
            return None;
        }
        let len = self.data_len();
        // SAFETY: mtod points at `data_len` initialised bytes of this mbuf's
        // own buffer, which nobody else references (direct, refcnt 1), for as
        // long as `&mut self` is borrowed.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                dpdk_sys::shim_rte_pktmbuf_mtod(self.0.as_ptr()).cast::<u8>(),
                len,
            )
        })
    }

    /// The first segment's data plus its tailroom: the buffer a transmit
    /// path writes a frame into before [`Mbuf::set_len`]. `None` for a
    /// chain or an mbuf that is not [`Mbuf::is_writable`].
    pub fn room_mut(&mut self) -> Option<&mut [u8]> {
        if self.nb_segs() != 1 || !self.is_writable() {
            return None;
        }
        let len = self.data_len() + self.tailroom();
        // SAFETY: from mtod to the end of the mbuf's own buffer lie
        // data_len + tailroom bytes of DPDK-allocated (hence initialised)
        // memory, exclusively ours (direct, refcnt 1, single segment).
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                dpdk_sys::shim_rte_pktmbuf_mtod(self.0.as_ptr()).cast::<u8>(),
                len,
            )
        })
    }

    /// Let `fill` write a frame into the room of a fresh transmit mbuf (a
    /// single direct segment with reference count 1) and set the mbuf's
    /// length to what it returns: two calls into DPDK instead of the ten
    /// that [`Mbuf::room_mut`] and [`Mbuf::set_len`] make. `None` if the
    /// mbuf is not such a segment; `Some(Err(len))` (length unchanged) if
    /// `fill` returned more than the room, `Some(Ok(None))` if it wrote
    /// nothing.
    pub fn fill_room(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<Result<Option<usize>, usize>> {
        let mut room = 0u32;
        // SAFETY: valid mbuf; the shim reads header fields and returns NULL
        // unless it is a single direct segment with reference count 1.
        let p = unsafe { dpdk_sys::shim_mbuf_tx_room(self.0.as_ptr(), &mut room) };
        if p.is_null() {
            return None;
        }
        let room = (room as usize).min(max).min(usize::from(u16::MAX));
        // SAFETY: from mtod lie data_len + tailroom >= `room` bytes of the
        // mbuf's own (DPDK-initialised) buffer, exclusively ours (direct,
        // refcnt 1, single segment) while `&mut self` is borrowed.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, room) };
        let Some(len) = fill(buf) else {
            return Some(Ok(None));
        };
        if len > room {
            return Some(Err(len));
        }
        // SAFETY: single segment, `len` <= room <= u16::MAX (checked above).
        unsafe { dpdk_sys::shim_rte_pktmbuf_set_len(self.0.as_ptr(), len as u16) };
        Some(Ok(Some(len)))
    }

    /// The data of a single-segment mbuf (one call into DPDK), `None` for a
    /// chain.
    pub fn single_segment_data(&self) -> Option<&[u8]> {
        let mut len = 0u32;
        // SAFETY: valid mbuf; the shim reads header fields.
        let p = unsafe { dpdk_sys::shim_mbuf_rx_data(self.0.as_ptr(), &mut len) };
        if p.is_null() {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: the segment's data is `len` initialised bytes, not mutated
        // while `&self` is borrowed.
        Some(unsafe { std::slice::from_raw_parts(p, len as usize) })
    }

    /// Set the length of a single-segment mbuf (`data_len` = `pkt_len` =
    /// `len`). Returns `false` (and changes nothing) for a chain or when
    /// `len` exceeds data + tailroom.
    pub fn set_len(&mut self, len: usize) -> bool {
        if self.nb_segs() != 1 || len > self.data_len() + self.tailroom() {
            return false;
        }
        let Ok(len) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: single segment and `len` fits the buffer (checked above).
        unsafe { dpdk_sys::shim_rte_pktmbuf_set_len(self.0.as_ptr(), len) };
        true
    }

    /// Grow the data by `len` bytes at the end (`rte_pktmbuf_append`) and
    /// return them; `None` if the tailroom is too small or the last segment
    /// is not writable (this handle only appends to single-segment,
    /// writable mbufs).
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.nb_segs() != 1 || !self.is_writable() {
            return None;
        }
        let n = u16::try_from(len).ok()?;
        // SAFETY: valid, exclusively owned single-segment mbuf; DPDK checks
        // the tailroom and returns NULL when it is short.
        let p = unsafe { dpdk_sys::shim_rte_pktmbuf_append(self.0.as_ptr(), n) };
        let p = NonNull::new(p.cast::<u8>())?;
        // SAFETY: DPDK returned the start of `len` bytes of our own buffer.
        Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Grow the data by `len` bytes at the front (`rte_pktmbuf_prepend`)
    /// and return them; `None` if the headroom is too small or the mbuf is
    /// not writable.
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        if !self.is_writable() {
            return None;
        }
        let n = u16::try_from(len).ok()?;
        // SAFETY: valid, exclusively owned mbuf; DPDK checks the headroom.
        let p = unsafe { dpdk_sys::shim_rte_pktmbuf_prepend(self.0.as_ptr(), n) };
        let p = NonNull::new(p.cast::<u8>())?;
        // SAFETY: DPDK returned the new start of data, `len` bytes of our
        // own writable buffer.
        Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Remove `len` bytes from the front of the first segment
    /// (`rte_pktmbuf_adj`). Returns `false` if it holds fewer.
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(n) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: valid, owned mbuf; DPDK checks the length.
        !unsafe { dpdk_sys::shim_rte_pktmbuf_adj(self.0.as_ptr(), n) }.is_null()
    }

    /// Remove `len` bytes from the end of the last segment
    /// (`rte_pktmbuf_trim`). Returns `false` if it holds fewer.
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(n) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: valid, owned mbuf; DPDK checks the length.
        unsafe { dpdk_sys::shim_rte_pktmbuf_trim(self.0.as_ptr(), n) == 0 }
    }

    /// Append `tail`'s chain to this one (`rte_pktmbuf_chain`). On failure
    /// (the chain would exceed `RTE_MBUF_MAX_NB_SEGS`) `tail` is handed back.
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        // SAFETY: both are valid chains we own; on success DPDK links `tail`
        // into ours, so ownership moves into `self` (hence into_raw).
        let ret = unsafe { dpdk_sys::shim_rte_pktmbuf_chain(self.0.as_ptr(), tail.as_ptr()) };
        if ret == 0 {
            let _ = tail.into_raw();
            Ok(())
        } else {
            Err(tail)
        }
    }

    /// The data of each segment, in order.
    pub fn segments(&self) -> Segments<'_> {
        Segments {
            next: Some(self.0),
            _chain: std::marker::PhantomData,
        }
    }

    /// Append the whole chain's data to `out` (linearise).
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.pkt_len());
        for s in self.segments() {
            out.extend_from_slice(s);
        }
    }
}

/// Iterator over the segments of an [`Mbuf`] chain.
#[derive(Debug)]
pub struct Segments<'a> {
    next: Option<NonNull<rte_mbuf>>,
    _chain: std::marker::PhantomData<&'a Mbuf>,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let m = self.next?;
        // SAFETY: `m` is a segment of a chain borrowed for 'a; `next` is
        // NULL or the following segment of the same chain.
        self.next = NonNull::new(unsafe { dpdk_sys::shim_rte_pktmbuf_next(m.as_ptr()) });
        Some(seg_data(m))
    }
}

/// The data of one segment, borrowed for as long as the caller's borrow of
/// the chain.
fn seg_data<'a>(m: NonNull<rte_mbuf>) -> &'a [u8] {
    // SAFETY: `m` is a valid segment; mtod/data_len read header fields.
    let (p, len) = unsafe {
        (
            dpdk_sys::shim_rte_pktmbuf_mtod(m.as_ptr()).cast::<u8>(),
            usize::from(dpdk_sys::shim_rte_pktmbuf_data_len(m.as_ptr())),
        )
    };
    if len == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: the segment's data is `len` initialised bytes (written by the
    // driver or by us), not mutated while the chain is shared-borrowed; the
    // caller ties 'a to that borrow.
    unsafe { std::slice::from_raw_parts(p, len) }
}

/// Free every mbuf of `mbufs` in one call (`rte_pktmbuf_free_bulk`) and
/// leave the vector empty.
pub fn free_bulk(mbufs: &mut Vec<Mbuf>) {
    let n = mbufs.len();
    if n == 0 {
        return;
    }
    let Ok(count) = u32::try_from(n) else {
        mbufs.clear();
        return;
    };
    // SAFETY: set_len(0) first so the Mbufs are never dropped again; the
    // buffer still holds `n` valid owned pointers (Mbuf is repr(transparent)),
    // which DPDK frees exactly once.
    unsafe {
        mbufs.set_len(0);
        dpdk_sys::rte_pktmbuf_free_bulk(mbufs.as_mut_ptr().cast(), count);
    }
}
