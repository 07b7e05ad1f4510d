//! Zero-copy transmit of large payloads: an mbuf chain whose middle segment
//! points into the caller's memory (`rte_pktmbuf_attach_extbuf`).
//!
//! A RoCEv2 data packet is `headers | payload | pad + ICRC`. Instead of
//! copying the payload into the mbuf, [`tx_chain_extbuf`] builds three
//! segments:
//!
//! 1. a header mbuf holding a copy of the (small) header bytes;
//! 2. an mbuf attached to an external buffer: `len` bytes at `offset` of a
//!    caller-owned, pinned region;
//! 3. a tail mbuf holding the pad bytes and the ICRC.
//!
//! The external segment owns a clone of the region's `Arc` (in a boxed
//! `rte_mbuf_ext_shared_info`) until DPDK calls the free callback, i.e.
//! until the driver has sent the frame and freed the mbuf. The memory
//! cannot move or be freed while a driver may still read it.
//!
//! Devices that DMA (real NICs) need the region's IOVA: this module uses the
//! virtual address, which is right in IOVA-as-VA mode (the default with
//! VFIO and with `--no-huge`); in IOVA-as-PA mode it refuses. With a real
//! NIC the region must also be DMA-mapped (`rte_extmem_register` and
//! `rte_dev_dma_map`) before its first use; that is out of scope here.

use std::ffi::c_void;
use std::sync::Arc;

use dpdk_sys::rte_mbuf_ext_shared_info;

use crate::eal::{ensure_init, Eal, IovaMode};
use crate::error::DpdkError;
use crate::mbuf::Mbuf;
use crate::mempool::Mempool;

/// Memory that stays at one address with unchanged contents for as long as
/// any `Arc` to it lives. DPDK drivers read it after the borrow that
/// produced the pointer has ended.
///
/// # Safety
/// `as_bytes` must return the same slice (address and length) every time,
/// and nothing may write to it while an `Arc<Self>` exists (no interior
/// mutability over those bytes).
pub unsafe trait PinnedRegion: Send + Sync + 'static {
    /// The pinned bytes.
    fn as_bytes(&self) -> &[u8];
}

