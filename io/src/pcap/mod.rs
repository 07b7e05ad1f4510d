//! `pcap`: a [`FrameIo`] whose receive side replays the frames of a capture,
//! in file order, and whose transmit side writes every frame sent to an
//! output capture.
//!
//! The output is a classic pcap file (tcpdump format,
//! <https://www.tcpdump.org/manpages/pcap-savefile.5.html>): magic
//! `a1b23c4d` (nanosecond timestamps), little-endian, link type 1 (Ethernet, without FCS),
//! snap length 65535. Each transmitted frame is stamped with the time the
//! driver last set with [`PcapIo::set_time`] (normally its virtual clock:
//! the capture time of the frame being answered), so a replay's output lines
//! up with its input in Wireshark.
//!
//! The input is read by [`read_timed`] (pcap or pcapng; Ethernet only),
//! streamed record by record with the magic number checked first and each
//! record bounded; the frames themselves are kept (a replay looks at all
//! of them), at most [`MAX_CAPTURE_BYTES`]. A driver that paces the replay sets a clock with
//! [`PcapIo::set_clock`]: `rx_burst` then only delivers frames captured at
//! or before it, and [`PcapIo::next_time`] tells when the next one is due.
//!
//! [`PcapTap`] is the recorder of `roce perf --pcap` (behind a
//! [`crate::adapt::TeeIo`] on any backend): it writes frames from several
//! threads, stamped with the wall clock.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};
use roce_stack::backend::FrameIo;

use crate::adapt::FrameTap;

pub mod read;

/// Largest frame the pcap backend transmits or delivers, bytes (the output
/// file's snap length).
pub const MAX_FRAME_LEN: usize = 65535;

/// A frame of a capture with its capture time (since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedFrame {
    /// Capture time.
    pub time: Duration,
    /// The frame (Ethernet, as captured).
    pub data: Vec<u8>,
}

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

fn is_pcapng(data: &[u8]) -> bool {
    // (The Section Header Block's type, which is also the magic number.)
    data.get(..4) == Some(&[0x0A, 0x0D, 0x0D, 0x0A])
}

/// Seconds per timestamp unit of a pcapng interface (`if_tsresol`, pcapng
/// §4.2: bit 7 clear = 10^-n s, set = 2^-n s; default 10^-6), as a function
/// turning a raw count into nanoseconds.
fn ng_units_to_ns(tsresol: u8, raw: u128) -> u128 {
    let n = u32::from(tsresol & 0x7F);
    if tsresol & 0x80 == 0 {
        if n <= 9 {
            raw * 10u128.pow(9 - n)
        } else {
            raw / 10u128.pow((n - 9).min(38))
        }
    } else {
        // 2^-n seconds per unit.
        (raw * 1_000_000_000) >> n.min(127)
    }
}

/// An interface's `if_tsresol` (default 6: microseconds).
fn tsresol_of(options: &[InterfaceDescriptionOption<'_>]) -> u8 {
    options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
            _ => None,
        })
        .unwrap_or(6)
}

/// Most frame bytes [`read_timed`] holds in memory for a replay (the frames
/// of a capture are kept whole: the QP to play is inferred from all of
/// them).
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

/// Every frame of a pcap or pcapng capture held in memory, with its capture
/// time, in file order.
///
/// # Errors
/// [`PcapIoError::Format`] for a damaged file or a link type other than
/// Ethernet.
pub fn parse_timed(data: &[u8]) -> Result<Vec<TimedFrame>, PcapIoError> {
    parse_timed_from(data)
}

