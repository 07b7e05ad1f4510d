//! Frames in flight: fixed-size buffers recycled through a pool, so moving
//! a frame through the fabric allocates nothing and copies nothing (the
//! device builds it straight into a pooled buffer).

/// A frame: a pooled buffer and the length of the frame in it.
#[derive(Debug)]
pub struct Frame {
    buf: Box<[u8]>,
    len: u32,
}

impl Frame {
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

/// Free buffers of one size.
#[derive(Debug)]
pub(crate) struct FramePool {
    free: Vec<Box<[u8]>>,
    size: usize,
    allocated: usize,
}

impl FramePool {
    /// Buffers of `size` bytes.
    pub(crate) fn new(size: usize) -> FramePool {
        FramePool {
            free: Vec::new(),
            size,
            allocated: 0,
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

    /// `buf` holding a frame of `len` bytes.
    #[inline]
    pub(crate) fn frame(buf: Box<[u8]>, len: usize) -> Frame {
        debug_assert!(len <= buf.len());
        Frame {
            len: len.min(buf.len()) as u32,
            buf,
        }
    }

    /// A frame holding a copy of `bytes` (truncated to the buffer size).
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Frame {
        let mut b = self.take();
        let n = bytes.len().min(b.len());
        b[..n].copy_from_slice(&bytes[..n]);
        FramePool::frame(b, n)
    }

    /// Give a buffer back.
    #[inline]
    pub(crate) fn put_buf(&mut self, buf: Box<[u8]>) {
        if buf.len() == self.size {
            self.free.push(buf);
        }
    }

    /// Give a frame's buffer back.
    #[inline]
    pub(crate) fn put(&mut self, f: Frame) {
        self.put_buf(f.buf);
    }

    /// Buffers allocated so far.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }

    /// Size of each buffer, bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }
}
