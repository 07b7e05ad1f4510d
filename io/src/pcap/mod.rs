//! Capture files: the project's one reader ([`read`]: pcap and pcapng,
//! streamed and bounded) and writer ([`mod@write`]: classic pcap), and the
//! `pcap` backend ([`PcapIo`]), a [`FrameIo`] whose receive side replays
//! the frames of a capture, in file order, and whose transmit side writes
//! every frame sent to an output capture.
//!
//! The backend's output is a classic pcap file ([`FrameWriter`], nanosecond
//! timestamps). Each transmitted frame is stamped with the time the driver
//! last set with [`PcapIo::set_time`] (normally its virtual clock: the
//! capture time of the frame being answered), so a replay's output lines up
//! with its input in Wireshark.
//!
//! Its input is read by [`read_timed`] (pcap or pcapng; Ethernet only),
//! streamed record by record with the magic number checked first and each
//! record bounded ([`read::CaptureReader`]); the frames themselves are kept
//! (a replay looks at all of them), at most [`MAX_CAPTURE_BYTES`]. A driver
//! that paces the replay sets a clock with [`PcapIo::set_clock`]:
//! `rx_burst` then only delivers frames captured at or before it, and
//! [`PcapIo::next_time`] tells when the next one is due.
//!
//! [`PcapTap`] is the recorder of `roce perf --pcap` (behind a
//! [`crate::adapt::TeeIo`] on any backend): it writes frames from several
//! threads, stamped with the wall clock.

use std::io;
use std::path::Path;
use std::time::Duration;

use roce_stack::backend::FrameIo;

mod parse;
pub mod read;
pub mod write;

pub use read::TimedFrame;
pub use write::{FrameWriter, PcapTap, Resolution};

/// Largest frame the pcap backend transmits or delivers, bytes (the output
/// file's snap length).
pub const MAX_FRAME_LEN: usize = 65535;

/// Why a capture could not be read or written.
#[derive(Debug)]
pub enum PcapIoError {
    /// Opening, reading or writing a file.
    Io(String, io::Error),
    /// The capture is damaged or not Ethernet.
    Format(String),
}

