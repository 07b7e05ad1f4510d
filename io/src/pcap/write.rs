//! Writing captures: [`FrameWriter`] (classic pcap, link type Ethernet) and
//! [`PcapTap`], the recorder that several threads share (`roce perf
//! --pcap`, behind a [`crate::adapt::TeeIo`]).
//!
//! The format is tcpdump's (<https://www.tcpdump.org/manpages/pcap-savefile.5.html>):
//! a 24-byte global header (version 2.4, little-endian, snap length
//! 65535, link type 1), then a 16-byte record header before each frame. The
//! timestamps are nanoseconds (magic `a1b23c4d`) unless asked otherwise
//! ([`Resolution::Micro`], magic `a1b2c3d4`, what the fixture files use).
//! The records are written by `pcap-file`'s `PcapWriter`; this is the
//! project's one capture writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use super::{PcapIoError, MAX_FRAME_LEN};
use crate::adapt::FrameTap;

/// The timestamp unit of a written capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Resolution {
    /// Microseconds (magic `a1b2c3d4`; timestamps are truncated).
    Micro,
    /// Nanoseconds (magic `a1b23c4d`).
    #[default]
    Nano,
}

/// The header of every pcap this module writes.
fn header(resolution: Resolution) -> PcapHeader {
    PcapHeader {
        version_major: 2,
        version_minor: 4,
        ts_correction: 0,
        ts_accuracy: 0,
        snaplen: MAX_FRAME_LEN as u32,
        datalink: DataLink::ETHERNET,
        ts_resolution: match resolution {
            Resolution::Micro => TsResolution::MicroSecond,
            Resolution::Nano => TsResolution::NanoSecond,
        },
        endianness: Endianness::Little,
    }
}

/// A pcap writer for frames (Ethernet) into `W`: a file
/// ([`FrameWriter::create`]) or any writer, such as a `Vec<u8>`
/// ([`FrameWriter::into_inner`] gives it back).
pub struct FrameWriter<W: Write = Box<dyn Write + Send>> {
    w: PcapWriter<W>,
    frames: u64,
}

impl<W: Write> std::fmt::Debug for FrameWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWriter")
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl FrameWriter {
    /// Create `path` (buffered), nanosecond timestamps.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: &Path) -> Result<FrameWriter, PcapIoError> {
        let f = File::create(path).map_err(|e| PcapIoError::Io(path.display().to_string(), e))?;
        FrameWriter::new(Box::new(BufWriter::with_capacity(1 << 20, f)))
    }
}

impl<W: Write> FrameWriter<W> {
    /// Write the pcap header (nanosecond timestamps) to `out`.
    ///
    /// # Errors
    /// Writing the header failed.
    pub fn new(out: W) -> Result<FrameWriter<W>, PcapIoError> {
        FrameWriter::with_resolution(out, Resolution::Nano)
    }

    /// Write the pcap header, timestamps in `resolution`, to `out`.
    ///
    /// # Errors
    /// Writing the header failed.
    pub fn with_resolution(out: W, resolution: Resolution) -> Result<FrameWriter<W>, PcapIoError> {
        let w = PcapWriter::with_header(out, header(resolution))
            .map_err(|e| PcapIoError::Format(format!("writing the pcap header: {e}")))?;
        Ok(FrameWriter { w, frames: 0 })
    }

    /// Append one frame stamped `time` (since the Unix epoch).
    ///
    /// # Errors
    /// The write failed.
    pub fn write(&mut self, time: Duration, frame: &[u8]) -> Result<(), PcapIoError> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        self.write_record(time, frame, len)
    }

    /// Append a record of `data` whose frame was `orig_len` bytes on the
    /// wire (more than `data` for a frame the snap length cut).
    ///
    /// # Errors
    /// The write failed.
    pub fn write_record(
        &mut self,
        time: Duration,
        data: &[u8],
        orig_len: u32,
    ) -> Result<(), PcapIoError> {
        self.w
            .write_packet(&PcapPacket::new(time, orig_len, data))
            .map_err(|e| PcapIoError::Format(format!("writing frame {}: {e}", self.frames + 1)))?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The writer, with everything written (not flushed).
    pub fn into_inner(self) -> W {
        self.w.into_writer()
    }

    /// Flush and close.
    ///
    /// # Errors
    /// The flush failed.
    pub fn finish(self) -> Result<u64, PcapIoError> {
        let frames = self.frames;
        let mut w = self.w.into_writer();
        w.flush()
            .map_err(|e| PcapIoError::Io("flushing the capture".into(), e))?;
        Ok(frames)
    }
}

/// A capture in memory of `frames` (time, bytes), timestamps in
/// `resolution`.
pub fn to_vec<'a>(
    frames: impl IntoIterator<Item = (Duration, &'a [u8])>,
    resolution: Resolution,
) -> Vec<u8> {
    let mut w = match FrameWriter::with_resolution(Vec::new(), resolution) {
        Ok(w) => w,
        Err(_) => return Vec::new(),
    };
    for (t, f) in frames {
        // Writing to a Vec cannot fail.
        let _ = w.write(t, f);
    }
    w.into_inner()
}

/// Records frames from several threads into one pcap file, stamped with the
/// wall-clock time at `start` plus the time elapsed since (under one lock,
/// so timestamps only grow through the file). Write errors are kept and
/// reported by [`PcapTap::finish`].
pub struct PcapTap {
    inner: Mutex<TapInner>,
    start: std::time::Instant,
    epoch: Duration,
}

struct TapInner {
    writer: Option<FrameWriter>,
    error: Option<String>,
}

impl std::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapTap").finish_non_exhaustive()
    }
}

impl PcapTap {
    /// Create `path`; `start` is time zero of the run.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn create(path: &Path, start: std::time::Instant) -> Result<PcapTap, PcapIoError> {
        let writer = FrameWriter::create(path)?;
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(start.elapsed());
        Ok(PcapTap {
            inner: Mutex::new(TapInner {
                writer: Some(writer),
                error: None,
            }),
            start,
            epoch,
        })
    }

    /// Flush the file; the number of frames written, or the first error.
    ///
    /// # Errors
    /// The first write error, or the flush's.
    pub fn finish(&self) -> Result<u64, String> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| "a thread panicked while writing".to_string())?;
        if let Some(e) = g.error.take() {
            return Err(e);
        }
        match g.writer.take() {
            Some(w) => w.finish().map_err(|e| e.to_string()),
            None => Ok(0),
        }
    }
}

impl FrameTap for PcapTap {
    fn record(&self, frame: &[u8]) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        let ts = self.epoch + self.start.elapsed();
        let Some(w) = g.writer.as_mut() else {
            return;
        };
        if let Err(e) = w.write(ts, frame) {
            g.error = Some(e.to_string());
            g.writer = None;
        }
    }
}
