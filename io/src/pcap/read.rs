//! Reading capture files, held in memory ([`Frames`]) or streamed from a file
//! or pipe ([`CaptureReader`]): classic pcap and pcapng, told apart by their
//! magic number, through the `pcap-file` crate. A stream is never read
//! whole: its magic number is checked from its first 4 bytes, and each
//! record's claimed length against [`MAX_RECORD_LEN`] (pcapng blocks:
//! [`MAX_BLOCK_LEN`]) before its bytes are read, so memory stays at one
//! record plus a 64 KiB read buffer whatever the input.
//!
//! - pcap (tcpdump format, <https://www.tcpdump.org/manpages/pcap-savefile.5.html>):
//!   magic `a1b2c3d4` (microseconds) or `a1b23c4d` (nanoseconds), either byte
//!   order; a 24-byte global header, then 16-byte record headers each followed by
//!   `incl_len` captured bytes.
//! - pcapng (IETF draft-ietf-opsawg-pcapng): a Section Header Block (block type
//!   `0a0d0d0a`), Interface Description Blocks giving each interface's link type,
//!   then Enhanced (type 6), Simple (type 3) or obsolete Packet (type 2) blocks.
//!
//! Only link type 1 (`LINKTYPE_ETHERNET`, Ethernet II without FCS) is accepted.
//!
//! Each frame comes with its capture time ([`CapturedFrame::time`]: pcap's
//! seconds and micro- or nanoseconds; pcapng's 64-bit count in its
//! interface's `if_tsresol` units).
//!
//! The global header, the record headers and the pcapng block framing (including
//! Section Header and Interface Description Blocks) are parsed by `pcap-file`; the
//! bodies of the three packet blocks are read here with bounds-checked code, so
//! that no per-packet option list is allocated and block types this tool does not
//! need (name resolution, statistics) are never parsed. Nothing here panics on
//! any input: every inconsistency is a [`CaptureError`].
//!
//! This is the project's one capture reader: `roce decode`, `roce replay`
//! (through [`super::read_timed`]), the fixtures crate and the tests read
//! captures with it; [`read_all`] is the short form for a capture in memory.

use core::fmt;
use std::io;
use std::time::Duration;

use pcap_file::DataLink;

use super::parse::{header_len, Core, Step};

/// `LINKTYPE_ETHERNET` (tcpdump.org link-layer header types registry).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Largest captured length of one frame accepted, bytes: Wireshark's
/// `WTAP_MAX_PACKET_SIZE_STANDARD` (tshark refuses larger records too). A
/// record claiming more is an error before any of its bytes are read.
pub const MAX_RECORD_LEN: u32 = 262_144;
/// Largest pcapng block accepted, bytes (header and trailer included): a
/// packet block of [`MAX_RECORD_LEN`] with room to spare for options, name
/// resolution and statistics blocks.
pub const MAX_BLOCK_LEN: u32 = 16 << 20;

/// The two capture file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureFormat {
    /// Classic pcap (libpcap savefile).
    Pcap,
    /// pcapng.
    PcapNg,
}

