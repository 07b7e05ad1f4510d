//! Reading capture files held in memory: classic pcap and pcapng, told apart by
//! their magic number, through the `pcap-file` crate.
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
//! The global header, the record headers and the pcapng block framing (including
//! Section Header and Interface Description Blocks) are parsed by `pcap-file`; the
//! bodies of the three packet blocks are read here with bounds-checked code, so
//! that no per-packet option list is allocated and block types this tool does not
//! need (name resolution, statistics) are never parsed. Nothing here panics on
//! any input: every inconsistency is a [`CaptureError`].

use core::fmt;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::PcapNgParser;
use pcap_file::{DataLink, Endianness, PcapError};

/// `LINKTYPE_ETHERNET` (tcpdump.org link-layer header types registry).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Length of the classic pcap global header, bytes.
const PCAP_HEADER_LEN: usize = 24;
/// Length of a classic pcap record header, bytes.
const PCAP_RECORD_HEADER_LEN: usize = 16;
/// pcapng Section Header Block type (also its magic number).
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
/// pcapng Enhanced Packet Block type.
const PCAPNG_EPB: u32 = 6;
/// pcapng Simple Packet Block type.
const PCAPNG_SPB: u32 = 3;
/// pcapng (obsolete) Packet Block type.
const PCAPNG_PB: u32 = 2;

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
    /// The captured bytes (an Ethernet frame, normally without FCS).
    pub data: &'a [u8],
    /// Length of the frame on the wire, bytes, as the record says (may exceed
    /// `data.len()` when the capture's snap length cut it).
    pub orig_len: u32,
}

enum State {
    Pcap(PcapParser),
    PcapNg(Box<PcapNgParser>),
}

/// The frames of a capture held in memory, in file order. Yields
/// `Err(CaptureError)` once for a damaged file and then stops.
pub struct Frames<'a> {
    data: &'a [u8],
    offset: usize,
    next_number: u64,
    state: State,
    done: bool,
    format: CaptureFormat,
}

impl fmt::Debug for Frames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frames")
            .field("format", &self.format)
            .field("offset", &self.offset)
            .field("next_number", &self.next_number)
            .field("done", &self.done)
            .finish()
    }
}

fn be_u32(data: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    for (d, s) in b.iter_mut().zip(data) {
        *d = *s;
    }
    u32::from_be_bytes(b)
}