/// [`parse_timed`] of a stream (a file or a pipe), read record by record
/// through `pcap-file`'s readers: the magic number is checked from the
/// first 4 bytes before anything else is read, no record may hold more than
/// [`read::MAX_RECORD_LEN`] bytes (Wireshark's limit), and the
/// frames kept at most [`MAX_CAPTURE_BYTES`].
///
/// # Errors
/// As [`parse_timed`], and a read error.
pub fn parse_timed_from<R: io::Read>(mut src: R) -> Result<Vec<TimedFrame>, PcapIoError> {
    let bad = |m: String| PcapIoError::Format(m);
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match src.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PcapIoError::Io("reading the capture".into(), e)),
        }
    }
    let head = &magic[..got];
    if head.is_empty() {
        return Err(bad("empty file: not a pcap or pcapng capture".into()));
    }
    let known = matches!(
        u32::from_be_bytes(magic),
        0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 | 0x0A0D_0D0A
    );
    if got < 4 || !known {
        return Err(bad(format!(
            "not a pcap or pcapng file (magic number 0x{:08x})",
            u32::from_be_bytes(magic)
        )));
    }
    let data = io::Read::chain(io::Cursor::new(magic), src);
    let mut out = Vec::new();
    let mut held = 0u64;
    let mut keep = |out: &mut Vec<TimedFrame>, time: Duration, bytes: Cow<'_, [u8]>| {
        let n = out.len() + 1;
        if bytes.len() > read::MAX_RECORD_LEN as usize {
            return Err(bad(format!(
                "frame {n} holds {} bytes, more than the {} a record may hold",
                bytes.len(),
                read::MAX_RECORD_LEN
            )));
        }
        held += bytes.len() as u64;
        if held > MAX_CAPTURE_BYTES {
            return Err(bad(format!(
                "the capture holds more than {} MiB of frames (at frame {n}); cut it first \
                 (editcap -r)",
                MAX_CAPTURE_BYTES >> 20
            )));
        }
        out.push(TimedFrame {
            time,
            data: bytes.into_owned(),
        });
        Ok(())
    };
    if is_pcapng(&magic) {
        let mut r = PcapNgReader::new(data).map_err(|e| bad(format!("pcapng: {e}")))?;
        // (link type, if_tsresol) of each interface of the current section.
        let mut ifaces: Vec<(DataLink, u8)> = r
            .interfaces()
            .iter()
            .map(|i| (i.linktype, tsresol_of(&i.options)))
            .collect();
        while let Some(b) = r.next_block() {
            let b = b.map_err(|e| bad(format!("pcapng block {}: {e}", out.len() + 1)))?;
            let (iface, ts, bytes): (u32, Option<u128>, Cow<'_, [u8]>) = match b {
                Block::SectionHeader(_) => {
                    ifaces.clear();
                    continue;
                }
                Block::InterfaceDescription(i) => {
                    ifaces.push((i.linktype, tsresol_of(&i.options)));
                    continue;
                }
                Block::EnhancedPacket(p) => (p.interface_id, Some(p.timestamp.as_nanos()), p.data),
                Block::SimplePacket(p) => (0, None, p.data),
                Block::Packet(p) => (
                    u32::from(p.interface_id),
                    Some(u128::from(p.timestamp)),
                    p.data,
                ),
                _ => continue,
            };
            let &(linktype, tsresol) = ifaces.get(iface as usize).ok_or_else(|| {
                bad(format!(
                    "frame {}: interface {iface} is not described",
                    out.len() + 1
                ))
            })?;
            if linktype != DataLink::ETHERNET {
                return Err(bad(format!(
                    "frame {}: link type {linktype:?}, only Ethernet is supported",
                    out.len() + 1,
                )));
            }
            // pcap-file hands over the raw 64-bit count as nanoseconds.
            let ns = ts.map_or(0, |raw| ng_units_to_ns(tsresol, raw));
            let time = Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64);
            keep(&mut out, time, bytes)?;
        }
    } else {
        let mut r = PcapReader::new(data).map_err(|e| bad(format!("pcap: {e}")))?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(bad(format!(
                "link type {:?}, only Ethernet is supported",
                r.header().datalink
            )));
        }
        while let Some(p) = r.next_packet() {
            let p = p.map_err(|e| bad(format!("pcap record {}: {e}", out.len() + 1)))?;
            keep(&mut out, p.timestamp, p.data)?;
        }
    }
    Ok(out)
}

/// [`parse_timed_from`] of the file at `path`: a regular file or a pipe;
/// a device (`/dev/zero`), a directory or a socket is refused before a byte
/// is read.
///
/// # Errors
/// The file cannot be opened or is not one, or [`parse_timed_from`]'s
/// errors.
pub fn read_timed(path: &Path) -> Result<Vec<TimedFrame>, PcapIoError> {
    let io_err = |e| PcapIoError::Io(path.display().to_string(), e);
    let f = File::open(path).map_err(io_err)?;
    let meta = f.metadata().map_err(io_err)?;
    if let Some(kind) = read::unreadable_kind(&meta) {
        return Err(PcapIoError::Format(format!(
            "{}: is {kind}, not a capture file (give a pcap or pcapng file, or a pipe)",
            path.display()
        )));
    }
    parse_timed_from(f).map_err(|e| match e {
        PcapIoError::Format(m) => PcapIoError::Format(format!("{}: {m}", path.display())),
        e => e,
    })
}

/// The header of every pcap this module writes.
fn out_header() -> PcapHeader {
    PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        snaplen: MAX_FRAME_LEN as u32,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    }
}

/// A pcap writer for frames (nanosecond timestamps, Ethernet).
pub struct FrameWriter {
    w: PcapWriter<Box<dyn Write + Send>>,
    frames: u64,
}

impl std::fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWriter")
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl FrameWriter {
    /// Write the pcap header to `out`.
    ///
    /// # Errors
    /// Writing the header failed.
    pub fn new(out: Box<dyn Write + Send>) -> Result<FrameWriter, PcapIoError> {
        let w = PcapWriter::with_header(out, out_header())
            .map_err(|e| PcapIoError::Format(format!("writing the pcap header: {e}")))?;
        Ok(FrameWriter { w, frames: 0 })
    }

    /// Create `path` (buffered).
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(path: &Path) -> Result<FrameWriter, PcapIoError> {
        let f = File::create(path).map_err(|e| PcapIoError::Io(path.display().to_string(), e))?;
        FrameWriter::new(Box::new(BufWriter::with_capacity(1 << 20, f)))
    }

    /// Append one frame stamped `time`.
    ///
    /// # Errors
    /// The write failed.
    pub fn write(&mut self, time: Duration, frame: &[u8]) -> Result<(), PcapIoError> {
        self.w
            .write_packet(&PcapPacket::new(time, frame.len() as u32, frame))
            .map_err(|e| PcapIoError::Format(format!("writing frame {}: {e}", self.frames + 1)))?;
        self.frames += 1;
        Ok(())
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flush and close.
    ///
    /// # Errors
    /// The flush failed.
    pub fn finish(self) -> Result<u64, PcapIoError> {
        let mut w = self.w.into_writer();
        w.flush()
            .map_err(|e| PcapIoError::Io("flushing the capture".into(), e))?;
        Ok(self.frames)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let out = FrameWriter::new(Box::new(sink.clone())).unwrap();
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
        let back = parse_timed(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].time, Duration::new(7, 123_456_789));
        assert_eq!(back[1].data, vec![2u8; 61]);
    }

    #[test]
    fn pcapng_resolution() {
        assert_eq!(ng_units_to_ns(6, 1_500_000), 1_500_000_000);
        assert_eq!(ng_units_to_ns(9, 42), 42);
        assert_eq!(ng_units_to_ns(0x80 | 10, 1024), 1_000_000_000);
    }
}