/// Why a capture could not be read. Each message is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaptureError {
    /// The input is empty.
    Empty,
    /// The input does not start with a pcap or pcapng magic number.
    UnknownMagic {
        /// The first (up to) 4 bytes, big-endian.
        magic: u32,
    },
    /// The global header (pcap) or Section Header Block (pcapng) is cut short or
    /// invalid.
    BadHeader {
        /// The format the magic number announced.
        format: CaptureFormat,
        /// What is wrong.
        reason: &'static str,
    },
    /// The link type is not Ethernet (1).
    UnsupportedLinkType {
        /// The link type number from the file.
        link_type: u32,
        /// The frame that would have been read from it (pcapng), or `None`
        /// (pcap: the global header).
        frame: Option<u64>,
    },
    /// A record header (pcap) or block (pcapng) runs past the end of the file.
    Truncated {
        /// The number the next frame would have had (1-based).
        frame: u64,
        /// Byte offset of the record or block in the file.
        offset: usize,
        /// Bytes the record or block claims (header included), if known.
        needed: Option<u64>,
        /// Bytes left in the file from `offset`.
        available: usize,
    },
    /// A pcapng block is malformed.
    BadBlock {
        /// The number the next frame would have had (1-based).
        frame: u64,
        /// Byte offset of the block in the file.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record (pcap) or block (pcapng) claims more bytes than this tool
    /// reads for one ([`MAX_RECORD_LEN`], [`MAX_BLOCK_LEN`]).
    RecordTooLarge {
        /// The number the next frame would have had (1-based).
        frame: u64,
        /// Byte offset of the record or block in the file.
        offset: usize,
        /// Bytes it claims.
        claimed: u64,
        /// The limit.
        limit: u32,
    },
    /// Reading the input failed.
    Read {
        /// Byte offset where reading failed.
        offset: usize,
        /// The I/O error's message.
        message: String,
    },
    /// A pcapng packet names an interface with no Interface Description Block.
    UnknownInterface {
        /// The frame (1-based).
        frame: u64,
        /// The interface ID it names.
        interface: u32,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Empty => write!(f, "empty file: not a pcap or pcapng capture"),
            CaptureError::UnknownMagic { magic } => write!(
                f,
                "not a pcap or pcapng file (magic number 0x{magic:08x}; expected \
                 a1b2c3d4, a1b23c4d, their byte swaps, or 0a0d0d0a)"
            ),
            CaptureError::BadHeader { format, reason } => {
                let name = match format {
                    CaptureFormat::Pcap => "pcap global header",
                    CaptureFormat::PcapNg => "pcapng section header block",
                };
                write!(f, "damaged {name}: {reason}")
            }
            CaptureError::UnsupportedLinkType { link_type, frame } => {
                let name = format!("{:?}", DataLink::from(*link_type));
                if let Some(n) = frame {
                    write!(f, "frame {n}: ")?;
                }
                write!(
                    f,
                    "unsupported link type {link_type} ({name}): only Ethernet (1) is supported"
                )
            }
            CaptureError::Truncated {
                frame,
                offset,
                needed,
                available,
            } => {
                write!(
                    f,
                    "truncated capture: frame {frame} at byte offset {offset} "
                )?;
                match needed {
                    Some(n) => write!(f, "needs {n} bytes but only {available} remain"),
                    None => write!(f, "has only {available} bytes of its header"),
                }
            }
            CaptureError::BadBlock {
                frame,
                offset,
                reason,
            } => write!(
                f,
                "damaged pcapng block at byte offset {offset} (frame {frame}): {reason}"
            ),
            CaptureError::RecordTooLarge {
                frame,
                offset,
                claimed,
                limit,
            } => write!(
                f,
                "frame {frame} at byte offset {offset} claims {claimed} bytes, more than the {limit} a record may hold (a damaged or hostile capture)"
            ),
            CaptureError::Read { offset, message } => {
                write!(f, "read error at byte offset {offset}: {message}")
            }
            CaptureError::UnknownInterface { frame, interface } => write!(
                f,
                "frame {frame}: interface {interface} has no interface description block"
            ),
        }
    }
}

impl std::error::Error for CaptureError {}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedFrame<'a> {
    /// Frame number, 1-based (as in Wireshark).
    pub number: u64,
    /// Capture time, since the Unix epoch (0 for a pcapng Simple Packet
    /// Block, which has none).
    pub time: Duration,
    /// The captured bytes (an Ethernet frame, normally without FCS).
    pub data: &'a [u8],
    /// Length of the frame on the wire, bytes, as the record says (may exceed
    /// `data.len()` when the capture's snap length cut it).
    pub orig_len: u32,
}

/// A frame of a capture with its capture time (since the Unix epoch),
/// owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedFrame {
    /// Capture time.
    pub time: Duration,
    /// The frame (Ethernet, as captured).
    pub data: Vec<u8>,
}

/// Every frame of a capture held in memory, with its capture time, in file
/// order (the frames of a file: [`super::read_timed`]).
///
/// # Errors
/// As [`Frames`]: the first [`CaptureError`] of a damaged capture.
pub fn read_all(data: &[u8]) -> Result<Vec<TimedFrame>, CaptureError> {
    Frames::new(data)?
        .map(|f| {
            f.map(|f| TimedFrame {
                time: f.time,
                data: f.data.to_vec(),
            })
        })
        .collect()
}