impl<'a> Frames<'a> {
    /// Detect the format by magic number and read the file header.
    ///
    /// Errors: [`CaptureError::Empty`], [`CaptureError::UnknownMagic`],
    /// [`CaptureError::BadHeader`], [`CaptureError::UnsupportedLinkType`] (pcap).
    pub fn new(data: &'a [u8]) -> Result<Frames<'a>, CaptureError> {
        if data.is_empty() {
            return Err(CaptureError::Empty);
        }
        let magic = be_u32(data);
        match magic {
            0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 => Self::new_pcap(data),
            PCAPNG_SHB => Self::new_pcapng(data),
            // (From a file shorter than 4 bytes, `magic` holds what there is.)
            _ => Err(CaptureError::UnknownMagic { magic }),
        }
    }

    fn new_pcap(data: &'a [u8]) -> Result<Frames<'a>, CaptureError> {
        let bad = |reason| CaptureError::BadHeader {
            format: CaptureFormat::Pcap,
            reason,
        };
        if data.len() < PCAP_HEADER_LEN {
            return Err(bad("file shorter than the 24-byte global header"));
        }
        let (rest, parser) = PcapParser::new(data).map_err(|e| match e {
            PcapError::InvalidField(r) => bad(r),
            _ => bad("unreadable global header"),
        })?;
        let link_type = u32::from(parser.header().datalink);
        if link_type != LINKTYPE_ETHERNET {
            return Err(CaptureError::UnsupportedLinkType {
                link_type,
                frame: None,
            });
        }
        Ok(Frames {
            data,
            offset: data.len() - rest.len(),
            next_number: 1,
            state: State::Pcap(parser),
            done: false,
            format: CaptureFormat::Pcap,
        })
    }

    fn new_pcapng(data: &'a [u8]) -> Result<Frames<'a>, CaptureError> {
        let (rest, parser) = PcapNgParser::new(data).map_err(|e| CaptureError::BadHeader {
            format: CaptureFormat::PcapNg,
            reason: match e {
                PcapError::IncompleteBuffer => "section header block runs past the end of the file",
                PcapError::InvalidField(r) => r,
                _ => "unreadable section header block",
            },
        })?;
        Ok(Frames {
            data,
            offset: data.len() - rest.len(),
            next_number: 1,
            state: State::PcapNg(Box::new(parser)),
            done: false,
            format: CaptureFormat::PcapNg,
        })
    }

    /// The format of the file.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    fn next_pcap(&mut self) -> Option<Result<CapturedFrame<'a>, CaptureError>> {
        let State::Pcap(parser) = &self.state else {
            return None;
        };
        let rest = self.data.get(self.offset..).unwrap_or(&[]);
        if rest.is_empty() {
            return None;
        }
        let truncated = |needed| CaptureError::Truncated {
            frame: self.next_number,
            offset: self.offset,
            needed,
            available: rest.len(),
        };
        // Raw records: lenient like tshark, an incl_len above the snap length or
        // above orig_len is accepted as long as the bytes are there.
        let (rem, raw) = match parser.next_raw_packet(rest) {
            Ok(x) => x,
            Err(_) if rest.len() < PCAP_RECORD_HEADER_LEN => return Some(Err(truncated(None))),
            Err(_) => {
                let incl = match parser.header().endianness {
                    Endianness::Big => be_u32(rest.get(8..12).unwrap_or(&[])),
                    Endianness::Little => be_u32(rest.get(8..12).unwrap_or(&[])).swap_bytes(),
                };
                return Some(Err(truncated(Some(
                    PCAP_RECORD_HEADER_LEN as u64 + u64::from(incl),
                ))));
            }
        };
        let len = raw.data.len();
        let start = self.offset + PCAP_RECORD_HEADER_LEN;
        let frame = self.data.get(start..start + len).unwrap_or(&[]);
        self.offset = self.data.len() - rem.len();
        let number = self.next_number;
        self.next_number += 1;
        Some(Ok(CapturedFrame {
            number,
            data: frame,
            orig_len: raw.orig_len,
        }))
    }

    fn next_pcapng(&mut self) -> Option<Result<CapturedFrame<'a>, CaptureError>> {
        let State::PcapNg(parser) = &mut self.state else {
            return None;
        };
        loop {
            let rest = self.data.get(self.offset..).unwrap_or(&[]);
            if rest.is_empty() {
                return None;
            }
            let block_offset = self.offset;
            let frame = self.next_number;
            let (rem, raw) = match parser.next_raw_block(rest) {
                Ok(x) => x,
                Err(PcapError::IncompleteBuffer) => {
                    let needed = (rest.len() >= 8).then(|| {
                        let len = be_u32(rest.get(4..8).unwrap_or(&[]));
                        u64::from(match parser.section().endianness {
                            Endianness::Big => len,
                            Endianness::Little => len.swap_bytes(),
                        })
                    });
                    return Some(Err(CaptureError::Truncated {
                        frame,
                        offset: block_offset,
                        needed,
                        available: rest.len(),
                    }));
                }
                Err(e) => {
                    return Some(Err(CaptureError::BadBlock {
                        frame,
                        offset: block_offset,
                        reason: match e {
                            PcapError::InvalidField(r) => r,
                            PcapError::Utf8Error(_) | PcapError::FromUtf8Error(_) => {
                                "invalid UTF-8 in an option"
                            }
                            PcapError::InvalidInterfaceId(_) => "invalid interface ID",
                            _ => "unreadable block",
                        },
                    }))
                }
            };
            self.offset = self.data.len() - rem.len();
            let body: &'a [u8] = match raw.body {
                std::borrow::Cow::Borrowed(b) => b,
                // `next_raw_block` on a slice always borrows; an owned body would
                // be a change in pcap-file: treat it as an empty block.
                std::borrow::Cow::Owned(_) => &[],
            };
            let endianness = parser.section().endianness;
            let bad = |reason| CaptureError::BadBlock {
                frame,
                offset: block_offset,
                reason,
            };
            let u32_at = |off: usize| -> Option<u32> {
                let b: [u8; 4] = body.get(off..off + 4)?.try_into().ok()?;
                Some(match endianness {
                    Endianness::Big => u32::from_be_bytes(b),
                    Endianness::Little => u32::from_le_bytes(b),
                })
            };
            let u16_at = |off: usize| -> Option<u16> {
                let b: [u8; 2] = body.get(off..off + 2)?.try_into().ok()?;
                Some(match endianness {
                    Endianness::Big => u16::from_be_bytes(b),
                    Endianness::Little => u16::from_le_bytes(b),
                })
            };
            // (interface, captured bytes, original length)
            let (interface, data, orig_len) = match raw.type_ {
                PCAPNG_EPB => {
                    let (Some(interface), Some(cap), Some(orig)) =
                        (u32_at(0), u32_at(12), u32_at(16))
                    else {
                        return Some(Err(bad("enhanced packet block shorter than 20 bytes")));
                    };
                    let Some(data) = body.get(20..).and_then(|d| d.get(..cap as usize)) else {
                        return Some(Err(bad(
                            "enhanced packet block: captured length runs past the block",
                        )));
                    };
                    (interface, data, orig)
                }
                PCAPNG_PB => {
                    let (Some(interface), Some(cap), Some(orig)) =
                        (u16_at(0), u32_at(12), u32_at(16))
                    else {
                        return Some(Err(bad("packet block shorter than 20 bytes")));
                    };
                    let Some(data) = body.get(20..).and_then(|d| d.get(..cap as usize)) else {
                        return Some(Err(bad(
                            "packet block: captured length runs past the block",
                        )));
                    };
                    (u32::from(interface), data, orig)
                }
                PCAPNG_SPB => {
                    let Some(orig) = u32_at(0) else {
                        return Some(Err(bad("simple packet block shorter than 4 bytes")));
                    };
                    // Captured length = min(original length, interface 0's snap
                    // length, what the block holds).
                    let snap = parser.interfaces().first().map_or(0, |i| i.snaplen);
                    let room = body.len().saturating_sub(4);
                    let mut cap = (orig as usize).min(room);
                    if snap != 0 {
                        cap = cap.min(snap as usize);
                    }
                    (0, body.get(4..4 + cap).unwrap_or(&[]), orig)
                }
                _ => continue,
            };
            let Some(idb) = parser.interfaces().get(interface as usize) else {
                return Some(Err(CaptureError::UnknownInterface { frame, interface }));
            };
            let link_type = u32::from(idb.linktype);
            if link_type != LINKTYPE_ETHERNET {
                return Some(Err(CaptureError::UnsupportedLinkType {
                    link_type,
                    frame: Some(frame),
                }));
            }
            self.next_number += 1;
            return Some(Ok(CapturedFrame {
                number: frame,
                data,
                orig_len,
            }));
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<CapturedFrame<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = match self.state {
            State::Pcap(_) => self.next_pcap(),
            State::PcapNg(_) => self.next_pcapng(),
        };
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

impl core::iter::FusedIterator for Frames<'_> {}