// SAFETY: a `[u8]` behind an Arc is immutable and never moves.
unsafe impl PinnedRegion for [u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: a Vec behind an Arc cannot be grown or written (no &mut while
// shared) and its heap buffer never moves.
unsafe impl PinnedRegion for Vec<u8> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as for Vec.
unsafe impl PinnedRegion for Box<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

/// The shared info DPDK refcounts, next to the `Arc` that pins the region.
/// Boxed; `fcb_opaque` points back at the box.
struct ExtShared<R: PinnedRegion + ?Sized> {
    shinfo: rte_mbuf_ext_shared_info,
    /// Keeps the region alive and in place until DPDK's free callback.
    _pin: Arc<R>,
}

/// DPDK's free callback: the last mbuf attached to the buffer was freed.
unsafe extern "C" fn ext_free<R: PinnedRegion + ?Sized>(_addr: *mut c_void, opaque: *mut c_void) {
    if opaque.is_null() {
        return;
    }
    // SAFETY: `opaque` is the pointer Box::into_raw returned in
    // tx_chain_extbuf; DPDK calls this exactly once, when the shared info's
    // refcount reaches zero, so the box is reclaimed exactly once. Dropping
    // it releases the Arc that pinned the region.
    drop(unsafe { Box::from_raw(opaque.cast::<ExtShared<R>>()) });
}

/// Build the 3-segment chain `header | region[offset..offset+len] | tail`
/// for transmission, copying only `header` and `tail`.
///
/// `hdr_pool` supplies the header and tail mbufs (their data room must hold
/// `header` and `tail`); `ext_pool` supplies the mbuf that is attached to
/// the region (its own data room is unused: a pool with data room 0 will do).
///
/// # Errors
/// [`DpdkError::ExtBuf`] for a range outside the region, a payload over
/// 65535 bytes (`buf_len` is 16-bit) or IOVA-as-PA mode;
/// [`DpdkError::TooLong`] when `header` or `tail` do not fit an mbuf;
/// [`DpdkError::PoolExhausted`].
pub fn tx_chain_extbuf<R: PinnedRegion + ?Sized>(
    hdr_pool: &Mempool,
    ext_pool: &Mempool,
    header: &[u8],
    region: &Arc<R>,
    offset: usize,
    len: usize,
    tail: &[u8],
) -> Result<Mbuf, DpdkError> {
    ensure_init()?;
    let bytes = region.as_bytes();
    let end = offset
        .checked_add(len)
        .filter(|e| *e <= bytes.len())
        .ok_or_else(|| {
            DpdkError::ExtBuf(format!(
                "range {offset}+{len} outside the {}-byte region",
                bytes.len()
            ))
        })?;
    let Ok(len16) = u16::try_from(len) else {
        return Err(DpdkError::ExtBuf(format!(
            "payload of {len} bytes exceeds the 65535-byte mbuf buf_len"
        )));
    };
    if len == 0 {
        return Err(DpdkError::ExtBuf("empty payload".to_string()));
    }
    let eal = Eal::get().ok_or(DpdkError::NotInitialized)?;
    if eal.iova_mode() == IovaMode::Pa {
        return Err(DpdkError::ExtBuf(
            "IOVA-as-PA mode: caller memory has no known IOVA (run in IOVA-as-VA mode, \
             or register it with rte_extmem_register)"
                .to_string(),
        ));
    }
    let payload = &bytes[offset..end];

    let mut head = hdr_pool
        .alloc()
        .ok_or_else(|| DpdkError::PoolExhausted(hdr_pool.name().to_string()))?;
    let room = head.tailroom();
    head.append(header.len())
        .ok_or(DpdkError::TooLong {
            what: "header",
            len: header.len(),
            room,
        })?
        .copy_from_slice(header);

    let mut tail_m = hdr_pool
        .alloc()
        .ok_or_else(|| DpdkError::PoolExhausted(hdr_pool.name().to_string()))?;
    let room = tail_m.tailroom();
    tail_m
        .append(tail.len())
        .ok_or(DpdkError::TooLong {
            what: "tail",
            len: tail.len(),
            room,
        })?
        .copy_from_slice(tail);

    let ext = ext_pool
        .alloc()
        .ok_or_else(|| DpdkError::PoolExhausted(ext_pool.name().to_string()))?;
    let shared = Box::into_raw(Box::new(ExtShared {
        shinfo: rte_mbuf_ext_shared_info {
            free_cb: Some(ext_free::<R>),
            fcb_opaque: std::ptr::null_mut(),
            refcnt: 0,
        },
        _pin: Arc::clone(region),
    }));
    let addr = payload.as_ptr().cast_mut().cast::<c_void>();
    // SAFETY: `shared` is a live, exclusively owned box. The shared info is
    // initialised (callback, opaque = the box, refcount 1) before `ext`, a
    // fresh direct mbuf with refcnt 1, is attached to the `len` bytes at
    // `addr`; from then on the box belongs to the mbuf and is reclaimed by
    // ext_free when DPDK frees it. The region stays valid and unchanged
    // until then because the box holds an Arc to it (PinnedRegion). The
    // IOVA is the address (IOVA-as-VA, checked above). DPDK only reads the
    // buffer (transmit), and this crate never hands out `&mut` to external
    // data (Mbuf::data_mut/room_mut refuse non-direct mbufs).
    unsafe {
        (*shared).shinfo.fcb_opaque = shared.cast::<c_void>();
        dpdk_sys::shim_rte_mbuf_ext_refcnt_set(&mut (*shared).shinfo, 1);
        dpdk_sys::shim_rte_pktmbuf_attach_extbuf(
            ext.as_ptr(),
            addr,
            addr as u64,
            len16,
            &mut (*shared).shinfo,
        );
        dpdk_sys::shim_rte_pktmbuf_set_len(ext.as_ptr(), len16);
    }

    head.chain(ext)
        .map_err(|_| DpdkError::ExtBuf("chain too long".to_string()))?;
    head.chain(tail_m)
        .map_err(|_| DpdkError::ExtBuf("chain too long".to_string()))?;
    Ok(head)
}

/// The copying alternative to [`tx_chain_extbuf`]: one mbuf holding
/// `header | payload | tail`.
///
/// # Errors
/// [`DpdkError::TooLong`] when the frame does not fit one mbuf;
/// [`DpdkError::PoolExhausted`].
pub fn tx_copy(
    pool: &Mempool,
    header: &[u8],
    payload: &[u8],
    tail: &[u8],
) -> Result<Mbuf, DpdkError> {
    let total = header.len() + payload.len() + tail.len();
    let mut m = pool
        .alloc()
        .ok_or_else(|| DpdkError::PoolExhausted(pool.name().to_string()))?;
    let room = m.tailroom();
    let buf = m.append(total).ok_or(DpdkError::TooLong {
        what: "frame",
        len: total,
        room,
    })?;
    let (h, rest) = buf.split_at_mut(header.len());
    let (p, t) = rest.split_at_mut(payload.len());
    h.copy_from_slice(header);
    p.copy_from_slice(payload);
    t.copy_from_slice(tail);
    Ok(m)
}