/// The frames of a capture held in memory, in file order. Yields
/// `Err(CaptureError)` once for a damaged file and then stops.
pub struct Frames<'a> {
    data: &'a [u8],
    offset: usize,
    core: Core,
}

impl fmt::Debug for Frames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frames")
            .field("format", &self.core.format)
            .field("offset", &self.offset)
            .field("next_number", &self.core.next_number)
            .field("done", &self.core.done)
            .finish()
    }
}

impl<'a> Frames<'a> {
    /// Detect the format by magic number and read the file header.
    ///
    /// Errors: [`CaptureError::Empty`], [`CaptureError::UnknownMagic`],
    /// [`CaptureError::BadHeader`], [`CaptureError::UnsupportedLinkType`] (pcap).
    pub fn new(data: &'a [u8]) -> Result<Frames<'a>, CaptureError> {
        let (core, offset) = Core::new(data)?;
        Ok(Frames { data, offset, core })
    }

    /// The format of the file.
    pub fn format(&self) -> CaptureFormat {
        self.core.format
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<CapturedFrame<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.core.done {
                return None;
            }
            let data: &'a [u8] = self.data.get(self.offset..).unwrap_or(&[]);
            let step = self.core.step(data, self.offset);
            let item = match step {
                Ok(Step::Skip(used)) => {
                    self.offset += used;
                    continue;
                }
                Ok(Step::End) => None,
                Ok(Step::Need { claimed, .. }) => {
                    Some(Err(self.core.truncated(self.offset, claimed, data.len())))
                }
                Ok(Step::Frame {
                    number,
                    time,
                    at,
                    len,
                    orig_len,
                    used,
                }) => {
                    self.offset += used;
                    Some(Ok(CapturedFrame {
                        number,
                        time,
                        data: data.get(at..at + len).unwrap_or(&[]),
                        orig_len,
                    }))
                }
                Err(e) => Some(Err(e)),
            };
            if !matches!(item, Some(Ok(_))) {
                self.core.done = true;
            }
            return item;
        }
    }
}

impl core::iter::FusedIterator for Frames<'_> {}

/// Bytes read from the source at a time.
const READ_CHUNK: usize = 64 * 1024;

/// The frames of a capture read from a stream (a file, a pipe), in file
/// order, holding at most one record in memory (plus a read buffer of
/// 64 KiB): the magic number is checked from the first 4 bytes, before
/// anything else is read, and each record's length is checked against
/// [`MAX_RECORD_LEN`] / [`MAX_BLOCK_LEN`] before its bytes are read. A
/// lending iterator: [`CaptureReader::next_frame`] returns a frame that
/// borrows the reader until the next call.
pub struct CaptureReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Bytes of `buf` read from the source.
    filled: usize,
    /// Start of the unparsed bytes in `buf`.
    pos: usize,
    /// File offset of `buf[0]`.
    base: usize,
    eof: bool,
    core: Core,
}

impl<R> fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.core.format)
            .field("offset", &(self.base + self.pos))
            .field("next_number", &self.core.next_number)
            .finish()
    }
}

