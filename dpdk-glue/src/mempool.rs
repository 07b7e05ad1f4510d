//! [`Mempool`]: a pool of packet buffers (`rte_pktmbuf_pool_create`).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use dpdk_sys::rte_mempool;

use crate::eal::{control_lock, ensure_init};
use crate::error::{errno_text, rte_errno, DpdkError};
use crate::mbuf::Mbuf;

/// Headroom DPDK reserves at the front of every mbuf's data room, bytes
/// (`RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: usize = dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;

/// Data room of a standard mbuf, bytes: 2048 of frame plus the headroom
/// (`RTE_MBUF_DEFAULT_BUF_SIZE`).
pub const DEFAULT_DATA_ROOM: u16 = 2048 + dpdk_sys::RTE_PKTMBUF_HEADROOM as u16;

/// Longest name DPDK accepts for a mempool, bytes: `RTE_MEMPOOL_NAMESIZE`
/// (26 in DPDK 22.11) less the NUL.
const MAX_NAME_LEN: usize = 25;

/// A pool of mbufs, shared by cheap clones (an `Arc`). Thread-safe: DPDK's
/// default mempool ops are multi-producer/multi-consumer.
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    ptr: NonNull<rte_mempool>,
    name: String,
    size: u32,
    data_room: u16,
}

// SAFETY: a DPDK mempool created with default flags is MP/MC safe; the raw
// pointer is only used through thread-safe DPDK calls.
unsafe impl Send for PoolInner {}
// SAFETY: as above; no &self method mutates Rust-side state.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: `ptr` is a live pool; a plain query.
        let in_use = unsafe { dpdk_sys::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use != 0 {
            // An Mbuf from this pool is still alive somewhere (or sits in a
            // driver queue): freeing the pool now would make its later free
            // a use-after-free, so the pool is leaked instead.
            return;
        }
        let _g = control_lock();
        // SAFETY: no mbuf of the pool is in use and no Mempool clone or Port
        // holds it any more (this is the last Arc).
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) };
    }
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("size", &self.inner.size)
            .field("data_room", &self.inner.data_room)
            .field("avail", &self.avail())
            .finish()
    }
}

impl Mempool {
    /// Create a pool of `n` mbufs named `name` (unique in the process, at
    /// most 25 bytes), each with `data_room` bytes of buffer including the
    /// [`HEADROOM`] (use [`DEFAULT_DATA_ROOM`] for standard 1500-byte MTU
    /// frames, 0 for mbufs that only ever point at external buffers), and a
    /// per-lcore cache of `cache` mbufs (0 to 512, at most `n / 1.5`). The
    /// best `n` is a power of two minus one. Memory comes from the EAL's
    /// `-m` budget on the calling thread's NUMA socket.
    ///
    /// # Errors
    /// [`DpdkError::NotInitialized`]; [`DpdkError::PoolTooSmall`] for a
    /// cache too large for `n`; [`DpdkError::InvalidArgument`] for a bad
    /// name; [`DpdkError::Call`] from `rte_pktmbuf_pool_create` (`ENOMEM`:
    /// not enough EAL memory, raise `-m`; `EEXIST`: the name is taken).
    pub fn new(name: &str, n: u32, cache: u32, data_room: u16) -> Result<Mempool, DpdkError> {
        ensure_init()?;
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(DpdkError::InvalidArgument {
                value: name.to_string(),
                reason: "mempool names are 1 to 25 bytes",
            });
        }
        let cname = CString::new(name).map_err(|_| DpdkError::InvalidArgument {
            value: name.to_string(),
            reason: "mempool name contains a NUL byte",
        })?;
        if cache > dpdk_sys::RTE_MEMPOOL_CACHE_MAX_SIZE || u64::from(cache) * 3 > u64::from(n) * 2 {
            return Err(DpdkError::PoolTooSmall {
                pool: name.to_string(),
                what: "a per-lcore cache (at most n/1.5 and 512 mbufs)",
                needed: (u64::from(cache) * 3).div_ceil(2),
                have: u64::from(n),
            });
        }
        let _g = control_lock();
        // SAFETY: EAL up; `cname` is a valid C string DPDK copies; the sizes
        // were checked above; socket id of the calling thread.
        let p = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                n,
                cache,
                0,
                data_room,
                dpdk_sys::shim_rte_socket_id() as i32,
            )
        };
        let Some(ptr) = NonNull::new(p) else {
            let errno = rte_errno();
            return Err(DpdkError::Call {
                call: "rte_pktmbuf_pool_create",
                errno,
                text: format!(
                    "{} (pool {name:?}: {n} mbufs of {data_room} bytes, about {} MiB)",
                    errno_text(errno),
                    (u64::from(n) * (u64::from(data_room) + 192)) >> 20
                ),
            });
        };
        Ok(Mempool {
            inner: Arc::new(PoolInner {
                ptr,
                name: name.to_string(),
                size: n,
                data_room,
            }),
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Number of mbufs in the pool.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// Data room of each mbuf, bytes, including the [`HEADROOM`].
    pub fn data_room(&self) -> u16 {
        self.inner.data_room
    }

    /// Largest frame one mbuf of this pool holds, bytes (data room less
    /// headroom).
    pub fn frame_room(&self) -> usize {
        usize::from(self.inner.data_room).saturating_sub(HEADROOM)
    }

    /// Mbufs free right now, caches included (`rte_mempool_avail_count`).
    pub fn avail(&self) -> u32 {
        // SAFETY: live pool; a thread-safe query.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.inner.ptr.as_ptr()) }
    }

    /// Mbufs allocated right now (`rte_mempool_in_use_count`).
    pub fn in_use(&self) -> u32 {
        // SAFETY: live pool; a thread-safe query.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.inner.ptr.as_ptr()) }
    }

    /// One mbuf (`rte_pktmbuf_alloc`), reset, empty, with the standard
    /// headroom; `None` when the pool is empty.
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: live pool; rte_pktmbuf_alloc is MT-safe and returns NULL
        // or an mbuf the caller owns exclusively (refcnt 1).
        unsafe { Mbuf::from_raw(dpdk_sys::shim_rte_pktmbuf_alloc(self.inner.ptr.as_ptr())) }
    }

    /// Append `n` fresh mbufs to `out` (`rte_pktmbuf_alloc_bulk`): all or
    /// nothing. Returns `false` (and leaves `out` unchanged) when the pool
    /// has fewer than `n` free.
    pub fn alloc_bulk(&self, out: &mut Vec<Mbuf>, n: usize) -> bool {
        let Ok(count) = u32::try_from(n) else {
            return false;
        };
        if n == 0 {
            return true;
        }
        out.reserve(n);
        let len = out.len();
        // SAFETY: `out` has room for `n` more elements; Mbuf is
        // repr(transparent) over a non-null `*mut rte_mbuf`, so the spare
        // capacity is a valid `*mut *mut rte_mbuf` array of `n` slots.
        let ret = unsafe {
            dpdk_sys::shim_rte_pktmbuf_alloc_bulk(
                self.inner.ptr.as_ptr(),
                out.as_mut_ptr().add(len).cast(),
                count,
            )
        };
        if ret != 0 {
            return false;
        }
        // SAFETY: on success DPDK wrote `n` non-null, exclusively owned mbuf
        // pointers into those slots, which are now valid Mbufs.
        unsafe { out.set_len(len + n) };
        true
    }

    /// The raw pool, for DPDK calls in this crate.
    pub(crate) fn as_ptr(&self) -> *mut rte_mempool {
        self.inner.ptr.as_ptr()
    }
}
