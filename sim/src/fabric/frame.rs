//! Frames in flight: fixed-size buffers recycled through a pool, so moving
//! a frame through the fabric allocates nothing and copies nothing (the
//! device builds it straight into a pooled buffer).
//!
//! The header fields a switch reads (destination MAC, priority, MAC
//! control or not, the five-tuple's ECMP hash) are parsed once, when the
//! frame is built: nothing in the fabric rewrites them (ECN marking changes
//! only the ECN bits), so every switch decides exactly as if it parsed the
//! frame itself, without touching the frame's bytes.

use crate::net::{self, FrameInfo};

/// A frame: a pooled buffer, the length of the frame in it, and its parsed
/// switch-relevant header fields.
#[derive(Debug)]
pub struct Frame {
    buf: Box<[u8]>,
    len: u32,
    hash: u32,
    info: FrameInfo,
}

impl Frame {
    /// Destination MAC, priority, MAC control (see [`net::classify`]).
    #[inline]
    pub fn info(&self) -> &FrameInfo {
        &self.info
    }

    /// The ECMP hash of the frame's five-tuple ([`net::ecmp_hash`]).
    #[inline]
    pub fn ecmp_hash(&self) -> u32 {
        self.hash
    }

    /// The frame's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// The frame's bytes, writable (ECN marking).
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len as usize]
    }

    /// Frame length, bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Frame {
    fn new(buf: Box<[u8]>, len: usize) -> Frame {
        let bytes = &buf[..len];
        let info = net::classify(bytes);
        let hash = if info.mac_control {
            0
        } else {
            net::ecmp_hash(bytes)
        };
        Frame {
            len: len as u32,
            hash,
            info,
            buf,
        }
    }
}

/// Frames this short or shorter live in small buffers (ACKs, CNPs, PFC),
/// so a queue of control frames costs little more than its bytes.
pub const SMALL_FRAME: usize = 256;

/// Free buffers of two sizes: [`SMALL_FRAME`] and one large enough for any
/// frame of the fabric's MTU.
#[derive(Debug)]
pub(crate) struct FramePool {
    free: Vec<Box<[u8]>>,
    small: Vec<Box<[u8]>>,
    size: usize,
    allocated: usize,
    allocated_small: usize,
}

impl FramePool {
    /// Buffers of `size` bytes.
    pub(crate) fn new(size: usize) -> FramePool {
        FramePool {
            free: Vec::new(),
            small: Vec::new(),
            size: size.max(SMALL_FRAME + 1),
            allocated: 0,
            allocated_small: 0,
        }
    }

    /// A whole buffer to build a frame in.
    #[inline]
    pub(crate) fn take(&mut self) -> Box<[u8]> {
        match self.free.pop() {
            Some(b) => b,
            None => {
                self.allocated += 1;
                vec![0u8; self.size].into_boxed_slice()
            }
        }
    }

    /// The frame of `len` bytes built in `buf` (a buffer from
    /// [`FramePool::take`]); a short frame moves to a small buffer and `buf`
    /// goes back to the pool.
    #[inline]
    pub(crate) fn frame(&mut self, buf: Box<[u8]>, len: usize) -> Frame {
        let len = len.min(buf.len());
        if len <= SMALL_FRAME {
            let f = self.copy(&buf[..len]);
            self.put_buf(buf);
            return f;
        }
        Frame::new(buf, len)
    }

    /// A frame holding a copy of `bytes` (truncated to the large size).
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Frame {
        let mut b = if bytes.len() <= SMALL_FRAME {
            self.small.pop().unwrap_or_else(|| {
                self.allocated_small += 1;
                vec![0u8; SMALL_FRAME].into_boxed_slice()
            })
        } else {
            self.take()
        };
        let n = bytes.len().min(b.len());
        b[..n].copy_from_slice(&bytes[..n]);
        Frame::new(b, n)
    }

    /// Give a buffer back.
    #[inline]
    pub(crate) fn put_buf(&mut self, buf: Box<[u8]>) {
        if buf.len() == self.size {
            self.free.push(buf);
        } else if buf.len() == SMALL_FRAME {
            self.small.push(buf);
        }
    }

    /// Give a frame's buffer back.
    #[inline]
    pub(crate) fn put(&mut self, f: Frame) {
        self.put_buf(f.buf);
    }

    /// Large and small buffers allocated so far.
    pub(crate) fn allocated(&self) -> (usize, usize) {
        (self.allocated, self.allocated_small)
    }

    /// Size of each buffer, bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }
}