/// Read from `src` into `buf[*filled..]` until `*filled >= want` or the
/// source ends. `buf` is storage: it only grows, to `want` (or `chunk`, the
/// most read at once), so its bytes are zeroed once, not per read.
fn fill_to<R: io::Read>(
    src: &mut R,
    buf: &mut Vec<u8>,
    filled: &mut usize,
    want: usize,
    chunk: usize,
    eof: &mut bool,
    offset: usize,
) -> Result<(), CaptureError> {
    while *filled < want && !*eof {
        let size = want.max(chunk);
        if buf.len() < size {
            buf.resize(size, 0);
        }
        let end = if chunk == 0 { want } else { buf.len() };
        match src.read(&mut buf[*filled..end]) {
            Ok(0) => *eof = true,
            Ok(n) => *filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(CaptureError::Read {
                    offset: offset + *filled,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

impl<R: io::Read> CaptureReader<R> {
    /// Check the magic number (from the first 4 bytes), then read the file
    /// header.
    ///
    /// Errors: as [`Frames::new`], and [`CaptureError::Read`].
    pub fn new(mut src: R) -> Result<CaptureReader<R>, CaptureError> {
        let mut buf = Vec::new();
        let mut filled = 0;
        let mut eof = false;
        // Exactly what is needed to tell the header's length: 4 bytes, then
        // 12 (pcapng), then the header.
        let mut want = 4;
        let hlen = loop {
            fill_to(&mut src, &mut buf, &mut filled, want, 0, &mut eof, 0)?;
            match header_len(&buf[..filled])? {
                Some(n) => break n,
                None if eof => break filled,
                None => want = 12,
            }
        };
        fill_to(&mut src, &mut buf, &mut filled, hlen, 0, &mut eof, 0)?;
        let (core, used) = Core::new(&buf[..filled])?;
        Ok(CaptureReader {
            src,
            buf,
            filled,
            pos: used,
            base: 0,
            eof,
            core,
        })
    }

    /// The format of the file.
    pub fn format(&self) -> CaptureFormat {
        self.core.format
    }

    /// Make `need` unparsed bytes available (fewer at the end of the input).
    fn fill(&mut self, need: usize) -> Result<(), CaptureError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.filled, 0);
            self.filled -= self.pos;
            self.base += self.pos;
            self.pos = 0;
        }
        fill_to(
            &mut self.src,
            &mut self.buf,
            &mut self.filled,
            need,
            READ_CHUNK,
            &mut self.eof,
            self.base,
        )
    }

    /// The next frame, `None` at the end; an error once, then `None`.
    pub fn next_frame(&mut self) -> Option<Result<CapturedFrame<'_>, CaptureError>> {
        loop {
            if self.core.done {
                return None;
            }
            let data = self.buf.get(self.pos..self.filled).unwrap_or(&[]);
            let available = data.len();
            let offset = self.base + self.pos;
            let step = self.core.step(data, offset);
            match step {
                Ok(Step::Skip(used)) => self.pos += used,
                Ok(Step::End | Step::Need { .. }) if !self.eof => {
                    let need = match step {
                        Ok(Step::Need { need, .. }) => need,
                        _ => 1,
                    };
                    if let Err(e) = self.fill(need) {
                        self.core.done = true;
                        return Some(Err(e));
                    }
                }
                Ok(Step::End) => {
                    self.core.done = true;
                    return None;
                }
                Ok(Step::Need { claimed, .. }) => {
                    self.core.done = true;
                    return Some(Err(self.core.truncated(offset, claimed, available)));
                }
                Ok(Step::Frame {
                    number,
                    time,
                    at,
                    len,
                    orig_len,
                    used,
                }) => {
                    let start = self.pos + at;
                    self.pos += used;
                    return Some(Ok(CapturedFrame {
                        number,
                        time,
                        data: self.buf.get(start..start + len).unwrap_or(&[]),
                        orig_len,
                    }));
                }
                Err(e) => {
                    self.core.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// What kind of file `path` is, when it is not one a capture can be read
/// from: `Some("a character device")` etc.; `None` for a regular file, a
/// pipe or a FIFO (read as streams).
pub fn unreadable_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() || t.is_fifo() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Open a capture file for [`CaptureReader`]: a regular file, or a pipe or
/// FIFO (`/dev/stdin`, `<(tcpdump -w - ...)`); devices (`/dev/zero`,
/// `/dev/urandom`), directories and sockets are refused with a message
/// naming what they are.
///
/// # Errors
/// The message of the failed `open`/`stat`, or of the refusal.
pub fn open_capture(path: &std::path::Path) -> Result<CaptureReader<std::fs::File>, OpenError> {
    let f = std::fs::File::open(path).map_err(|e| OpenError::Io(e.to_string()))?;
    let meta = f.metadata().map_err(|e| OpenError::Io(e.to_string()))?;
    if let Some(kind) = unreadable_kind(&meta) {
        return Err(OpenError::NotACapture(format!(
            "is {kind}, not a capture file (give a pcap or pcapng file, or a pipe)"
        )));
    }
    CaptureReader::new(f).map_err(OpenError::Capture)
}

/// Why [`open_capture`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// Opening or examining the file failed (the I/O error's message).
    Io(String),
    /// The path names something that is not a file or pipe.
    NotACapture(String),
    /// The file is not a capture, or its header is damaged.
    Capture(CaptureError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(m) | OpenError::NotACapture(m) => f.write_str(m),
            OpenError::Capture(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {}