impl std::fmt::Display for PcapIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcapIoError::Io(what, e) => write!(f, "{what}: {e}"),
            PcapIoError::Format(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PcapIoError {}

/// Most frame bytes [`read_timed`] holds in memory for a replay (the frames
/// of a capture are kept whole: the QP to play is inferred from all of
/// them).
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

/// Every frame of the capture at `path` (pcap or pcapng; a regular file or
/// a pipe, see [`read::open_capture`]) with its capture time, in file
/// order, read record by record: no record may hold more than
/// [`read::MAX_RECORD_LEN`] bytes (Wireshark's limit), and the frames kept
/// at most [`MAX_CAPTURE_BYTES`].
///
/// # Errors
/// The file cannot be opened or is not one, or is damaged or not Ethernet
/// ([`PcapIoError::Format`], the message naming the file).
pub fn read_timed(path: &Path) -> Result<Vec<TimedFrame>, PcapIoError> {
    let bad = |m: String| PcapIoError::Format(format!("{}: {m}", path.display()));
    let mut r = read::open_capture(path).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    let mut held = 0u64;
    while let Some(f) = r.next_frame() {
        let f = f.map_err(|e| bad(e.to_string()))?;
        held += f.data.len() as u64;
        if held > MAX_CAPTURE_BYTES {
            return Err(bad(format!(
                "the capture holds more than {} MiB of frames (at frame {}); cut it first \
                 (editcap -r)",
                MAX_CAPTURE_BYTES >> 20,
                f.number
            )));
        }
        out.push(TimedFrame {
            time: f.time,
            data: f.data.to_vec(),
        });
    }
    Ok(out)
}

/// The pcap backend.
pub struct PcapIo {
    input: Vec<TimedFrame>,
    next: usize,
    clock: Option<Duration>,
    out: Option<FrameWriter>,
    tx_time: Duration,
    buf: Vec<u8>,
    keep: bool,
    sent: Vec<TimedFrame>,
}

impl std::fmt::Debug for PcapIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapIo")
            .field("frames", &self.input.len())
            .field("next", &self.next)
            .field("clock", &self.clock)
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl PcapIo {
    /// Replay `input` (in order); write what is sent to `out` (or discard
    /// it).
    pub fn new(input: Vec<TimedFrame>, out: Option<FrameWriter>) -> PcapIo {
        PcapIo {
            input,
            next: 0,
            clock: None,
            out,
            tx_time: Duration::ZERO,
            buf: vec![0u8; MAX_FRAME_LEN],
            keep: false,
            sent: Vec::new(),
        }
    }

    /// Also keep a copy of every transmitted frame in memory (see
    /// [`PcapIo::take_sent`]).
    pub fn keep_sent(&mut self, on: bool) {
        self.keep = on;
    }

    /// The frames transmitted since the last call (only with
    /// [`PcapIo::keep_sent`]), with the time they were stamped with.
    pub fn take_sent(&mut self) -> Vec<TimedFrame> {
        std::mem::take(&mut self.sent)
    }

    /// Replay the capture at `input`; write to a new capture at `output`.
    ///
    /// # Errors
    /// Reading `input` or creating `output` failed.
    pub fn open(input: &Path, output: Option<&Path>) -> Result<PcapIo, PcapIoError> {
        let frames = read_timed(input)?;
        let out = output.map(FrameWriter::create).transpose()?;
        Ok(PcapIo::new(frames, out))
    }

    /// Deliver only frames captured at or before `t` (`None`: every frame,
    /// as fast as `rx_burst` is called).
    pub fn set_clock(&mut self, t: Option<Duration>) {
        self.clock = t;
    }

    /// The capture time of the next frame to deliver, `None` at the end.
    pub fn next_time(&self) -> Option<Duration> {
        self.input.get(self.next).map(|f| f.time)
    }

    /// Frames not yet delivered.
    pub fn remaining(&self) -> usize {
        self.input.len() - self.next
    }

    /// The timestamp of frames transmitted from now on.
    pub fn set_time(&mut self, t: Duration) {
        self.tx_time = t;
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.out.as_ref().map_or(0, FrameWriter::frames)
    }

    /// Flush the output; the number of frames written.
    ///
    /// # Errors
    /// The flush failed.
    pub fn finish(self) -> Result<u64, PcapIoError> {
        match self.out {
            Some(w) => w.finish(),
            None => Ok(0),
        }
    }
}

impl FrameIo for PcapIo {
    type Error = PcapIoError;

    fn max_frame_len(&self) -> usize {
        MAX_FRAME_LEN
    }

    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, PcapIoError> {
        let mut n = 0;
        while n < max {
            let Some(f) = self.input.get(self.next) else {
                break;
            };
            if self.clock.is_some_and(|c| f.time > c) {
                break;
            }
            on_frame(&f.data);
            self.next += 1;
            n += 1;
        }
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, PcapIoError> {
        let mut n = 0;
        while n < max {
            let Some(len) = fill(&mut self.buf) else {
                break;
            };
            let len = len.min(self.buf.len());
            if let Some(w) = self.out.as_mut() {
                w.write(self.tx_time, &self.buf[..len])?;
            }
            if self.keep {
                self.sent.push(TimedFrame {
                    time: self.tx_time,
                    data: self.buf[..len].to_vec(),
                });
            }
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex as StdMutex};

    /// A `Write` into shared memory.
    #[derive(Clone, Default)]
    struct Shared(Arc<StdMutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn replays_in_order_and_records_with_the_time_set() {
        let input: Vec<TimedFrame> = (0..5u8)
            .map(|i| TimedFrame {
                time: Duration::from_micros(10 * u64::from(i)),
                data: vec![i; 60],
            })
            .collect();
        let sink = Shared::default();
        let out = FrameWriter::new(Box::new(sink.clone()) as Box<dyn Write + Send>).unwrap();
        let mut io = PcapIo::new(input, Some(out));
        io.set_clock(Some(Duration::from_micros(15)));
        let mut got = Vec::new();
        assert_eq!(io.rx_burst(10, &mut |f| got.push(f[0])).unwrap(), 2);
        assert_eq!(io.next_time(), Some(Duration::from_micros(20)));
        io.set_clock(None);
        io.rx_burst(10, &mut |f| got.push(f[0])).unwrap();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        io.set_time(Duration::new(7, 123_456_789));
        let mut k = 0;
        let n = io
            .tx_burst(8, &mut |b| {
                k += 1;
                (k <= 2).then(|| {
                    b[..61].fill(k as u8);
                    61
                })
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(io.finish().unwrap(), 2);
        let bytes = sink.0.lock().unwrap().clone();
        // Magic a1b23c4d (nanoseconds), little-endian, link type 1.
        assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        let back = read::read_all(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].time, Duration::new(7, 123_456_789));
        assert_eq!(back[1].data, vec![2u8; 61]);
    }
}
