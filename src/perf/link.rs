//! The in-memory Ethernet between the two threads: a fixed pool of frame
//! buffers per direction, circulated through two bounded channels (frames to
//! the peer, empty buffers back), a seeded loss injector and an optional pcap
//! tap.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use roce_stack::testing::Rng;

/// Buffers per direction. Enough to keep a 4096-byte-MTU stream going while
/// the peer is busy; a sender with none left waits for the peer to return some.
pub(crate) const POOL: usize = 512;

/// Frame buffers start this far past a 256-byte boundary (see the module
/// documentation of `perf`, "Memory alignment").
const FRAME_PHASE: usize = 128;

/// One reusable frame buffer.
#[derive(Debug)]
pub(crate) struct FrameBuf {
    data: Box<[u8]>,
    off: usize,
    cap: usize,
    len: usize,
}

impl FrameBuf {
    /// A buffer of `cap` bytes, `FRAME_PHASE` past a 256-byte boundary, or
    /// exactly `page_offset` (mod 4096) past a 4096-byte boundary.
    fn new(cap: usize, page_offset: Option<usize>) -> FrameBuf {
        let (data, off) = match page_offset {
            None => {
                let data = vec![0u8; cap + 256].into_boxed_slice();
                let addr = data.as_ptr() as usize;
                (data, (FRAME_PHASE + 256 - addr % 256) % 256)
            }
            Some(p) => {
                let data = vec![0u8; cap + 4096].into_boxed_slice();
                let addr = data.as_ptr() as usize;
                (data, (p % 4096 + 4096 - addr % 4096) % 4096)
            }
        };
        FrameBuf {
            data,
            off,
            cap,
            len: 0,
        }
    }
    /// The whole buffer, for `poll_transmit`.
    pub(crate) fn space(&mut self) -> &mut [u8] {
        &mut self.data[self.off..self.off + self.cap]
    }
    /// The frame held.
    pub(crate) fn frame(&self) -> &[u8] {
        &self.data[self.off..self.off + self.len]
    }
}

/// Where frames are recorded: a pcap file (nanosecond timestamps, link type
/// Ethernet), shared by both threads.
#[derive(Debug)]
pub(crate) struct Tap {
    inner: Mutex<TapInner>,
    start: std::time::Instant,
    epoch: Duration,
}

#[derive(Debug)]
struct TapInner {
    writer: Option<PcapWriter<BufWriter<File>>>,
    frames: u64,
    error: Option<String>,
}

impl Tap {
    /// Create `path`.
    pub(crate) fn create(path: &Path, start: std::time::Instant) -> Result<Tap, String> {
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            snaplen: 65535,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(Tap {
            inner: Mutex::new(TapInner {
                writer: Some(writer),
                frames: 0,
                error: None,
            }),
            start,
            epoch,
        })
    }

    /// Record one frame, timestamped now (under the lock, so timestamps only
    /// grow through the file).
    fn record(&self, frame: &[u8]) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        let ts = self.epoch + self.start.elapsed();
        let Some(w) = g.writer.as_mut() else {
            return;
        };
        let r = w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame));
        match r {
            Ok(_) => g.frames += 1,
            Err(e) => {
                g.error = Some(e.to_string());
                g.writer = None;
            }
        }
    }

    /// Flush the file; the number of frames written, or the first error.
    pub(crate) fn finish(&self) -> Result<u64, String> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| "a thread panicked while writing".to_string())?;
        if let Some(e) = g.error.take() {
            return Err(e);
        }
        if let Some(w) = g.writer.take() {
            let mut bw = w.into_writer();
            std::io::Write::flush(&mut bw).map_err(|e| e.to_string())?;
        }
        Ok(g.frames)
    }
}

/// One side's end of the wire.
#[derive(Debug)]
pub(crate) struct Port {
    /// Frames from the peer.
    rx: Receiver<FrameBuf>,
    /// The peer's buffers, returned once handled.
    rx_return: SyncSender<FrameBuf>,
    /// Frames to the peer.
    tx: SyncSender<FrameBuf>,
    /// Our buffers coming back from the peer.
    tx_free: Receiver<FrameBuf>,
    /// Our free buffers at hand.
    spare: Vec<FrameBuf>,
    loss: f64,
    rng: Rng,
    tap: Option<Arc<Tap>>,
    /// Frames handed to the wire.
    pub(crate) sent: u64,
    /// Frames the wire dropped.
    pub(crate) dropped: u64,
}

/// Two connected ports; each side's buffers hold `frame_cap` bytes and are
/// placed as [`FrameBuf::new`] says for `page_offset`.
pub(crate) fn wire(
    frame_cap: usize,
    loss: f64,
    seed: u64,
    tap: Option<Arc<Tap>>,
    page_offset: Option<usize>,
) -> (Port, Port) {
    let (tx_ab, rx_ab) = sync_channel(POOL);
    let (ret_ab, free_ab) = sync_channel(POOL);
    let (tx_ba, rx_ba) = sync_channel(POOL);
    let (ret_ba, free_ba) = sync_channel(POOL);
    let pool = || {
        (0..POOL)
            .map(|_| FrameBuf::new(frame_cap, page_offset))
            .collect::<Vec<_>>()
    };
    // Independent loss decisions per direction, both from the seed.
    let mut seeder = Rng::new(seed);
    let a = Port {
        rx: rx_ba,
        rx_return: ret_ba,
        tx: tx_ab,
        tx_free: free_ab,
        spare: pool(),
        loss,
        rng: Rng::new(seeder.next_u64()),
        tap: tap.clone(),
        sent: 0,
        dropped: 0,
    };
    let b = Port {
        rx: rx_ab,
        rx_return: ret_ab,
        tx: tx_ba,
        tx_free: free_ba,
        spare: pool(),
        loss,
        rng: Rng::new(seeder.next_u64()),
        tap,
        sent: 0,
        dropped: 0,
    };
    (a, b)
}

impl Port {
    /// The next frame from the peer, if one is waiting. Give it back with
    /// [`Port::release`].
    pub(crate) fn recv(&mut self) -> Option<FrameBuf> {
        self.rx.try_recv().ok()
    }

    /// Return a received buffer to the peer.
    pub(crate) fn release(&mut self, b: FrameBuf) {
        // The peer may have exited (end of run); the buffer is then dropped.
        let _ = self.rx_return.send(b);
    }

    /// A free buffer to transmit into, if any: the most recently returned one
    /// (the spare list is a stack), so the buffers in use stay few and warm in
    /// the cache.
    pub(crate) fn take(&mut self) -> Option<FrameBuf> {
        while let Ok(b) = self.tx_free.try_recv() {
            self.spare.push(b);
        }
        self.spare.pop()
    }

    /// Keep an unused buffer.
    pub(crate) fn keep(&mut self, b: FrameBuf) {
        self.spare.push(b);
    }

    /// Put `len` bytes of `b` on the wire: dropped with the loss probability,
    /// else recorded by the tap and queued for the peer.
    pub(crate) fn send(&mut self, mut b: FrameBuf, len: usize) {
        self.sent += 1;
        b.len = len.min(b.cap);
        if self.rng.chance(self.loss) {
            self.dropped += 1;
            self.spare.push(b);
            return;
        }
        if let Some(t) = &self.tap {
            t.record(b.frame());
        }
        if let Err(e) = self.tx.send(b) {
            // The peer has exited: the frame is lost, like on a dead link.
            self.spare.push(e.0);
        }
    }
}
